"""WAGEUBN: training with 8-bit integers for weights (W), activations (A), weight
gradients (G), errors (E), the weight update (U) and batch norm (BN) (Yang et al.,
"Training high-performance and large-scale deep neural networks with full 8-bit
integers", Neural Networks 125, 2020).

- W: each layer's weights live in a 24-bit accumulator (int32 mantissa, one exponent
  fixed at initialisation with one bit of headroom); the forward and backward products
  see the top 8 bits (`shift_round` by 16, nearest).
- A, E: int8 with a power-of-two exponent from each tensor's range (nearest), as the
  paper's shift-based quantization of errors.
- G: the weight gradient (an exact int32 sum of int8 products, plus weight decay) is
  rounded stochastically to int8 with a power-of-two exponent.
- U: momentum is a 16-bit fixed-point tensor; the momentum coefficient and the learning
  rate are 8-bit fixed point; lr * m is rounded onto the 24-bit weight grid.
- BN: batch statistics (mean, variance, 1/std, x-hat) on 16-bit grids, gamma and beta
  used as 8-bit, the incoming error as 8-bit (`_float_layers.BNGrids`); gamma and beta
  follow the same quantized momentum update on a 24-bit grid.
- First and last layers: quantized like the others (`first_last: int8`), which is the
  "full 8-bit" claim of the paper; `first_last: float32` keeps them in float.

Emulated: values on these integer grids are held in float arrays between ops and the
int8 products run on the int8 hooks; batch norm and the update compute in float64 on
grid values and round back onto their grids.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..numerics import QTensor
from . import _float_layers as fl
from ._emulated import Emulated, module_contract
from ._quant import Scaled, quantize_int, quantize_int_numpy
from ._recipe_numerics import Numerics

ACCUMULATOR_BITS = 24
WEIGHT_BITS = 8
STAT_BITS = 16
MOMENTUM_BITS = 16
COEFFICIENT_BITS = 8  # learning rate and momentum coefficient


def on_grid(x, bits, rounding="round", rng=None) -> np.ndarray:
    """x on a `bits`-bit power-of-two grid fitted to its range (float64 values), in NumPy:
    scalars and batch norm's statistics (`on_grid_hooks` for tensors)."""
    return quantize_int_numpy(np.asarray(x, np.float64), bits, "pow2", rounding, rng).values()


def on_grid_hooks(backend, x, bits, rounding="round", rng=None) -> np.ndarray:
    """on_grid on the op's backend (absmax_f, quantize_f)."""
    return quantize_int(backend, np.asarray(x, np.float64), bits, "pow2", rounding, rng).values()


@lru_cache(maxsize=64)
def scalar_on_grid(value: float, bits: int) -> float:
    """on_grid of one number (the learning rate, the momentum coefficient), remembered:
    the same few values every step, and NumPy's per-call cost on a scalar was a third of
    the update's time."""
    return float(on_grid(value, bits))


def _first_last(value):
    return None if value in ("int8", "float32") else "must be 'int8' or 'float32'"


BN_GRIDS = fl.BNGrids(
    stat=lambda x: on_grid(x, STAT_BITS),
    affine=lambda x: on_grid(x, WEIGHT_BITS),
    error=lambda x: on_grid(x, 8),
    bits=(STAT_BITS, WEIGHT_BITS, 8),
)  # bn_*_grid_f32


