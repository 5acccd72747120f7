"""Adaptive fixed-point training (Zhang et al., "Fixed-Point Back-Propagation Training",
CVPR 2020).

- Weights and activations: int8 with a power-of-two scale per tensor (fixed point),
  round to nearest; their products run on the int8 hooks.
- Errors (the gradients flowing back into each conv/linear): fixed point whose width
  adapts per layer between `low_bits` (8) and `high_bits` (16) by the quantization error
  it sees: the relative change of mean |e| that the 8-bit grid causes (the paper's
  measure of how far quantization moves the data distribution). Above
  `error_threshold` the layer switches to 16 bits, below it returns to 8.
- The check itself adapts its interval, as the paper's adaptive update frequency does:
  a layer whose width did not change waits twice as long for the next check (up to
  errors.rescale.max_interval steps), a change resets it to errors.rescale.min_interval.
- Float32 master weights, SGD with momentum ("float update").

Emulated: float tensors between ops with exact quantize/dequantize (as the paper
evaluates). 8-bit errors use the int8 hooks; 16-bit errors are summed exactly in float64.
"""

from __future__ import annotations

import numpy as np

from ._emulated import Emulated, module_contract
from ._quant import quantization_error, quantize_int
from ._recipe_numerics import Numerics


def _positive_number(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return None if ok else "must be a number > 0"


def _bits(value):
    ok = isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= 16
    return None if ok else "must be an integer in 2..16"


def _round(fmt):
    return fmt.rounding if fmt.rounding in ("round", "nearest_even", "sto") else "round"


CHECK_BYTES_PER_ELEMENT = 17  # int8 q + float64 values + float64 |values| (quantization_error)


class AFPNumerics(Numerics):
    prefix = "afp"
    known_params = {"error_threshold": _positive_number, "low_bits": _bits, "high_bits": _bits}

    def quant_weight(self, backend, w, ctx, op):
        fmt = ctx.recipe.tensors.weights
        return quantize_int(backend, w, fmt.bits, fmt.scale, _round(fmt), ctx.rng(op))

    def quant_act(self, backend, x, ctx, op):
        fmt = ctx.recipe.tensors.activations
        return quantize_int(backend, x, fmt.bits, fmt.scale, _round(fmt), ctx.rng(op))

    def quantized_dtype(self, recipe, role):
        if role != "errors":
            return super().quantized_dtype(recipe, role)
        # 8 or 16 bits, chosen per layer while training: the plan holds the wider one
        bits = max(self.param(recipe, "low_bits", 8), self.param(recipe, "high_bits", 16))
        return "int8" if bits <= 8 else "int16"

    def quant_workspace(self, recipe, role, shape):
        """A width check (choose_bits, every few steps) holds the error quantized to low_bits
        and two float64 arrays of its values (quantization_error): 17 bytes an element at
        its peak (tracemalloc), beside the int16 result."""
        return (int(np.prod(shape[1:])) * CHECK_BYTES_PER_ELEMENT, 0) if role == "errors" else None

    def err_state(self, layer):
        # [bits in use, step of the next check, current interval]
        return {"afp": np.array([8, 0, 1], np.int64)}

    def quant_err(self, backend, err, state, ctx, op):
        bits, next_check, interval = (int(v) for v in state[0])
        fmt = ctx.recipe.tensors.errors
        low, high = self.param(ctx.recipe, "low_bits", 8), self.param(ctx.recipe, "high_bits", 16)
        if ctx.step >= next_check:
            bits, interval = choose_bits(
                backend,
                err,
                bits,
                interval,
                low,
                high,
                self.param(ctx.recipe, "error_threshold", 0.05),
                fmt.rescale.min_interval,
                fmt.rescale.max_interval,
                fmt.scale,
                _round(fmt),
            )
            next_check = ctx.step + interval
        eq = quantize_int(backend, err, bits, fmt.scale, _round(fmt), ctx.rng(op))
        return eq, [np.array([bits, next_check, interval], np.int64)]


def choose_bits(
    backend, err, bits, interval, low, high, threshold, min_interval, max_interval, scale="pow2", rounding="round"
):
    """(new width, new check interval) for one layer from the error it sees now."""
    low_grid = quantize_int(backend, err, low, scale, rounding if rounding != "sto" else "round")
    moved = quantization_error(err, low_grid)
    new_bits = high if moved > threshold else low
    interval = min_interval if new_bits != bits else min(2 * interval, max_interval)
    return new_bits, max(interval, 1)


ENGINE = Emulated(AFPNumerics())
(
    ACTIVATION_DTYPE,
    check_recipe,
    check_model,
    forward,
    loss,
    backward,
    join_errors,
    OPS,
    init_params,
    prepare_input,
    logits_to_float,
) = module_contract(ENGINE)
