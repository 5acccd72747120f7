"""Reading the stored datasets' files with limits: a gzip stream (refusing a "gzip bomb")
and LeCun's IDX format, whose header is checked before the body is read."""

from __future__ import annotations

import gzip
import io
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..inputs.files import read_limited

_IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

MAX_FILE_BYTES = 1 << 30  # one data file as stored (Fashion-MNIST's largest is 47 MB raw)
GZIP_RATIO = 64  # a gzip file may hold at most this many times its size (the
# datasets compress 2-5x; a "gzip bomb" a thousand-fold)


def _stream(path: Path):
    """A file object over `path`'s data, gunzipped if it is gzip; the limit its contents
    may reach. Only regular files are read (never a FIFO or device: inputs.files)."""
    raw = read_limited(path, "data", MAX_FILE_BYTES, DataError)
    if raw[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=io.BytesIO(raw)), min(MAX_FILE_BYTES, GZIP_RATIO * len(raw) + (1 << 20))
    return io.BytesIO(raw), len(raw)


def _read(f, n: int, path: Path) -> bytes:
    try:
        return f.read(n)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: corrupt gzip data ({str(exc) or type(exc).__name__}: truncated or damaged)") from None


def _read_bytes(path: Path) -> bytes:
    f, limit = _stream(path)
    data = _read(f, limit + 1, path)
    if len(data) > limit:
        raise DataError(f"{path}: gunzips to more than {limit} bytes ({GZIP_RATIO}x the file): refused")
    return data


def read_idx(path: str | Path, expect_tail: tuple | None = None) -> np.ndarray:
    """An IDX file (LeCun's MNIST format): magic 0x0000TTDD, DD sizes, then the data.

    The header is read and checked (and `expect_tail`, the sizes after the first, if
    given) before the body is: a file declaring more than it may hold is refused
    without allocating it."""
    path = Path(path)
    f, limit = _stream(path)
    head = _read(f, 4, path)
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_DTYPES or head[3] == 0:
        raise DataError(f"{path}: not an IDX file (expected magic 0x0000TTDD, got {head.hex() or 'nothing'})")
    dtype, ndim = np.dtype(_IDX_DTYPES[head[2]]), head[3]
    dims = _read(f, 4 * ndim, path)
    header = 4 + 4 * ndim
    if len(dims) < 4 * ndim:
        raise DataError(f"{path}: IDX header cut short ({4 + len(dims)} bytes, expected {header})")
    shape = struct.unpack(f">{ndim}I", dims)
    if expect_tail is not None and (ndim != 1 + len(expect_tail) or shape[1:] != tuple(expect_tail)):
        raise DataError(
            f"{path}: IDX shape {shape}, expected (N, {', '.join(map(str, expect_tail))})"
            if expect_tail
            else f"{path}: IDX shape {shape}, expected (N,)"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes > limit:
        raise DataError(
            f"{path}: IDX shape {shape} needs {header + nbytes} bytes, more than the file can hold ({limit})"
        )
    body = _read(f, nbytes + 1, path)
    if len(body) != nbytes:
        raise DataError(
            f"{path}: IDX shape {shape} needs {header + nbytes} bytes, file has "
            f"{header + len(body)}{' or more' if len(body) > nbytes else ''}"
        )
    return np.frombuffer(body, dtype).reshape(shape)
