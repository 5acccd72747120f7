"""A dataset: uint8 images (N, H, W, C), int64 labels, the class names when it has them;
seeded batches, class selection, and the stratified validation split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DataError


@dataclass
class Dataset:
    """uint8 NHWC images and int64 labels 0..classes-1.

        data = dsptrain.data.Dataset(images, labels)             # arrays you hold
        data = dsptrain.data.Dataset.from_folder("photos/", (64, 64, 3))
    The Trainer checks a Dataset's images and labels by the Python API's contract
    (contract.py) when it is handed one.
    `images` may be a NumPy memory map (an image folder's decoding cache): a batch reads
    only its rows."""

    images: np.ndarray
    labels: np.ndarray
    name: str = "arrays"
    origin: str = ""  # the file (or directory) the data came from, for messages
    classes: tuple[str, ...] | None = None  # class names by label (an image folder's subfolders)

    def __post_init__(self):
        if len(self.images) != len(self.labels):
            raise DataError(f"{self.origin or self.name}: {len(self.images)} images but {len(self.labels)} labels")

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
        return self.subset(np.arange(count), self.name)

    def subset(self, index: np.ndarray, name: str) -> Dataset:
        """The samples at `index` (sorted, so a memory map is read in order)."""
        index = np.sort(np.asarray(index, np.int64))
        return Dataset(self.images[index], self.labels[index], name, self.origin, self.classes)

    @classmethod
    def from_folder(cls, directory, input_shape, cache_dir=None, progress: bool = False) -> Dataset:
        """An image folder (one subfolder per class), decoded to `input_shape` (H, W, C)."""
        from .folder import load_folder  # Pillow is imported only when a folder is read

        return load_folder(directory, input_shape, cache_dir, progress)


def order(count: int, seed: int | None, epoch: int) -> np.ndarray:
    """The sample order of an epoch: shuffled by (seed, epoch), or as stored when seed is None."""
    index = np.arange(count)
    if seed is not None:
        np.random.default_rng([seed, epoch]).shuffle(index)
    return index


def batches(data: Dataset, batch_size: int, seed: int | None, epoch: int = 0, start: int = 0):
    """Yield (images, labels) batches; shuffled by (seed, epoch) when seed is not None.

    `start` skips the first batches, so a resumed epoch sees exactly the batches it
    had left. The last batch may be smaller.
    """
    for index in batch_indices(len(data), batch_size, seed, epoch, start):
        yield data.images[index], data.labels[index]


def batch_indices(count: int, batch_size: int, seed: int | None, epoch: int = 0, start: int = 0):
    """The sample indices of each batch of an epoch, from batch `start` on."""
    index = order(count, seed, epoch)
    for first in range(start * batch_size, count, batch_size):
        yield index[first : first + batch_size]


def batch_count(data: Dataset, batch_size: int) -> int:
    return -(-len(data) // batch_size)


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
    names = tuple(data.classes[c] for c in classes) if data.classes else None
    return Dataset(
        data.images[keep],
        relabel[data.labels[keep]],
        f"{data.name}[classes {','.join(map(str, classes))}]",
        data.origin,
        names,
    )


def check_labels(data: Dataset, num_classes: int, source) -> None:
    """Labels must index the model's outputs: 0..num_classes-1."""
    if len(data) and (int(data.labels.max()) >= num_classes or int(data.labels.min()) < 0):
        raise DataError(
            f"{data.origin or data.name}: labels span {int(data.labels.min())}..{int(data.labels.max())}, "
            f"but {source} sets model.num_classes {num_classes} (labels 0..{num_classes - 1}); "
            f"choose labels with data.classes or set model.num_classes"
        )


STREAMS = {"val": 0x5EED_0FF, "test": 0x7E57}  # each split its own random stream, never the epochs' shuffle


def split_off(data: Dataset, fraction: float, seed: int, part: str = "val") -> tuple[Dataset, Dataset]:
    """(the rest, `part`): `fraction` of each class's samples, drawn by `seed`, held out.

    Stratified: every class keeps its share in both parts (rounded; a class of one
    sample stays in training). The split depends on the seed and the labels alone, so
    a resumed run holds out the same samples."""
    if not 0.0 < fraction < 1.0:
        raise DataError(f"{data.name}: data.{part}_fraction {fraction} must be between 0 and 1")
    rng = np.random.default_rng([seed, STREAMS[part]])
    held = []
    for label in np.unique(data.labels):
        members = np.flatnonzero(data.labels == label)
        take = int(round(fraction * len(members))) if len(members) > 1 else 0
        held.append(rng.permutation(members)[:take])
    held = np.concatenate(held) if held else np.zeros(0, np.int64)
    if not len(held):
        raise DataError(
            f"{data.origin or data.name}: data.{part}_fraction {fraction} of {len(data)} samples "
            f"holds out none; raise it"
        )
    keep = np.setdiff1d(np.arange(len(data)), held)
    if not len(keep):
        raise DataError(f"{data.origin or data.name}: data.{part}_fraction {fraction} leaves no training sample")
    return data.subset(keep, data.name), data.subset(held, f"{data.name}[{part}]")
