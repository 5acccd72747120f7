"""Fashion-MNIST from its IDX files (gzip or raw), by default from Debian's package
dataset-fashion-mnist; given to a 32x32x3 model (the CIFAR-shaped ResNets) it is padded to
32x32 and its gray channel repeated (`as_32x32_rgb`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .idx import read_idx

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_CLASSES = (
    "t-shirt",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle-boot",
)


def _find(directory: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if os.path.lexists(directory / name):  # a FIFO or broken link is found, and refused by the reader
            return directory / name
    raise DataError(
        f"{directory}: missing {stem}.gz (or {stem})"
        + (
            f"; install the Debian package {FASHION_MNIST_PACKAGE} (apt-get install {FASHION_MNIST_PACKAGE})"
            if directory == FASHION_MNIST_DIR
            else ""
        )
    )


def load_fashion_mnist(split: str = "train", path: str | Path | None = None) -> Dataset:
    directory = Path(path) if path else FASHION_MNIST_DIR
    if not directory.is_dir():
        hint = (
            f"; install the Debian package {FASHION_MNIST_PACKAGE} (apt-get install {FASHION_MNIST_PACKAGE})"
            if path is None
            else f"; leave data.path out to use {FASHION_MNIST_DIR} from the Debian package {FASHION_MNIST_PACKAGE}"
        )
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
        raise DataError(
            f"{labels_path}: expected {len(images)} uint8 labels (as {images_path.name} has images), "
            f"got {labels.dtype} {labels.shape}"
        )
    if labels.max(initial=0) > 9:
        raise DataError(f"{labels_path}: labels must be 0..9, found {int(labels.max())}")
    return Dataset(
        images[..., None], labels.astype(np.int64), f"fashion-mnist/{split}", str(labels_path), FASHION_MNIST_CLASSES
    )


RGB32 = (32, 32, 3)


def as_32x32_rgb(data: Dataset) -> Dataset:
    """28x28x1 images as 32x32x3: 2 pixels of background (0) on every side, as LeNet-5's
    original 32x32 input framed MNIST, and the gray channel repeated three times."""
    if data.images.shape[1:] != (28, 28, 1):
        raise DataError(f"{data.name}: only 28x28x1 images pad to 32x32x3, these are {data.images.shape[1:]}")
    padded = np.pad(data.images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    return Dataset(
        np.ascontiguousarray(np.repeat(padded, 3, axis=3)),
        data.labels,
        f"{data.name}@32x32x3",
        data.origin,
        data.classes,
    )
