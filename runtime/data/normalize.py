"""Mean/std normalisation, declared once (`data.normalize`) and folded into each recipe's
input mapping as a table of 256 entries per channel.

A pixel p of channel c stands for x = (p / 255 - mean[c]) / std[c] (torchvision's
Normalize after ToTensor). The float recipes look x up in a float32 table; NITI, which
touches no float between its input and its logits, looks up int8 round(x * 2**-e) with
the one power-of-two exponent e that fits the largest |x| of every channel into 7 bits
(clipped to -127..127): its input exponent, -7 without normalisation ((p - 128) * 2**-7),
follows from the statistics. Without `data.normalize` both map p to (p - 128) / 128 as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..inputs import bounded

_PIXELS = np.arange(256, dtype=np.float64)


@dataclass(frozen=True)
class Normalize:
    mean: tuple[float, ...] = bounded((0.5,), -1000.0, 1000.0)  # per channel, or one for all, in pixel / 255 units
    std: tuple[float, ...] = bounded((0.5,), 0.0, 1000.0, low_open=True)

    def problem(self, channels: int | None = None) -> tuple[str, str] | None:
        """(key, why) of a bad setting for a model of `channels`, or None."""
        for key, values in (("mean", self.mean), ("std", self.std)):
            if not values or (channels is not None and len(values) not in (1, channels)):
                return key, f"{list(values)}: give one value or one per channel ({channels})"
            if any(not math.isfinite(v) for v in values):
                return key, f"{list(values)}: not finite"
        if any(s <= 0 for s in self.std):
            return "std", f"{list(self.std)}: every std must be > 0"
        return None

    def _values(self, channels: int) -> np.ndarray:
        """x for every pixel value, (channels, 256) float64."""
        mean = np.broadcast_to(np.asarray(self.mean, np.float64), (channels,))
        std = np.broadcast_to(np.asarray(self.std, np.float64), (channels,))
        return (_PIXELS[None, :] / 255.0 - mean[:, None]) / std[:, None]

    def float_table(self, channels: int) -> np.ndarray:
        """(channels, 256) float32: x of each pixel value."""
        return self._values(channels).astype(np.float32)

    def int8_table(self, channels: int) -> tuple[np.ndarray, int]:
        """((channels, 256) int8, e): round(x * 2**-e) within -127..127, e the least exponent with
        every |x| <= 2**(e + 7)."""
        values = self._values(channels)
        # |x| <= 2**(e + 7): the largest |x| lands on 128 at most, clipped to 127 as NITI's
        # clip_int8 does (the default mapping's pixel 0, (0 - 128) / 128 = -1, is -127 * 2**-7)
        largest = float(np.abs(values).max())
        exponent = math.ceil(math.log2(largest)) - 7 if largest > 0 else 0
        table = np.rint(values * 2.0**-exponent)
        return np.clip(table, -127, 127).astype(np.int8), exponent


def lookup(table: np.ndarray, images: np.ndarray) -> np.ndarray:
    """table[c, images[..., c]] for uint8 NHWC `images`."""
    return table[np.arange(table.shape[0]), images]
