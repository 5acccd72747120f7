"""Data: uint8 NHWC images and int64 labels from wherever they are.

- dataset.py: `Dataset`, seeded batches, class selection, stratified splits;
- sources.py: what a run's `data:` section names, dispatched to
  fashion_mnist.py / cifar10.py / synthetic.py (the stored sets; idx.py their files),
  folder.py (an image folder, Pillow; decode_cache.py keeps the decoded images) and
  arrays.py (.npz / .npy files and arrays held in Python);
- contract.py: what the Python API accepts as images and labels;
- augment.py: seeded per-sample augmentation of uint8 batches; loader.py: an epoch's
  batches prepared on a background thread; normalize.py: mean/std as each recipe's input table.

A missing or corrupt file is a DataError naming the path and what was expected.
"""

from .arrays import from_arrays
from .augment import Augment
from .cifar10 import CIFAR_RECORD, load_cifar10
from .contract import as_images, as_labels
from .dataset import Dataset, batch_count, batch_indices, batches, check_labels, select_classes, split_off
from .fashion_mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    FASHION_MNIST_PACKAGE,
    RGB32,
    as_32x32_rgb,
    load_fashion_mnist,
)
from .idx import read_idx
from .loader import Loader
from .normalize import Normalize
from .sources import load_dataset, own_source
from .synthetic import synthetic

__all__ = [
    "Augment",
    "CIFAR_RECORD",
    "Dataset",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "Loader",
    "Normalize",
    "RGB32",
    "as_32x32_rgb",
    "as_images",
    "as_labels",
    "batch_count",
    "batch_indices",
    "batches",
    "check_labels",
    "from_arrays",
    "load_cifar10",
    "load_dataset",
    "load_fashion_mnist",
    "own_source",
    "read_idx",
    "select_classes",
    "split_off",
    "synthetic",
]