class WAGEUBNNumerics(Numerics):
    prefix = "wageubn"
    weight_dtype = "int32"
    bn_grids = BN_GRIDS
    known_params = {"first_last": _first_last}
    quant_hooks = ("absmax_f", "quantize_f", "shift_round")  # shift_round: the weights' top 8 bits
    # weights are WEIGHT_BITS of a 24-bit accumulator, rounded to nearest; activations and
    # errors round to nearest, gradients stochastically, all int with power-of-two scales:
    # only their bits are read (activations, errors, gradients)
    supported = {
        "tensors.*.format": ("int",),
        "tensors.*.scale": ("pow2",),
        "tensors.*.granularity": ("tensor",),
        "tensors.*.exponent_bits": (0,),
        "tensors.weights.bits": (WEIGHT_BITS,),
        "tensors.updates.bits": (ACCUMULATOR_BITS,),
        "tensors.weights.rounding": ("round",),
        "tensors.activations.rounding": ("round",),
        "tensors.errors.rounding": ("round",),
        "tensors.gradients.rounding": ("sto",),
        "tensors.updates.rounding": ("round",),
        # only activations and errors rescale (rescale.py): the weights' 24-bit grid is fixed
        "tensors.weights.rescale.policy": ("fixed",),
        "tensors.gradients.rescale.policy": ("dynamic",),
        "tensors.updates.rescale.policy": ("dynamic",),
    }

    def _float_layer(self, ctx, op):
        return self.param(ctx.recipe, "first_last", "int8") == "float32" and op.attrs["position"] != "middle"

    def init_weight(self, layer, rng):
        return to_accumulator(super().init_weight(layer, rng))

    def quant_weight(self, backend, w, ctx, op):
        if self._float_layer(ctx, op):
            return Scaled(w.dequantize(), 1.0)
        shift = ACCUMULATOR_BITS - WEIGHT_BITS
        return Scaled(backend.shift_round(w.q, shift, "round", None), 2.0 ** (w.e + shift))

    def quant_act(self, backend, x, ctx, op):
        if self._float_layer(ctx, op):
            return Scaled(np.asarray(x, np.float64), 1.0)
        return quantize_int(backend, x, ctx.recipe.tensors.activations.bits, "pow2", "round")

    def quant_err(self, backend, err, state, ctx, op):
        if self._float_layer(ctx, op):
            return Scaled(np.asarray(err, np.float64), 1.0), []
        return quantize_int(backend, err, ctx.recipe.tensors.errors.bits, "pow2", "round"), []

    # wageubn_update: a conv/linear weight's accumulator; absmax_f, quantize_f: the float
    # parameters' (batch norm's gamma and beta, biases) grids
    update_hooks = ("wageubn_update", "absmax_f", "quantize_f")
    update_bytes_per_element = 12  # wageubn_update's double sums and int16 codes (cpu_ops/update_wageubn.cpp)

    def update(self, backend, w, grad, state, ctx, op):
        o = ctx.recipe.optimizer
        lr = scalar_on_grid(o.lr * ctx.lr_factor(), COEFFICIENT_BITS)
        momentum = scalar_on_grid(o.momentum, COEFFICIENT_BITS)
        if isinstance(w, QTensor):  # a conv/linear weight: the whole update is one hook
            q, m = backend.wageubn_update(
                w.q,
                w.e,
                grad,
                state[0],
                lr,
                momentum,
                o.weight_decay,
                ctx.recipe.tensors.gradients.bits,
                MOMENTUM_BITS,
                ACCUMULATOR_BITS,
                ctx.rng(op),
            )
            return QTensor(q, w.e), [m]
        current = np.asarray(w, np.float64)
        g = on_grid_hooks(
            backend,
            np.asarray(grad, np.float64) + o.weight_decay * current,
            ctx.recipe.tensors.gradients.bits,
            "sto",
            ctx.rng(op),
        )
        m = on_grid_hooks(backend, momentum * np.asarray(state[0], np.float64) + g, MOMENTUM_BITS)
        return on_grid(current - lr * m, ACCUMULATOR_BITS).astype(np.float32), [m.astype(np.float32)]


def to_accumulator(w: np.ndarray) -> QTensor:
    """Float weights on the 24-bit grid, the exponent leaving one bit of headroom."""
    top = float(np.max(np.abs(w)))
    e = (int(np.ceil(np.log2(top))) + 1 if top > 0 else 0) - (ACCUMULATOR_BITS - 1)
    return QTensor(np.rint(np.asarray(w, np.float64) / 2.0**e).astype(np.int32), e)


ENGINE = Emulated(WAGEUBNNumerics())
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
