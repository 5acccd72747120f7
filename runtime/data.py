"""Datasets as uint8 images (N, H, W, C) and int64 labels, and a seeded batch iterator.

Fashion-MNIST comes from IDX files (gzip or raw), by default from Debian's package
dataset-fashion-mnist; CIFAR-10 from its binary batches at a path the user gives.
A missing or corrupt file is a DataError naming the path and what was expected.
Fashion-MNIST given to a 32x32x3 model (the CIFAR-shaped ResNets) is padded to 32x32
and its gray channel repeated (`as_32x32_rgb`), so the ResNets train on it without
CIFAR-10 at hand.
"""
from __future__ import annotations

import gzip
import os
import io
import math
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataError
from .inputs.files import read_limited

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
CIFAR_RECORD = 1 + 32 * 32 * 3


@dataclass
class Dataset:
    images: np.ndarray   # uint8 (N, H, W, C)
    labels: np.ndarray   # int64 (N,)
    name: str
    origin: str = ""     # the file (or directory) the labels came from, for messages

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index) -> tuple[np.ndarray, np.ndarray]:
        """(images, labels) of `index`: `data[:64]` is a batch for Trainer.step."""
        return self.images[index], self.labels[index]

    def batches(self, batch_size: int, seed: int | None = None, epoch: int = 0):
        """Iterate over (images, labels) batches, shuffled by (seed, epoch) when seed is given."""
        return batches(self, batch_size, seed, epoch)

    def limit(self, count: int | None) -> Dataset:
        if count is None or count >= len(self):
            return self
        return Dataset(self.images[:count], self.labels[:count], self.name, self.origin)


MAX_FILE_BYTES = 1 << 30        # one data file as stored (Fashion-MNIST's largest is 47 MB raw)
GZIP_RATIO = 64                 # a gzip file may hold at most this many times its size (the
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
        raise DataError(f"{path}: corrupt gzip data ({str(exc) or type(exc).__name__}: "
                        f"truncated or damaged)") from None


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
        raise DataError(f"{path}: IDX shape {shape}, expected (N, {', '.join(map(str, expect_tail))})"
                        if expect_tail else f"{path}: IDX shape {shape}, expected (N,)")
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes > limit:
        raise DataError(f"{path}: IDX shape {shape} needs {header + nbytes} bytes, "
                        f"more than the file can hold ({limit})")
    body = _read(f, nbytes + 1, path)
    if len(body) != nbytes:
        raise DataError(f"{path}: IDX shape {shape} needs {header + nbytes} bytes, file has "
                        f"{header + len(body)}{' or more' if len(body) > nbytes else ''}")
    return np.frombuffer(body, dtype).reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if os.path.lexists(directory / name):   # a FIFO or broken link is found, and refused by the reader
            return directory / name
    raise DataError(f"{directory}: missing {stem}.gz (or {stem})" + (
        f"; install the Debian package {FASHION_MNIST_PACKAGE} (apt-get install {FASHION_MNIST_PACKAGE})"
        if directory == FASHION_MNIST_DIR else ""))


def load_fashion_mnist(split: str = "train", path: str | Path | None = None) -> Dataset:
    directory = Path(path) if path else FASHION_MNIST_DIR
    if not directory.is_dir():
        hint = (f"; install the Debian package {FASHION_MNIST_PACKAGE} (apt-get install {FASHION_MNIST_PACKAGE})"
                if path is None else f"; leave data.path out to use {FASHION_MNIST_DIR} from the Debian "
                                     f"package {FASHION_MNIST_PACKAGE}")
        raise DataError(f"Fashion-MNIST directory {directory} does not exist{hint}")
    prefix = "train" if split == "train" else "t10k"
    images_path = _find(directory, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(directory, f"{prefix}-labels-idx1-ubyte")
    images, labels = read_idx(images_path, (28, 28)), read_idx(labels_path, ())
    if not len(images):
        raise DataError(f"{images_path}: holds no images")
    if images.dtype != np.uint8:
        raise DataError(f"{images_path}: expected uint8 images of shape (N, 28, 28), got {images.dtype} {images.shape}")
    if labels.dtype != np.uint8 or len(labels) != len(images):
        raise DataError(f"{labels_path}: expected {len(images)} uint8 labels (as {images_path.name} has images), "
                        f"got {labels.dtype} {labels.shape}")
    if labels.max(initial=0) > 9:
        raise DataError(f"{labels_path}: labels must be 0..9, found {int(labels.max())}")
    return Dataset(images[..., None], labels.astype(np.int64), f"fashion-mnist/{split}", str(labels_path))


def load_cifar10(split: str, path: str | Path | None) -> Dataset:
    """CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin): label byte + 3072 CHW bytes."""
    if path is None:
        raise DataError("CIFAR-10 needs data.path: a directory with data_batch_1.bin .. data_batch_5.bin "
                        "and test_batch.bin (the 'binary version' of CIFAR-10)")
    directory = Path(path)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if split == "train" else ["test_batch.bin"]
    images, labels = [], []
    for name in names:
        file = directory / name
        raw = _read_bytes(file)
        if not raw or len(raw) % CIFAR_RECORD:
            raise DataError(f"{file}: {len(raw)} bytes is not a whole number of {CIFAR_RECORD}-byte records")
        records = np.frombuffer(raw, np.uint8).reshape(-1, CIFAR_RECORD)
        if records[:, 0].max() > 9:
            raise DataError(f"{file}: labels must be 0..9, found {int(records[:, 0].max())}")
        labels.append(records[:, 0].astype(np.int64))
        images.append(records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return Dataset(np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels), f"cifar10/{split}",
                   str(directory))


def synthetic(split: str, shape=(28, 28, 1), count: int = 2048, classes: int = 10, seed: int = 0) -> Dataset:
    """A learnable toy set: each class is a fixed random pattern plus noise (for tests and benches)."""
    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 256, (classes, *shape))
    rng = np.random.default_rng(seed + (split != "train"))
    labels = rng.integers(0, classes, count)
    noise = rng.normal(0, 40, (count, *shape))
    images = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
    return Dataset(images, labels.astype(np.int64), f"synthetic/{split}")


