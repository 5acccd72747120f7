"""Imported float weights become a recipe's starting state, in the form the recipe keeps.

The recipe's own `init_params` lays out the state (weights, optimizer state, anything
else it keeps); each imported weight then replaces the recipe's random one, converted to
the same form: float arrays keep the recipe's dtype (float32, FP8's float16); integer
weights become int8 with a power-of-two exponent (NITI's format) or the recipe's wider
integer grid (WAGEUBN's 24-bit accumulator).

Integer conversion keeps each value (q * 2**e ~ w, the exponent the smallest that fits
the largest |w| in the grid). NITI's own initial quantization rescales a layer's range to
+-127 (numerics.quantize_weights), which changes a pretrained function where branches
join (a residual add sums two layers' outputs at their own scales), so imports keep values.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UserError
from ..numerics import QTensor

# integer weight containers the recipes keep -> (bits of the grid, spare top bits)
INTEGER_GRIDS = {np.dtype(np.int8): (8, 0), np.dtype(np.int16): (16, 0), np.dtype(np.int32): (24, 1)}


def pow2_grid(w: np.ndarray, bits: int = 8, headroom: int = 0, dtype=np.int8) -> QTensor:
    """`w` on a signed `bits`-bit grid with a power-of-two step: q * 2**e, |q| <= 2**(bits-1) - 1."""
    w = np.asarray(w, np.float64)
    top = float(np.max(np.abs(w))) if w.size else 0.0
    limit = 2 ** (bits - 1) - 1
    if top == 0.0:
        return QTensor(np.zeros(w.shape, dtype), 0)
    e = math.ceil(math.log2(top / limit)) + headroom
    q = np.clip(np.rint(w / 2.0**e), -limit, limit)
    return QTensor(q.astype(dtype), e)


def convert_like(template, value: np.ndarray, name: str):
    """`value` (float) in the form of the recipe's `template` for the same tensor."""
    value = np.asarray(value)
    shape = template.q.shape if isinstance(template, QTensor) else np.shape(template)
    if tuple(value.shape) != tuple(shape):
        raise UserError(f"starting weight {name} has shape {tuple(value.shape)}, the recipe keeps {tuple(shape)}")
    if isinstance(template, QTensor):
        grid = INTEGER_GRIDS.get(template.q.dtype)
        if grid is None:
            raise UserError(f"starting weight {name}: no conversion to the recipe's {template.q.dtype} weights")
        return pow2_grid(value, grid[0], grid[1], template.q.dtype)
    return np.asarray(value, dtype=np.asarray(template).dtype)


def starting_state(algorithm, model, recipe, rng: np.random.Generator) -> dict:
    """The recipe's initial state for `model`, with the model's imported weights in it."""
    state = algorithm.init_params(model, recipe, rng)
    for name, value in (model.initial_weights or {}).items():
        if name not in state:
            raise UserError(f"recipe {recipe.name!r} keeps no tensor {name!r} for the imported weight")
        state[name] = convert_like(state[name], value, name)
    return state


def float_weights(state: dict) -> dict:
    """Every tensor of a trained state as float32 (integer weights dequantized)."""
    return {
        name: (value.dequantize().astype(np.float32) if isinstance(value, QTensor) else np.asarray(value, np.float32))
        for name, value in state.items()
    }
