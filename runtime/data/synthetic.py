"""A learnable toy set for tests and benches."""

from __future__ import annotations

import numpy as np

from .dataset import Dataset


def synthetic(split: str, shape=(28, 28, 1), count: int = 2048, classes: int = 10, seed: int = 0) -> Dataset:
    """A learnable toy set: each class is a fixed random pattern plus noise (for tests and benches)."""
    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 256, (classes, *shape))
    rng = np.random.default_rng(seed + (split != "train"))
    labels = rng.integers(0, classes, count)
    noise = rng.normal(0, 40, (count, *shape))
    images = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
    return Dataset(images, labels.astype(np.int64), f"synthetic/{split}")
