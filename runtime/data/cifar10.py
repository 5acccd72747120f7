"""CIFAR-10's binary version (data_batch_1..5.bin, test_batch.bin): a label byte and
3072 CHW bytes per record."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from .dataset import Dataset
from .idx import _read_bytes

CIFAR_RECORD = 1 + 32 * 32 * 3


def load_cifar10(split: str, path: str | Path | None) -> Dataset:
    """CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin): label byte + 3072 CHW bytes."""
    if path is None:
        raise DataError(
            "CIFAR-10 needs data.path: a directory with data_batch_1.bin .. data_batch_5.bin "
            "and test_batch.bin (the 'binary version' of CIFAR-10)"
        )
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
    return Dataset(
        np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels), f"cifar10/{split}", str(directory)
    )
