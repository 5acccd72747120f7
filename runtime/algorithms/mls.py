"""MLS: multi-level scaling for low-bit CNN training (Zhong et al., "Exploring the
Potential of Low-bit Training of Convolutional Neural Networks", IEEE TCAD 2022).

Every conv/linear operand (weights, activations, errors) is a low-bit tensor with two
levels of scale: one float scale for the tensor (max|x| / qmax) and a power-of-two
scale 2**-k per group of `group_size` consecutive channels, k in 0 .. 2**group_bits - 1
(the largest that keeps the group inside the range, so quiet groups keep resolution);
elements are `bits`-bit integers. Weights and activations round to nearest, errors
stochastically (counter RNG), as low-bit training needs for unbiased gradients.
Float32 master weights, SGD with momentum.

Products: the paper's accelerator sums each group in integers and adds the groups'
sums shifted by their power-of-two scales. Here the shift is applied to the elements
when they are quantized (q * 2**(kmax - k), int16: `_quant.quantize_mls`), so the
groups' shifted partial sums add up inside one exact integer dot product (`matmul_s16`,
int64): the same values, independent of the summation order and the thread count.
When a layer's channel count is not a multiple of `group_size` the group is their gcd.
"""

from __future__ import annotations

import numpy as np

from ._emulated import Emulated, group_for, module_contract
from ._quant import quantize_mls
from ._recipe_numerics import Numerics


def _group_bits(value):
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3
    return None if ok else "must be an integer in 0..3 (int8 elements shifted by up to 2**7 fit int16)"


def _mls(backend, x, fmt, group_bits, rng):
    x = np.asarray(x, np.float32)
    rounding = fmt.rounding if fmt.rounding in ("round", "nearest_even", "sto") else "round"
    return quantize_mls(backend, x, fmt.bits, group_for(x.shape[-1], fmt.group_size), group_bits, rounding, rng)


class MLSNumerics(Numerics):
    prefix = "mls"
    known_params = {"group_bits": _group_bits}
    quant_hooks = ("quantize_mls_ranged",)

    def product_hooks(self, kind):
        return {
            "conv": ("matmul_s16", "im2col"),
            "conv_bwd_weight": ("matmul_s16", "im2col"),
            "conv_bwd_data": ("matmul_s16", "col2im"),
            "dwconv": ("dwconv2d_s8",),
            "dwconv_bwd_data": ("dwconv2d_bwd_data_s8",),  # _products._depthwise_digits
            "dwconv_bwd_weight": ("dwconv2d_bwd_weight_s8",),
        }.get(kind, ("matmul_s16",))

    def quantized_dtype(self, recipe, role):
        return "int16"  # the elements shifted by their group's scale (_quant.quantize_mls)

    def _group_bits(self, ctx):
        return int(self.param(ctx.recipe, "group_bits", 2))

    def quant_weight(self, backend, w, ctx, op):
        return _mls(backend, w, ctx.recipe.tensors.weights, self._group_bits(ctx), ctx.rng(op))

    def quant_act(self, backend, x, ctx, op):
        return _mls(backend, x, ctx.recipe.tensors.activations, self._group_bits(ctx), ctx.rng(op))

    def quant_err(self, backend, err, state, ctx, op):
        return _mls(backend, err, ctx.recipe.tensors.errors, self._group_bits(ctx), ctx.rng(op)), []


ENGINE = Emulated(MLSNumerics())
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
