"""Augmentation of uint8 NHWC batches, vectorised over the batch, seeded per sample.

Each sample's random choices are Threefry words of (seed, epoch) at counter (its index in
the dataset, the choice): a sample looks the same whatever batch it lands in, and a run
resumed mid-epoch sees exactly the images the uninterrupted run saw. In the order they
apply (each off by default):

- `crop_padding: P`: pad P pixels of 0 on every side, cut the model's H x W at a random
  offset (torchvision's RandomCrop(size, padding=P));
- `resized_crop: [smin, smax]`: a random box of smin..smax of the area and aspect 3/4..4/3
  (log-uniform), resized to H x W by nearest pixel (RandomResizedCrop, nearest);
- `flip: true`: half the images mirrored left-right;
- `brightness: b`, `contrast: c`: pixels times a factor in [1-b, 1+b]; the distance from the
  image's mean times one in [1-c, 1+c] (ColorJitter's brightness and contrast).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..inputs import bounded
from ..numerics import threefry2x32

# the counter's second word names the choice, so adding one never changes the others
_OFFSET_Y, _OFFSET_X, _FLIP, _BRIGHTNESS, _CONTRAST, _AREA, _RATIO, _BOX_Y, _BOX_X = range(9)


@dataclass(frozen=True)
class Augment:
    crop_padding: int = bounded(0, 0, 1024)
    resized_crop: tuple[float, float] | None = None     # [smallest, largest] share of the area
    flip: bool = False
    brightness: float = bounded(0.0, 0.0, 1.0)
    contrast: float = bounded(0.0, 0.0, 1.0)

    @property
    def active(self) -> bool:
        return bool(self.crop_padding or self.resized_crop or self.flip or self.brightness or self.contrast)

    def problem(self) -> tuple[str, str] | None:
        """(key, why) of a bad setting, or None."""
        if self.resized_crop is not None:
            low, high = self.resized_crop
            if not 0.0 < low <= high <= 1.0:
                return "resized_crop", f"{list(self.resized_crop)}: expected 0 < smallest <= largest <= 1"
        return None


def uniform(seed: int, epoch: int, index: np.ndarray, choice: int) -> np.ndarray:
    """A uniform float64 in [0, 1) per sample of `index`, for random `choice`."""
    with np.errstate(over="ignore"):
        word, _ = threefry2x32((seed, epoch), index.astype(np.uint32), np.full(len(index), choice, np.uint32))
    return word.astype(np.float64) * (1.0 / 2**32)


def apply(augment: Augment, images: np.ndarray, index: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """`images` (uint8 N, H, W, C; the samples at dataset `index`) augmented; a new array."""
    if not augment.active or not len(images):
        return images
    out = np.asarray(images)
    if augment.crop_padding:
        out = _padded_crop(out, augment.crop_padding, index, seed, epoch)
    if augment.resized_crop:
        out = _resized_crop(out, augment.resized_crop, index, seed, epoch)
    if augment.flip:
        out = np.array(out)   # a memory map's rows or the caller's batch: never flipped in place
        mirrored = uniform(seed, epoch, index, _FLIP) < 0.5
        out[mirrored] = out[mirrored, :, ::-1]
    if augment.brightness or augment.contrast:
        out = _jitter(out, augment, index, seed, epoch)
    return out


def _gather(images: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """out[n, i, j] = images[n, rows[n, i], cols[n, j]] for every sample at once."""
    n = np.arange(len(images))[:, None, None]
    return images[n, rows[:, :, None], cols[:, None, :]]


def _padded_crop(images, pad, index, seed, epoch):
    _, height, width, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    top = (uniform(seed, epoch, index, _OFFSET_Y) * (2 * pad + 1)).astype(np.int64)
    left = (uniform(seed, epoch, index, _OFFSET_X) * (2 * pad + 1)).astype(np.int64)
    return _gather(padded, top[:, None] + np.arange(height), left[:, None] + np.arange(width))


def _resized_crop(images, scale, index, seed, epoch):
    _, height, width, _ = images.shape
    area = (scale[0] + (scale[1] - scale[0]) * uniform(seed, epoch, index, _AREA)) * height * width
    ratio = np.exp(np.log(3 / 4) + np.log(16 / 9) * uniform(seed, epoch, index, _RATIO))
    box_w = np.clip(np.rint(np.sqrt(area * ratio)), 1, width).astype(np.int64)
    box_h = np.clip(np.rint(np.sqrt(area / ratio)), 1, height).astype(np.int64)
    top = (uniform(seed, epoch, index, _BOX_Y) * (height - box_h + 1)).astype(np.int64)
    left = (uniform(seed, epoch, index, _BOX_X) * (width - box_w + 1)).astype(np.int64)
    # the source pixel under each output pixel's centre
    rows = top[:, None] + ((np.arange(height) + 0.5) * box_h[:, None] / height).astype(np.int64)
    cols = left[:, None] + ((np.arange(width) + 0.5) * box_w[:, None] / width).astype(np.int64)
    return _gather(images, rows, cols)


def _jitter(images, augment, index, seed, epoch):
    x = images.astype(np.float32)
    if augment.contrast:
        factor = 1.0 + augment.contrast * (2.0 * uniform(seed, epoch, index, _CONTRAST) - 1.0)
        mean = x.mean(axis=(1, 2, 3), keepdims=True)
        x = (x - mean) * factor.astype(np.float32)[:, None, None, None] + mean
    if augment.brightness:
        factor = 1.0 + augment.brightness * (2.0 * uniform(seed, epoch, index, _BRIGHTNESS) - 1.0)
        x *= factor.astype(np.float32)[:, None, None, None]
    return np.rint(np.clip(x, 0.0, 255.0, out=x), out=x).astype(np.uint8)