RGB32 = (32, 32, 3)


def as_32x32_rgb(data: Dataset) -> Dataset:
    """28x28x1 images as 32x32x3: 2 pixels of background (0) on every side, as LeNet-5's
    original 32x32 input framed MNIST, and the gray channel repeated three times."""
    if data.images.shape[1:] != (28, 28, 1):
        raise DataError(f"{data.name}: only 28x28x1 images pad to 32x32x3, these are {data.images.shape[1:]}")
    padded = np.pad(data.images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    return Dataset(np.ascontiguousarray(np.repeat(padded, 3, axis=3)), data.labels, f"{data.name}@32x32x3", data.origin)


def load_dataset(config, split: str, input_shape=None) -> Dataset:
    """The dataset a run's `data:` section names, cut to its limits."""
    if config.dataset == "fashion-mnist":
        data = load_fashion_mnist(split, config.path)
        if input_shape is not None and tuple(input_shape) == RGB32:
            data = as_32x32_rgb(data)
    elif config.dataset == "cifar10":
        data = load_cifar10(split, config.path)
    else:
        data = synthetic(split, input_shape or (28, 28, 1))
    if input_shape is not None and data.images.shape[1:] != tuple(input_shape):
        raise DataError(f"{data.name}: images have shape {data.images.shape[1:]}, the model expects {tuple(input_shape)}")
    if getattr(config, "classes", None) is not None:
        data = select_classes(data, config.classes)
    return data.limit(config.train_limit if split == "train" else config.test_limit)


def select_classes(data: Dataset, classes) -> Dataset:
    """Only the samples labelled one of `classes`, relabelled 0.. in the order given
    (fine-tuning a new head on some of a dataset's classes)."""
    classes = [int(c) for c in classes]
    missing = [c for c in classes if not np.any(data.labels == c)]
    if missing:
        raise DataError(f"{data.name}: data.classes {classes}: no sample is labelled {missing[0]}")
    keep = np.isin(data.labels, classes)
    relabel = np.full(int(max(data.labels.max(initial=0), max(classes))) + 1, -1, np.int64)
    relabel[classes] = np.arange(len(classes))
    return Dataset(data.images[keep], relabel[data.labels[keep]],
                   f"{data.name}[classes {','.join(map(str, classes))}]", data.origin)


def check_labels(data: Dataset, num_classes: int, source) -> None:
    """Labels must index the model's outputs: 0..num_classes-1."""
    if len(data) and (int(data.labels.max()) >= num_classes or int(data.labels.min()) < 0):
        raise DataError(f"{data.origin or data.name}: labels span {int(data.labels.min())}..{int(data.labels.max())}, "
                        f"but {source} sets model.num_classes {num_classes} (labels 0..{num_classes - 1}); "
                        f"choose labels with data.classes or set model.num_classes")


def batches(data: Dataset, batch_size: int, seed: int | None, epoch: int = 0, start: int = 0):
    """Yield (images, labels) batches; shuffled by (seed, epoch) when seed is not None.

    `start` skips the first batches, so a resumed epoch sees exactly the batches it
    had left. The last batch may be smaller.
    """
    order = np.arange(len(data))
    if seed is not None:
        np.random.default_rng([seed, epoch]).shuffle(order)
    for first in range(start * batch_size, len(data), batch_size):
        index = order[first:first + batch_size]
        yield data.images[index], data.labels[index]


def batch_count(data: Dataset, batch_size: int) -> int:
    return -(-len(data) // batch_size)
