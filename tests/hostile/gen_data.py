"""A seeded generator of corrupt datasets: small Fashion-MNIST-shaped IDX sets (and
CIFAR-10 binaries) damaged one file at a time, by class of fault: magic, dimensions,
counts, labels, truncation and gzip damage, declared sizes far beyond the file (a gzip
bomb), and paths that are not files. Each must be refused before the first step.
"""

from __future__ import annotations

import copy
import gzip
import os
import random
import struct
from pathlib import Path

import numpy as np
import yaml
from dsptrain.data import synthetic

from .gen_configs import BASE
from .harness import Case

FILES = {
    "train-images-idx3-ubyte": "images",
    "train-labels-idx1-ubyte": "labels",
    "t10k-images-idx3-ubyte": "images",
    "t10k-labels-idx1-ubyte": "labels",
}


def idx(array: np.ndarray, dtype_code: int = 0x08) -> bytes:
    return bytes([0, 0, dtype_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_fmnist(directory: Path, train: int = 64, test: int = 32, compress: bool = True) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    parts = {}
    for split, prefix, count in (("train", "train", train), ("test", "t10k", test)):
        data = synthetic(split, (28, 28, 1), count, 10, seed=3)
        parts[f"{prefix}-images-idx3-ubyte"] = idx(data.images[..., 0])
        parts[f"{prefix}-labels-idx1-ubyte"] = idx(data.labels.astype(np.uint8))
    for name, body in parts.items():
        (directory / (name + ".gz" if compress else name)).write_bytes(gzip.compress(body, 6) if compress else body)
    return parts


def run_file(root: Path, name: str, data: dict, model: dict | None = None) -> Path:
    doc = copy.deepcopy(BASE)
    doc["data"] = data
    if model:
        doc["model"].update(model)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def corrupt_datasets(root: Path, seed: int = 29) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []

    def add(label, damage, needles=(), compress=True, model=None):
        d = root / f"data{len(cases):03d}"
        parts = write_fmnist(d, compress=compress)
        target = damage(d, parts)
        config = run_file(root, f"run{len(cases):03d}", {"dataset": "fashion-mnist", "path": str(d)}, model)
        cases.append(
            Case(
                label,
                ["train", str(config), "--out", str(root / f"out{len(cases):03d}"), "--quiet"],
                (str(target), *needles),
            )
        )

    def replace(name, body, compress=True, gz=None):
        def damage(d, parts):
            for suffix in (".gz", ""):
                (d / (name + suffix)).unlink(missing_ok=True)
            path = d / (name + ".gz" if compress else name)
            path.write_bytes(gz if gz is not None else (gzip.compress(body) if compress else body))
            return path

        return damage

    def edit(name, fn, compress=True):
        def damage(d, parts):
            return replace(name, fn(bytearray(parts[name])), compress)(d, parts)

        return damage

    for name in FILES:
        add(f"{name}: wrong magic", edit(name, lambda b: b"\x01\x02" + b[2:]), ("not an IDX file",))
        add(f"{name}: unknown dtype", edit(name, lambda b: b[:2] + b"\x42" + b[3:]), ("not an IDX file",))
        add(
            f"{name}: truncated body",
            edit(name, lambda b: b[: len(b) - rng.randrange(1, min(200, len(b) - 8))]),
            ("needs",),
        )
        add(f"{name}: extra bytes", edit(name, lambda b: b + b"\0" * rng.randrange(1, 50)), ("needs",))
        add(f"{name}: header cut", edit(name, lambda b: b[: rng.randrange(4, 8)]), ("cut short",))

        def cut_gzip(d, parts, name=name):
            path = d / (name + ".gz")
            data = path.read_bytes()
            path.write_bytes(data[: rng.randrange(10, len(data) - 8)])
            return path

        add(f"{name}: truncated gzip", cut_gzip, ("gzip",))

        def bad_crc(d, parts, name=name):
            path = d / (name + ".gz")
            data = bytearray(path.read_bytes())
            data[-6] ^= 0x10
            path.write_bytes(bytes(data))
            return path

        add(f"{name}: gzip CRC damaged", bad_crc, ("gzip",))
    # dimensions and counts
    add(
        "images 27x28",
        edit("train-images-idx3-ubyte", lambda b: b[:12] + struct.pack(">I", 27) + b[16 : 16 + 64 * 27 * 28]),
        ("(N, 28, 28)",),
    )
    add("images 2-d", replace("train-images-idx3-ubyte", idx(np.zeros((64, 784), np.uint8))), ("(N, 28, 28)",))
    add("images int32", replace("train-images-idx3-ubyte", idx(np.zeros((64, 28, 28), ">i4"), 0x0C)), ("uint8",))
    add("labels 2-d", replace("train-labels-idx1-ubyte", idx(np.zeros((64, 2), np.uint8))), ("(N,)",))
    add("fewer labels than images", replace("train-labels-idx1-ubyte", idx(np.zeros(63, np.uint8))), ("64",))
    add("more test labels", replace("t10k-labels-idx1-ubyte", idx(np.zeros(40, np.uint8))), ("32",))
    add("label 10", replace("train-labels-idx1-ubyte", idx(np.full(64, 10, np.uint8))), ("10",))
    add("label 255 in test", replace("t10k-labels-idx1-ubyte", idx(np.full(32, 255, np.uint8))), ("255",))
    add("labels int32 negative", replace("train-labels-idx1-ubyte", idx(np.full(64, -1, ">i4"), 0x0C)), ("labels",))
    add(
        "labels beyond num_classes",
        lambda d, p: d / "train-labels-idx1-ubyte.gz",
        ("num_classes",),
        model={"num_classes": 5},
    )
    add("no images", replace("train-images-idx3-ubyte", idx(np.zeros((0, 28, 28), np.uint8))), ("images",))
    # declared sizes beyond the file: refused before allocating
    add(
        "gzip bomb",
        replace(
            "train-images-idx3-ubyte",
            None,
            gz=gzip.compress(bytes([0, 0, 8, 3]) + struct.pack(">3I", 1_000_000, 28, 28) + bytes(4 << 20), 9),
        ),
        ("more than",),
    )
    add(
        "huge count raw",
        replace("train-images-idx3-ubyte", bytes([0, 0, 8, 3]) + struct.pack(">3I", 2**32 - 1, 28, 28), compress=False),
        ("more than",),
    )
    add(
        "gzip then junk",
        replace("train-labels-idx1-ubyte", None, gz=gzip.compress(idx(np.zeros(64, np.uint8))) + b"junk!junk"),
        ("gzip",),
    )
    add("empty file", replace("t10k-images-idx3-ubyte", b"", compress=False), ("not an IDX file",))
    add("empty gzip", replace("t10k-images-idx3-ubyte", None, gz=b"\x1f\x8b"), ("gzip",))
    # paths that are not files

    def swap(name, make):
        def damage(d, parts):
            path = d / (name + ".gz")
            path.unlink()
            make(path)
            return path

        return damage

    add("images are a directory", swap("train-images-idx3-ubyte", lambda p: p.mkdir()), ("directory",))
    add("labels are a FIFO", swap("train-labels-idx1-ubyte", os.mkfifo), ("FIFO",))
    add("test images are a FIFO", swap("t10k-images-idx3-ubyte", os.mkfifo), ("FIFO",))
    add("images are /dev/zero", swap("train-images-idx3-ubyte", lambda p: os.symlink("/dev/zero", p)), ("device",))
    add("labels are a symlink loop", swap("t10k-labels-idx1-ubyte", lambda p: os.symlink(p, p)), ("symlink loop",))

    def missing(d, parts):
        (d / "t10k-labels-idx1-ubyte.gz").unlink()
        return d

    add("test labels missing", missing, ("t10k-labels-idx1-ubyte",))
    # CIFAR-10 binaries
    for label, body, needle in (
        ("cifar: partial record", bytes(3073 * 2 + 5), "3073"),
        ("cifar: label 12", bytes([12]) + bytes(3072), "12"),
        ("cifar: empty", b"", "3073"),
    ):
        d = root / f"cifar{len(cases):03d}"
        d.mkdir()
        good = bytes(3073 * 4)
        for i in range(1, 6):
            (d / f"data_batch_{i}.bin").write_bytes(good)
        (d / "test_batch.bin").write_bytes(good)
        target = d / f"data_batch_{rng.randrange(1, 6)}.bin"
        target.write_bytes(body)
        doc = copy.deepcopy(BASE)
        doc["data"] = {"dataset": "cifar10", "path": str(d)}
        doc["model"] = {"name": "vgg_small"}
        config = root / f"cifar{len(cases):03d}.yaml"
        config.write_text(yaml.safe_dump(doc))
        cases.append(
            Case(
                label,
                ["train", str(config), "--out", str(root / f"out{len(cases):03d}"), "--quiet"],
                (str(target), needle),
            )
        )
    return cases
