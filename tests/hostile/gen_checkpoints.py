"""A seeded generator of damaged checkpoints, by class of fault.

Damage to the bytes (truncation, bit flips, overwritten runs) must be caught by the
file's digest whatever byte it hits. Crafted files carry a valid digest and manifest
(the faults a digest cannot see): arrays missing, extra, of another dtype or shape, NaN,
exponents out of range, fields of another model, recipe or run. Then files that are not
checkpoints (pickles, .npy, compressed .npz, text), and paths that are not files.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
import shutil
import zipfile
from pathlib import Path

import numpy as np
from dsptrain import checkpoint
from dsptrain.numerics import QTensor

from .harness import Case


def read(path: Path) -> tuple[dict, dict]:
    state, meta = checkpoint.load(path)
    return state, meta


def craft(path: Path, state: dict, meta: dict, manifest_edit=None, meta_raw: bytes | None = None) -> None:
    """A format-2 checkpoint of `state` and `meta` with a correct digest (and manifest,
    unless `manifest_edit(manifest)` changes it)."""
    arrays, manifest = {}, {}
    for name, value in state.items():
        array = np.ascontiguousarray(value.q if isinstance(value, QTensor) else value)
        arrays[name] = array
        manifest[name] = {
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "sha256": checkpoint._sha256(array),
            "exponent": value.e if isinstance(value, QTensor) else None,
        }
    if manifest_edit:
        manifest_edit(manifest)
    header = {**meta, "format": meta.get("format", checkpoint.FORMAT), "arrays": manifest}
    with open(path, "w+b") as f:
        if meta_raw is None:
            checkpoint._write_npz(f, arrays, header)
        else:  # __meta__ bytes as given
            with zipfile.ZipFile(f, "w") as zf:
                with zf.open("__meta__.npy", "w") as m:
                    np.lib.format.write_array(m, np.frombuffer(meta_raw, np.uint8))


def write_format1(path: Path, state: dict, meta: dict) -> None:
    """A checkpoint as this project wrote it before format 2 (no manifest, no digest)."""
    arrays = {k: (v.q if isinstance(v, QTensor) else v) for k, v in state.items()}
    exps = {k: int(v.e) for k, v in state.items() if isinstance(v, QTensor)}
    header = json.dumps({**meta, "format": 1, "exponents": exps})
    with open(path, "wb") as f:
        np.savez(f, __meta__=np.frombuffer(header.encode(), np.uint8), **arrays)


def damaged_checkpoints(root: Path, trained: dict, seed: int = 23) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    config, out = trained["niti"]
    fp_config, fp_out = trained["fp32"]
    good = (out / "checkpoint.npz").read_bytes()
    state, meta = read(out / "checkpoint.npz")
    fp_state, fp_meta = read(fp_out / "checkpoint.npz")

    def case_dir():
        d = root / f"ck{len(cases):03d}"
        d.mkdir()
        return d

    def add(label, d, needles=(), run=config):
        ck = d / "checkpoint.npz"
        cases.append(Case(label, ["train", str(run), "--out", str(d), "--resume", "--quiet"], (str(ck), *needles)))

    def raw(label, data: bytes, needles=()):
        d = case_dir()
        (d / "checkpoint.npz").write_bytes(data)
        add(label, d, needles)

    def crafted(label, st, mt, needles, run=config, **kw):
        d = case_dir()
        craft(d / "checkpoint.npz", st, mt, **kw)
        add(label, d, needles, run)

    # -- damaged bytes
    for n in sorted(rng.sample(range(1, len(good)), 12)):
        raw(f"truncated at {n}", good[:n])
    raw("truncated to nothing", b"")
    for _ in range(15):
        pos, bit = rng.randrange(len(good)), rng.randrange(8)
        flipped = bytearray(good)
        flipped[pos] ^= 1 << bit
        raw(f"bit {bit} of byte {pos} flipped", bytes(flipped))
    for _ in range(3):
        pos = rng.randrange(len(good) - 64)
        junk = bytearray(good)
        junk[pos : pos + 64] = bytes(rng.randrange(256) for _ in range(64))
        raw(f"64 bytes overwritten at {pos}", bytes(junk))
    raw("junk appended", good + b"\0" * 100)
    raw("oversized", good + bytes(8 << 20), ("more than a checkpoint may be",))

    # -- crafted: valid digest and manifest, wrong content
    names = sorted(state)
    for name in rng.sample(names, 3):
        crafted(f"missing {name}", {k: v for k, v in state.items() if k != name}, meta, (f"array {name}", "missing"))
    crafted("extra array", {**state, "fc9.w": QTensor(np.zeros((3, 3), np.int8), -7)}, meta, ("array fc9.w",))
    crafted("extra plain array", {**state, "momentum": np.zeros(4, np.float32)}, meta, ("array momentum",))
    for name in rng.sample(names, 3):
        q = state[name]
        crafted(
            f"{name} as int16", {**state, name: QTensor(q.q.astype(np.int16), q.e)}, meta, (f"array {name}", "int16")
        )
        crafted(f"{name} reshaped", {**state, name: QTensor(q.q.reshape(-1), q.e)}, meta, (f"array {name}",))
        crafted(f"{name} plain", {**state, name: q.q}, meta, (f"array {name}",))
    for name in rng.sample(names, 2):
        q = state[name]
        for e in (200, -300, 128):
            crafted(f"{name} exponent {e}", {**state, name: QTensor(q.q, e)}, meta, (f"array {name}", str(e)))
        bad = q.q.copy()
        bad.flat[0] = -128
        crafted(f"{name} holds -128", {**state, name: QTensor(bad, q.e)}, meta, (f"array {name}", "-128"))
    fp_names = sorted(fp_state)
    for name, value in zip(rng.sample(fp_names, 3), (np.nan, np.inf, -np.inf)):
        bad = fp_state[name].copy()
        bad.flat[rng.randrange(bad.size)] = value
        crafted(
            f"fp32 {name} holds {value}",
            {**fp_state, name: bad},
            fp_meta,
            (f"array {name}", "not finite"),
            run=fp_config,
        )
    crafted(
        "fp32 float64",
        {**fp_state, fp_names[0]: fp_state[fp_names[0]].astype(np.float64)},
        fp_meta,
        (f"array {fp_names[0]}", "float64"),
        run=fp_config,
    )
    crafted("another recipe's checkpoint", fp_state, fp_meta, ("recipe", "'fp32'"))
    crafted("another model's", state, {**meta, "model": "vgg11"}, ("model", "'vgg11'"))
    crafted("another recipe named", state, {**meta, "recipe": "octo"}, ("recipe", "'octo'"))
    for key, value in (
        ("epoch", -1),
        ("epoch", "2"),
        ("epoch", 1.5),
        ("global_step", 999),
        ("global_step", None),
        ("batch_in_epoch", 10**6),
        ("batch_in_epoch", True),
        ("seed", -5),
        ("seed", 2**40),
        ("rescale", {"x": [1, 2]}),
        ("rescale", "none"),
        ("epoch_sums", [1, "x", 0]),
        ("epoch_sums", [5, float("nan"), 1]),
        ("epoch_sums", [1, 0.5, 9]),
    ):
        crafted(f"meta {key}={value!r}", state, {**meta, key: value}, (key,))
    crafted(
        "manifest checksum lies",
        state,
        meta,
        (f"array {names[0]}", "checksum"),
        manifest_edit=lambda m: m[names[0]].update(sha256="0" * 64),
    )
    crafted(
        "manifest dtype lies",
        state,
        meta,
        (f"array {names[1]}",),
        manifest_edit=lambda m: m[names[1]].update(dtype="int32"),
    )
    crafted(
        "manifest shape lies",
        state,
        meta,
        (f"array {names[1]}",),
        manifest_edit=lambda m: m[names[1]].update(shape=[1, 2, 3]),
    )
    crafted(
        "manifest names another array", state, meta, ("array x",), manifest_edit=lambda m: m.clear() or m.update(x=1)
    )
    crafted("format 99", state, {**meta, "format": 99}, ("format", "99"))
    crafted("meta not JSON", state, meta, ("__meta__",), meta_raw=b"{not json")
    crafted("meta a list", state, meta, ("__meta__",), meta_raw=b"[1, 2]")
    crafted("meta deep", state, meta, ("__meta__",), meta_raw=b"[" * 100000 + b"]" * 100000)

    # -- not checkpoints at all
    raw("a pickle", pickle.dumps({"conv1.w": np.zeros(3)}), ("pickle",))
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    raw("an object .npy", buf.getvalue(), ("pickle",))
    buf = io.BytesIO()
    np.savez(buf, w=np.array([{"a": 1}], dtype=object))
    raw("object array in an npz", buf.getvalue())
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        __meta__=np.frombuffer(json.dumps({**meta, "format": 1, "exponents": {}}).encode(), np.uint8),
        **{k: v.q for k, v in state.items()},
    )
    raw("compressed npz", buf.getvalue(), ("compressed",))
    raw("text", b"epoch: 3\n")
    raw("gzip of a checkpoint", gzip.compress(good))
    raw("random bytes", bytes(rng.randrange(256) for _ in range(4096)))
    d = case_dir()
    write_format1(d / "checkpoint.npz", {**state, names[0]: QTensor(state[names[0]].q, 999)}, meta)
    add("format 1 with a bad exponent", d, (f"array {names[0]}", "999"))
    d = case_dir()
    write_format1(d / "checkpoint.npz", {k: v for k, v in state.items() if k != names[2]}, meta)
    add("format 1 missing an array", d, (f"array {names[2]}",))

    # -- paths that are not files
    d = case_dir()
    (d / "checkpoint.npz").mkdir()
    add("checkpoint is a directory", d, ("directory",))
    d = case_dir()
    os.mkfifo(d / "checkpoint.npz")
    add("checkpoint is a FIFO", d, ("FIFO",))
    d = case_dir()
    os.symlink(d / "checkpoint.npz", d / "checkpoint.npz")
    add("checkpoint is a symlink loop", d, ("symlink loop",))
    d = case_dir()
    os.symlink("/dev/zero", d / "checkpoint.npz")
    add("checkpoint is /dev/zero", d, ("device",))
    d = case_dir()
    os.symlink(d / "gone.npz", d / "checkpoint.npz")
    add("checkpoint is a dangling symlink", d, ("does not exist",))
    return cases


def format1_copy(out: Path, dest: Path) -> Path:
    """The run's output directory with its checkpoint rewritten in format 1."""
    shutil.copytree(out, dest)
    state, meta = read(out / "checkpoint.npz")
    write_format1(dest / "checkpoint.npz", state, meta)
    return dest
