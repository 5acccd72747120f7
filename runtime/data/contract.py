"""The Python API's input contract: what `Trainer.step` and `Trainer.predict` accept.

images: NHWC, the model's input shape (N, H, W, C); (N, H, W) is taken as one channel.
  - uint8 0..255: used as is (the datasets give this).
  - other integer dtypes: values must be in 0..255; converted to uint8.
  - floats: values must be in [0, 1] (pixels / 255); converted with round(x * 255).
    Anything else (a [-1, 1] or mean/std-normalised array, NaN) is refused with a
    message saying what was found, because quietly casting it would feed the network
    a nearly black image.
labels: integers in 0..classes-1, one per image.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, UserError

FLOAT_RANGE = (0.0, 1.0)


def as_images(images, input_shape) -> np.ndarray:
    """`images` as uint8 (N, *input_shape), converted by the contract above, or a UserError."""
    array = np.asarray(images)
    shape = tuple(input_shape)
    if array.ndim == len(shape) and shape[-1] == 1 and array.shape[1:] == shape[:-1]:
        array = array[..., None]
    if array.ndim != len(shape) + 1 or array.shape[1:] != shape:
        raise ShapeError(f"images: shape {array.shape} is not (N, {', '.join(map(str, shape))}), NHWC for this model")
    if array.dtype == np.uint8:
        return array
    if np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
        if low < 0 or high > 255:
            raise UserError(f"images: {array.dtype} values must be in 0..255, found {low}..{high}")
        return array.astype(np.uint8)
    if np.issubdtype(array.dtype, np.floating):
        if array.size and not np.isfinite(array).all():
            raise UserError(f"images: {array.dtype} images hold NaN or infinity")
        low, high = (float(array.min()), float(array.max())) if array.size else FLOAT_RANGE
        if low < FLOAT_RANGE[0] or high > FLOAT_RANGE[1]:
            raise UserError(
                f"images: {array.dtype} values must be in [0, 1] (pixels / 255), found "
                f"{low:.4g}..{high:.4g}; rescale them, or pass uint8 pixels 0..255"
            )
        return np.rint(array * 255.0).astype(np.uint8)
    raise UserError(f"images: dtype {array.dtype} is neither uint8, an integer nor a float type")


def as_labels(labels, count: int, classes: int) -> np.ndarray:
    """`labels` as int64 (count,), each in 0..classes-1, or a UserError."""
    array = np.asarray(labels)
    if array.shape != (count,):
        raise ShapeError(f"labels: shape {array.shape} does not match {count} images")
    if not np.issubdtype(array.dtype, np.integer):
        raise UserError(f"labels: dtype {array.dtype}; expected integers 0..{classes - 1}")
    if count and (array.min() < 0 or array.max() >= classes):
        raise UserError(f"labels: values must be in 0..{classes - 1}, found {int(array.min())}..{int(array.max())}")
    return array.astype(np.int64)
