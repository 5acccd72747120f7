"""The datasets a run's `data:` section names: a stored one (`dataset:`), an image folder
(`folder:`), an `.npz` (`npz:` with keys `x:` and `y:`) or two `.npy` files (`npy:`); the
test split from `data.test` (a source of its own), else `test_fraction` of the training
source, else the stored dataset's own test files, else none.

`config` is duck-typed (config.DataConfig): this room reads no YAML.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from .arrays import from_arrays, read_npy, read_npz
from .cifar10 import load_cifar10
from .dataset import Dataset, select_classes, split_off
from .fashion_mnist import RGB32, as_32x32_rgb, load_fashion_mnist
from .synthetic import synthetic


def own_source(source) -> str | None:
    """The key naming a user's own data in `source` ("folder", "npz", "npy"), or None."""
    for key in ("folder", "npz", "npy"):
        if getattr(source, key, None):
            return key
    return None


def read_source(source, input_shape, num_classes: int, cache_dir=None, progress: bool = False) -> Dataset:
    """A user's own data (`folder`, `npz` or `npy` in `source`) for a model of `input_shape`."""
    kind = own_source(source)
    if kind == "folder":
        from .folder import load_folder  # Pillow only when a folder is read

        return load_folder(Path(source.folder), input_shape, cache_dir, progress)
    if kind == "npz":
        images, labels = read_npz(source.npz, source.x, source.y)
        return from_arrays(images, labels, input_shape, num_classes, f"npz:{Path(source.npz).name}", str(source.npz))
    images, labels = read_npy(source.npy[0]), read_npy(source.npy[1])
    return from_arrays(images, labels, input_shape, num_classes, f"npy:{Path(source.npy[0]).name}", str(source.npy[0]))


def load_dataset(
    config, split: str, input_shape=None, num_classes: int | None = None, progress: bool = False
) -> Dataset | None:
    """The `split` ("train" / "test") a run's `data:` section names, cut to its limits; None
    when the run has no test data (its own source, no `test:` and no `test_fraction`)."""
    data = _whole(config, split, input_shape, num_classes, progress)
    if data is None:
        return None
    if input_shape is not None and data.images.shape[1:] != tuple(input_shape):
        raise DataError(
            f"{data.name}: images have shape {data.images.shape[1:]}, the model expects {tuple(input_shape)}"
        )
    if getattr(config, "classes", None) is not None:
        data = select_classes(data, config.classes)
    return data.limit(config.train_limit if split == "train" else config.test_limit)


def _whole(config, split, input_shape, num_classes, progress):
    shape = tuple(input_shape) if input_shape is not None else (28, 28, 1)
    classes = num_classes or 10
    cache = getattr(config, "cache_dir", None)
    if own_source(config):
        test = getattr(config, "test", None)
        if split == "test" and test is not None:
            data = read_source(test, shape, classes, cache, progress)
            _same_classes(config, data)
            return data
        fraction = getattr(config, "test_fraction", None)
        if split == "test" and not fraction:
            return None
        data = read_source(config, shape, classes, cache, progress)
        if fraction:
            train, test = split_off(data, fraction, 0, "test")  # seed 0: the same test set whatever train.seed
            return train if split == "train" else test
        return data
    if config.dataset in (None, "fashion-mnist"):
        data = load_fashion_mnist(split, config.path)
        if input_shape is not None and tuple(input_shape) == RGB32:
            data = as_32x32_rgb(data)
        return data
    if config.dataset == "cifar10":
        return load_cifar10(split, config.path)
    return synthetic(split, shape)


def _same_classes(config, test: Dataset) -> None:
    """A test folder must name the classes the training folder does, in the same order."""
    if not (getattr(config, "folder", None) and test.classes):
        return
    from .folder import list_folder

    train_classes = list_folder(Path(config.folder))[0]
    if test.classes != train_classes:
        raise DataError(
            f"{test.origin}: classes {list(test.classes)} differ from {config.folder}'s "
            f"{list(train_classes)}; the test folder needs the same class subfolders"
        )
