"""Atomic checkpoints: training state in one .npz, written to a temp file, fsynced, renamed.

Integer weights keep their exponents; everything needed to continue exactly (epoch,
batch within the epoch, global step, seed) is stored beside them.

Format 2 (written now) is an ordinary uncompressed .npz (NumPy can open it) with:
- a manifest in `__meta__`: every array's dtype, shape, SHA-256 and exponent;
- the SHA-256 of every byte before it as the zip archive's comment (the file's last 64
  bytes), so a truncated or bit-flipped file is found whichever byte changed.
Loading never unpickles (no object dtype: headers are parsed, then raw bytes read),
reads at most a bound the caller gives (about twice the state's size), and checks
names, dtypes, shapes, checksums, finiteness and exponents before anything is used.
Format 1 (no manifest, no digest) still loads, with every check but the checksums.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .errors import CheckpointError
from .inputs.files import read_limited, temp_prefix
from .numerics import QTensor

FORMAT = 2
OLD_FORMATS = (1,)
META = "__meta__"
DIGEST_HEX = 64  # SHA-256 in hex, the zip comment
DTYPES = frozenset({"int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"})
EXPONENTS = (-126, 127)  # q * 2**e stays a normal float32
MAX_META_BYTES = 4 << 20
MAX_ARRAYS = 10_000
MAX_BYTES = 8 << 30  # without an expected state: the largest file read


def atomic_write(path: Path, write) -> None:
    """Call `write(file)` on a temp file beside `path`, fsync it, then rename over `path`.

    The temp file is named `.<name>.<pid>.*`: a run started after a kill -9 removes the
    dead writer's leftovers (inputs.files.reap_stale_temps)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def _write_npz(f, arrays: dict, meta: dict) -> None:
    header = json.dumps(meta).encode()
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        zf.comment = b"0" * DIGEST_HEX
        for name, array in [(META, np.frombuffer(header, np.uint8)), *arrays.items()]:
            with zf.open(f"{name}.npy", "w", force_zip64=array.nbytes > (1 << 30)) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
    size = f.seek(0, io.SEEK_END)
    f.seek(0)
    digest, left = hashlib.sha256(), size - DIGEST_HEX
    while left:
        chunk = f.read(min(left, 1 << 20))
        digest.update(chunk)
        left -= len(chunk)
    f.seek(size - DIGEST_HEX)
    f.write(digest.hexdigest().encode())


def save(path: Path, state: dict, meta: dict) -> None:
    arrays, manifest = {}, {}
    for name, value in state.items():
        array = np.ascontiguousarray(value.q if isinstance(value, QTensor) else np.asarray(value))
        arrays[name] = array
        manifest[name] = {
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "sha256": _sha256(array),
            "exponent": int(value.e) if isinstance(value, QTensor) else None,
        }
    header = {**meta, "format": FORMAT, "arrays": manifest}
    atomic_write(path, lambda f: _write_npz(f, arrays, header))


# ---------------------------------------------------------------- loading


def _signed(raw: bytes) -> bool:
    """Whether `raw` ends in a format-2 trailer: an end-of-central-directory record whose
    comment is the 64-hex-digit digest."""
    eocd = raw[-DIGEST_HEX - 22 : -DIGEST_HEX]
    return len(eocd) == 22 and eocd[:4] == b"PK\x05\x06" and int.from_bytes(eocd[20:22], "little") == DIGEST_HEX


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, fail) -> np.ndarray:
    """One .npy member: header parsed (never unpickled), dtype allowed, size exact."""
    name = info.filename[:-4]
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(
                version
            )
            if reader is None:
                fail(f"array {name}", f"unknown .npy version {version}")
            shape, fortran, dtype = reader(f)
            if dtype.name not in DTYPES or dtype.hasobject or dtype.fields:
                fail(f"array {name}", f"dtype {dtype} is not a tensor dtype ({', '.join(sorted(DTYPES))})")
            if any(not isinstance(n, int) or n < 0 for n in shape):
                fail(f"array {name}", f"shape {shape} is not a shape")
            count = math.prod(shape)
            nbytes = count * dtype.itemsize
            if nbytes != info.file_size - f.tell():
                fail(
                    f"array {name}",
                    f"shape {shape} of {dtype} needs {nbytes} bytes, the file holds {info.file_size - f.tell()}",
                )
            data = f.read(nbytes)
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
        fail(f"array {name}", f"unreadable ({str(exc).splitlines()[0][:200]})")
    if len(data) != nbytes:
        fail(f"array {name}", f"cut short ({len(data)} of {nbytes} bytes)")
    array = np.frombuffer(data, dtype).copy()
    return array.reshape(shape, order="F" if fortran else "C")


