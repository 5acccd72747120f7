"""Image folders and arrays the data tests make for themselves."""

from pathlib import Path

import numpy as np


def class_images(rng, count: int, shape=(20, 20, 3), classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A learnable toy set: each class a random pattern plus noise, uint8 NHWC, labels 0..classes-1."""
    patterns = rng.integers(0, 256, (classes, *shape))
    labels = np.arange(count) % classes
    noise = rng.normal(0, 30, (count, *shape))
    return np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8), labels.astype(np.int64)


def write_folder(
    root: Path, images: np.ndarray, labels: np.ndarray, names=("bag", "trouser", "tshirt"), fmt: str = "png"
) -> Path:
    """`images` as root/<class name>/<i>.<fmt> (lossless PNG by default)."""
    from PIL import Image

    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / names[label]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = image[..., 0] if image.shape[-1] == 1 else image
        Image.fromarray(pixels).save(folder / f"{i:04d}.{fmt}")
    return root
