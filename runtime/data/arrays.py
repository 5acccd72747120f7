"""Arrays as a dataset: held in Python, or in an `.npz` file (two keys) or two `.npy` files.

Images follow the Python API's contract (contract.py: uint8 NHWC, other integers in
0..255, floats in [0, 1]; (N, H, W) is one channel); labels are integers. Files are
read with NumPy's own reader, never unpickling (allow_pickle=False), and bounded in size.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from ..errors import DataError, UserError
from ..inputs.files import check_regular, read_limited
from .contract import as_images, as_labels
from .dataset import Dataset

MAX_ARRAY_FILE_BYTES = 8 << 30  # one .npz or .npy file as stored


def from_arrays(
    images, labels, input_shape, classes: int, name: str = "arrays", origin: str = "", class_names=None
) -> Dataset:
    """`images` and `labels` checked by the input contract for a model of `input_shape` and `classes`."""
    where = origin or name
    try:
        images = as_images(images, input_shape)
        labels = as_labels(labels, len(images), classes)
    except UserError as exc:
        raise DataError(f"{where}: {exc}") from None
    if not len(images):
        raise DataError(f"{where}: holds no images")
    return Dataset(
        np.ascontiguousarray(images), labels, name, origin, tuple(class_names) if class_names is not None else None
    )


def read_npz(path, x_key: str, y_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) stored under `x_key` and `y_key` of the .npz file `path`."""
    path = Path(path)
    raw = read_limited(path, "npz", MAX_ARRAY_FILE_BYTES, DataError)
    try:
        archive = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not an .npz file ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: holds one array, not an .npz archive (give data.npy: [IMAGES.npy, LABELS.npy])")
    with archive:
        arrays = []
        for role, key in (("data.x", x_key), ("data.y", y_key)):
            if key not in archive.files:
                raise DataError(f"{path}: {role}: no array {key!r} (the file has {', '.join(archive.files) or 'none'})")
            try:
                arrays.append(archive[key])
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise DataError(f"{path}: array {key!r} cannot be read ({exc})") from None
    return arrays[0], arrays[1]


def read_npy(path) -> np.ndarray:
    """One array from the .npy file `path`, memory-mapped (a large image array is not copied)."""
    path = Path(path)
    problem = check_regular(path, "npy")
    if problem:
        raise DataError(f"{path}: {problem}")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: not an .npy file ({exc})") from None