def _members(path, raw: bytes, fail) -> dict[str, np.ndarray]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        fail(None, f"not a readable checkpoint: {str(exc)[:200]} (truncated, or not a dsptrain .npz)")
    if len(infos) > MAX_ARRAYS:
        fail(None, f"holds {len(infos)} entries, more than {MAX_ARRAYS}")
    names = [i.filename for i in infos]
    twice = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) != len(names) else []
    if twice:
        fail(f"array {twice[0][:-4]}", "stored twice")
    out = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            fail(f"entry {info.filename!r}", "is not a .npy array")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            fail(f"array {info.filename[:-4]}", "is compressed or encrypted (checkpoints store arrays plainly)")
        if info.file_size > len(raw):
            fail(f"array {info.filename[:-4]}", f"claims {info.file_size} bytes, more than the file")
        out[info.filename[:-4]] = _read_member(zf, info, fail)
    return out


def _meta(arrays: dict, fail) -> dict:
    header = arrays.pop(META, None)
    if header is None:
        fail(META, "missing: not a dsptrain checkpoint")
    if header.dtype != np.uint8 or header.ndim != 1 or header.size > MAX_META_BYTES:
        fail(META, f"is {header.dtype} {header.shape}, expected up to {MAX_META_BYTES} bytes of JSON")
    try:
        meta = json.loads(header.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        fail(META, f"is not JSON ({str(exc)[:120]})")
    if not isinstance(meta, dict):
        fail(META, f"is a JSON {type(meta).__name__}, expected an object")
    return meta


def _manifest(meta: dict, arrays: dict, fail) -> dict[str, int | None]:
    """Check every array against the manifest (format 2); return name -> exponent."""
    version = meta.get("format")
    if version in OLD_FORMATS:
        exponents = meta.pop("exponents", {})
        if not isinstance(exponents, dict) or not set(exponents) <= set(arrays):
            fail("exponents", f"name arrays the file lacks: {sorted(set(exponents) - set(arrays))[:5]}")
        return {name: exponents.get(name) for name in arrays}
    if version != FORMAT:
        fail(
            "format",
            f"{version!r} is not a checkpoint format this dsptrain reads "
            f"({', '.join(map(str, (FORMAT, *OLD_FORMATS)))})",
        )
    manifest = meta.pop("arrays", None)
    if not isinstance(manifest, dict):
        fail("arrays", "the manifest is missing")
    missing, extra = sorted(set(manifest) - set(arrays)), sorted(set(arrays) - set(manifest))
    if missing:
        fail(f"array {missing[0]}", "is in the manifest but not in the file")
    if extra:
        fail(f"array {extra[0]}", "is in the file but not in the manifest")
    exponents = {}
    for name, array in arrays.items():
        entry = manifest[name]
        if not isinstance(entry, dict):
            fail(f"array {name}", f"manifest entry {entry!r} is not an object")
        if entry.get("dtype") != array.dtype.name or entry.get("shape") != list(array.shape):
            fail(
                f"array {name}",
                f"is {array.dtype.name} {tuple(array.shape)}, the manifest says "
                f"{entry.get('dtype')} {tuple(entry.get('shape') or ())}",
            )
        if entry.get("sha256") != _sha256(array):
            fail(f"array {name}", "checksum does not match the manifest: the data is damaged")
        exponents[name] = entry.get("exponent")
    return exponents


def _values(arrays: dict, exponents: dict, fail) -> dict:
    state = {}
    for name, array in arrays.items():
        e = exponents.get(name)
        if e is not None:
            if isinstance(e, bool) or not isinstance(e, int) or not EXPONENTS[0] <= e <= EXPONENTS[1]:
                fail(f"array {name}", f"exponent {e!r} is outside {EXPONENTS[0]}..{EXPONENTS[1]}")
            if array.dtype == np.int8 and array.size and int(array.min()) < -127:
                fail(f"array {name}", f"int8 value {int(array.min())} is outside -127..127")
            state[name] = QTensor(array, e)
            continue
        if array.dtype.kind == "f" and array.size and not np.isfinite(array).all():
            bad = np.flatnonzero(~np.isfinite(array.ravel()))
            fail(
                f"array {name}",
                f"{bad.size} values are not finite (first {array.ravel()[bad[0]]} at flat index {int(bad[0])})",
            )
        state[name] = array
    return state


def _check_expected(state: dict, expect: dict, fail) -> None:
    missing, extra = sorted(set(expect) - set(state)), sorted(set(state) - set(expect))
    if missing:
        fail(f"array {missing[0]}", f"is missing ({len(missing)} arrays of this run are)")
    if extra:
        fail(f"array {extra[0]}", "is not an array of this run's model and recipe")
    for name, want in expect.items():
        got = state[name]
        if isinstance(want, QTensor) != isinstance(got, QTensor):
            fail(
                f"array {name}",
                "integer tensor and exponent expected"
                if isinstance(want, QTensor)
                else "plain array expected, the file gives an exponent",
            )
        w, g = (want.q, got.q) if isinstance(want, QTensor) else (np.asarray(want), got)
        if w.dtype != g.dtype or w.shape != g.shape:
            fail(f"array {name}", f"is {g.dtype} {g.shape}, this run's is {w.dtype} {w.shape}")


def expected_bytes(state: dict) -> int:
    return sum((v.q if isinstance(v, QTensor) else np.asarray(v)).nbytes for v in state.values())


def load(path: Path, expect: dict | None = None, identity: dict | None = None) -> tuple[dict, dict]:
    """(state, meta) of the checkpoint at `path`; CheckpointError naming the file, the
    part and the problem. With `expect` (a state of the run loading it) the arrays must
    be exactly its names, dtypes and shapes, and the file at most about twice its size;
    `identity` (e.g. model and recipe names) must match the file's fields first."""
    path = Path(path)

    def fail(key, message):
        raise CheckpointError(path, key, message)

    limit = MAX_BYTES if expect is None else 2 * expected_bytes(expect) + (1 << 20) + 512 * len(expect)
    raw = read_limited(path, "checkpoint", limit, lambda m: CheckpointError(path, None, m.removeprefix(f"{path}: ")))
    if raw[:1] == b"\x80" or raw[:2] == b"\x93N":
        fail(None, "is a pickle or a bare .npy file, not a dsptrain checkpoint (pickles are never loaded)")
    if raw[:4] != b"PK\x03\x04":
        fail(None, f"is not a dsptrain checkpoint (expected a .npz, it starts with {raw[:8].hex() or 'nothing'})")
    signed = _signed(raw)
    if signed and hashlib.sha256(raw[:-DIGEST_HEX]).hexdigest().encode() != raw[-DIGEST_HEX:]:
        try:  # name the damaged array when the structure still reads
            arrays = _members(path, raw, fail)
            _manifest(_meta(arrays, fail), arrays, fail)
        except CheckpointError as exc:
            raise CheckpointError(path, exc.key, f"{exc.detail} (the file's checksum does not match)") from None
        fail(None, "the file's checksum does not match: it was altered or damaged after it was written")
    arrays = _members(path, raw, fail)
    meta = _meta(arrays, fail)
    if not signed and meta.get("format") not in OLD_FORMATS:
        fail(None, "truncated or altered: the checksum trailer is missing")
    for key, want in (identity or {}).items():
        if meta.get(key) != want:
            fail(key, f"{meta.get(key)!r}: the checkpoint is of another {key}; this run's is {want!r}")
    exponents = _manifest(meta, arrays, fail)
    state = _values(arrays, exponents, fail)
    if expect is not None:
        _check_expected(state, expect, fail)
    meta.pop("format", None)
    return state, meta
