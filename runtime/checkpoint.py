"""Atomic checkpoints: training state in one .npz, written to a temp file, fsynced, renamed.

Integer weights keep their exponents; everything needed to continue exactly (epoch,
batch within the epoch, global step, seed) is stored beside them.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .errors import DataError
from .numerics import QTensor

FORMAT = 1


def atomic_write(path: Path, write) -> None:
    """Call `write(file)` on a temp file beside `path`, fsync it, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
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


def save(path: Path, state: dict, meta: dict) -> None:
    arrays, exponents = {}, {}
    for name, value in state.items():
        if isinstance(value, QTensor):
            arrays[name] = value.q
            exponents[name] = int(value.e)
        else:
            arrays[name] = np.asarray(value)
    header = json.dumps({**meta, "format": FORMAT, "exponents": exponents})
    atomic_write(path, lambda f: np.savez(f, __meta__=np.frombuffer(header.encode(), np.uint8), **arrays))


def load(path: Path) -> tuple[dict, dict]:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["__meta__"]).decode())
            exponents = meta.pop("exponents")
            state = {}
            for name in data.files:
                if name == "__meta__":
                    continue
                state[name] = QTensor(data[name], exponents[name]) if name in exponents else data[name]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: not a dsptrain checkpoint ({exc})") from None
    if meta.get("format") != FORMAT:
        raise DataError(f"{path}: checkpoint format {meta.get('format')} is not {FORMAT}")
    return state, meta
