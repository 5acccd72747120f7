"""Augmentation of uint8 NHWC batches, vectorised over the batch, seeded per sample.

Each sample's random choices are SplitMix64 outputs (Steele, Lea and Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014) of (seed, epoch, its index in the
dataset, the choice), drawn for a whole batch at once: a sample looks the same whatever
batch it lands in, and a run resumed mid-epoch sees exactly the images the uninterrupted
run saw. Crops are cut sample by sample as slices (no index arrays the size of the batch). In the order they
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

# a column per choice: adding one never changes the others
_OFFSET_Y, _OFFSET_X, _FLIP, _BRIGHTNESS, _CONTRAST, _AREA, _RATIO, _BOX_Y, _BOX_X = range(9)
_CHOICES = 9
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class Augment:
    crop_padding: int = bounded(0, 0, 1024)
    resized_crop: tuple[float, float] | None = None  # [smallest, largest] share of the area
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


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64 words."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform(seed: int, epoch: int, index: np.ndarray) -> np.ndarray:
    """(len(index), choices) uniform floats in [0, 1): each sample's random choices."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) * _GOLDEN + np.uint64(epoch & 0xFFFFFFFF) + np.uint64(1))
        counter = np.asarray(index, np.uint64)[:, None] * np.uint64(_CHOICES) + np.arange(_CHOICES, dtype=np.uint64)
        words = _mix(key + (counter + np.uint64(1)) * _GOLDEN)
    return (words >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def apply(augment: Augment, images: np.ndarray, index: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """`images` (uint8 N, H, W, C; the samples at dataset `index`) augmented; a new array."""
    if not augment.active or not len(images):
        return images
    draws = uniform(seed, epoch, index)
    out = np.array(images)  # a memory map's rows or the caller's batch: never changed in place
    if augment.crop_padding:
        out = _padded_crop(out, augment.crop_padding, draws)
    if augment.resized_crop:
        out = _resized_crop(out, augment.resized_crop, draws)
    if augment.flip:
        mirrored = draws[:, _FLIP] < 0.5
        out[mirrored] = out[mirrored, :, ::-1]
    if augment.brightness or augment.contrast:
        out = _jitter(out, augment, draws)
    return out


def _padded_crop(images, pad, draws):
    _, height, width, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    top = (draws[:, _OFFSET_Y] * (2 * pad + 1)).astype(np.int64)
    left = (draws[:, _OFFSET_X] * (2 * pad + 1)).astype(np.int64)
    for i, (y, x) in enumerate(zip(top, left)):
        images[i] = padded[i, y : y + height, x : x + width]
    return images


def _resized_crop(images, scale, draws):
    _, height, width, _ = images.shape
    area = (scale[0] + (scale[1] - scale[0]) * draws[:, _AREA]) * height * width
    ratio = np.exp(np.log(3 / 4) + np.log(16 / 9) * draws[:, _RATIO])
    box_w = np.clip(np.rint(np.sqrt(area * ratio)), 1, width).astype(np.int64)
    box_h = np.clip(np.rint(np.sqrt(area / ratio)), 1, height).astype(np.int64)
    top = (draws[:, _BOX_Y] * (height - box_h + 1)).astype(np.int64)
    left = (draws[:, _BOX_X] * (width - box_w + 1)).astype(np.int64)
    # the source pixel under each output pixel's centre
    rows = top[:, None] + ((np.arange(height) + 0.5) * box_h[:, None] / height).astype(np.int64)
    cols = left[:, None] + ((np.arange(width) + 0.5) * box_w[:, None] / width).astype(np.int64)
    out = np.empty_like(images)
    for i in range(len(images)):
        out[i] = images[i].take(rows[i], axis=0).take(cols[i], axis=1)
    return out


def _jitter(images, augment, draws):
    x = images.astype(np.float32)
    if augment.contrast:
        factor = 1.0 + augment.contrast * (2.0 * draws[:, _CONTRAST] - 1.0)
        mean = x.mean(axis=(1, 2, 3), keepdims=True)
        x = (x - mean) * factor.astype(np.float32)[:, None, None, None] + mean
    if augment.brightness:
        factor = 1.0 + augment.brightness * (2.0 * draws[:, _BRIGHTNESS] - 1.0)
        x *= factor.astype(np.float32)[:, None, None, None]
    return np.rint(np.clip(x, 0.0, 255.0, out=x), out=x).astype(np.uint8)
