"""The reference backend: NumPy, exact, the judge every other backend is tested against.

Integer products run as float64 BLAS products of the int8 operands: exact while
K * 127 * 127 < 2**53 (checked), and about 100x faster than NumPy's integer matmul.
"""

from __future__ import annotations

import numpy as np

from .. import float_ops, numerics
from ..layout import col2im, im2col, out_size, pool_windows
from ..numerics import LOG2E_Q15, LOSS_SCALE_BITS, LOSS_SHIFT, MIN_EXPONENT, TAYLOR_BELOW
from . import ref_fp8_depthwise
from .base import DILATED_HOOKS, FP8_DEPTHWISE_HOOKS, Backend
from .grouped_hooks import GROUPED_HOOKS

_EXACT_F64 = 2**53


def _exact_product(depth: int) -> None:
    if depth * 127 * 127 >= _EXACT_F64:
        raise OverflowError(f"reduction depth {depth} is too long for an exact float64 product")


def _to_acc(x: np.ndarray, depth: int) -> np.ndarray:
    return np.rint(x).astype(numerics.acc_dtype(depth))


def _by_group(fn, a, b, groups: int, b_axis: int, out_axis: int = -1) -> np.ndarray:
    """fn(a's channels of group g, b's group g along b_axis) for each g, joined on out_axis."""
    na, nb = a.shape[-1] // groups, b.shape[b_axis] // groups
    parts = [fn(a[..., g * na : (g + 1) * na], np.take(b, range(g * nb, (g + 1) * nb), b_axis)) for g in range(groups)]
    return np.concatenate(parts, axis=out_axis)


#: the float-recipe hooks of float_hooks.py, defined in float_ops.py
FLOAT_RECIPE_HOOKS = (
    "absmax_f",
    "quantize_f",
    "dequantize",
    "prc_squared_errors",
    "quantize_mls",
    "quantize_mls_ranged",
    "round_float",
    "matmul_s16",
    "im2col",
    "col2im",
    "matmul_fp16_chunked",
    "relu_f32",
    "relu_bwd_f32",
    "maxpool_f32",
    "maxpool_bwd_f32",
    "compensation_fwd",
    "compensation_bwd",
    "sgd_f32",
    "wageubn_update",
    "prc_quantize",
    "sgd_f32_group",
    "dequantize_compensate",
    "relu_maxpool_f32",
    "relu_maxpool_bwd_f32",
    "pool_compensation_bwd",
)  # float_hooks.py composes these

#: the mobile CNNs' element-wise and channel layers (algorithms/_branch_layers.py), float_ops.py
BRANCH_HOOKS = (
    "act_f32",
    "act_bwd_f32",
    "mul_f32",
    "mul_bwd_f32",
    "concat_channels",
    "slice_channels",
    "pad_channels",
    "channel_shuffle",
    "bn_fwd_f32",
    "bn_bwd_f32",
    "channel_mean_f32",
    "channel_sum_f32",
    "add_f32",  # + the float layers
    "bias_add_f32",
    "channel_mean_bwd_f32",
    "maxpool_pad_f32",
    "maxpool_pad_bwd_f32",
    "softmax_xent_grad_f32",
    "dropout_apply_f32",
    "bn_fwd_grid_f32",
    "bn_bwd_grid_f32",
    "bn_act_s8",  # NITI's batch norm between int8 tensors: float_hooks.py composes it from the hooks above
    "bn_act_bwd_s8",
)


#: the depthwise convolutions (one filter per channel: weight (C, KH, KW, 1)); their
#: requant variants are base.py's compositions
DEPTHWISE_HOOKS = (
    "dwconv2d_s8",
    "dwconv2d_bwd_data_s8",
    "dwconv2d_bwd_weight_s8",
    "dwconv2d_f32",
    "dwconv2d_bwd_data_f32",
    "dwconv2d_bwd_weight_f32",
)


class RefBackend(Backend):
    name = "ref"
    hooks = frozenset(
        {
            "gemm_s8",
            "conv2d_s8",
            "conv2d_bwd_data_s8",
            "conv2d_bwd_weight_s8",
            *DILATED_HOOKS,
            *GROUPED_HOOKS,
            *FP8_DEPTHWISE_HOOKS,
            "absmax",
            "shift_round",
            "relu_s8",
            "relu_bwd_s8",
            "maxpool_s8",
            "maxpool_bwd_s8",
            "niti_loss_grad_s8",
            "niti_update_s8",
            "dropout_mask",
            "gemm_f32",
            "conv2d_f32",
            "conv2d_bwd_data_f32",
            "conv2d_bwd_weight_f32",
            "numpy_f32",  # the FP32 recipe's element-wise ops run as NumPy code on this backend
            "add_align_s8",
            "avgpool_global_s8",  # residual networks under integer recipes
            *DEPTHWISE_HOOKS,
            *FLOAT_RECIPE_HOOKS,
            *BRANCH_HOOKS,
        }
    )

    def dropout_mask(self, shape, p, rng):
        """Keep an element when its random word is at least p * 2**32."""
        threshold = min(int(round(p * 2**32)), 2**32 - 1)
        return (numerics.random_u32(rng, int(np.prod(shape))) >= threshold).reshape(shape)

    # ------------------------------------------------------------ int8 products
    def gemm_s8(self, a, b):
        depth = a.shape[1]
        _exact_product(depth)
        return _to_acc(a.astype(np.float64) @ b.astype(np.float64).T, depth)

    def conv2d_s8(self, x, w, stride, pad):
        return self.conv2d_dilated_s8(x, w, stride, pad, 1)

    def conv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return self.conv2d_dilated_bwd_data_s8(err, w, stride, pad, 1, in_hw)

    def conv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        return self.conv2d_dilated_bwd_weight_s8(err, x, stride, pad, 1, kernel)

    # A dilated conv by its definition: patches with taps `dilation` apart, their gradients
    # scattered back the same way (layout.im2col / col2im).
    def conv2d_dilated_s8(self, x, w, stride, pad, dilation):
        n, h, wd, _ = x.shape
        o, kh, kw, c = w.shape
        depth = kh * kw * c
        _exact_product(depth)
        cols = im2col(x, kh, kw, stride, pad, dilation)
        out = cols @ w.reshape(o, depth).astype(np.float64).T
        oh, ow = out_size(h, kh, stride, pad, dilation), out_size(wd, kw, stride, pad, dilation)
        return _to_acc(out, depth).reshape(n, oh, ow, o)

    def conv2d_dilated_bwd_data_s8(self, err, w, stride, pad, dilation, in_hw):
        o, kh, kw, c = w.shape
        depth = o * kh * kw
        _exact_product(depth)
        dcols = err.reshape(-1, o).astype(np.float64) @ w.reshape(o, -1).astype(np.float64)
        return _to_acc(col2im(dcols, err.shape, (kh, kw, c), stride, pad, in_hw, dilation), depth)

    def conv2d_dilated_requant_s8(self, x, w, stride, pad, dilation, mode, rng, shift=None):
        return self.requantize(self.conv2d_dilated_s8(x, w, stride, pad, dilation), mode, rng, shift)

    def conv2d_dilated_bwd_data_requant_s8(self, err, w, stride, pad, dilation, in_hw, mode, rng, shift=None):
        dx = self.conv2d_dilated_bwd_data_s8(err, w, stride, pad, dilation, in_hw)
        return self.requantize(dx, mode, rng, shift)

    def conv2d_dilated_bwd_weight_s8(self, err, x, stride, pad, dilation, kernel):
        kh, kw = kernel
        o = err.shape[-1]
        depth = err.size // o
        _exact_product(depth)
        cols = im2col(x, kh, kw, stride, pad, dilation)
        dw = err.reshape(-1, o).astype(np.float64).T @ cols
        return _to_acc(dw, depth).reshape(o, kh, kw, x.shape[-1])

    # A grouped conv by its definition: group g's output channels are the dilated conv (above) of
    # group g's input channels alone; the groups' results joined on the channel axis.
    def conv2d_grouped_s8(self, x, w, stride, pad, dilation, groups):
        return _by_group(lambda xg, wg: self.conv2d_dilated_s8(xg, wg, stride, pad, dilation), x, w, groups, 0)

    def conv2d_grouped_bwd_data_s8(self, err, w, stride, pad, dilation, groups, in_hw):
        return _by_group(
            lambda eg, wg: self.conv2d_dilated_bwd_data_s8(eg, wg, stride, pad, dilation, in_hw), err, w, groups, 0
        )

    def conv2d_grouped_bwd_weight_s8(self, err, x, stride, pad, dilation, groups, kernel):
        def group(err_g, x_g):
            return self.conv2d_dilated_bwd_weight_s8(err_g, x_g, stride, pad, dilation, kernel)

        return _by_group(group, err, x, groups, -1, out_axis=0)

    # ------------------------------------------------------------ depthwise products
    # Exact in int32 (int64 for a weight gradient whose N*OH*OW sum could overflow it); the
    # float32 forms summed in one stated order, which the native kernels keep (_dw_forward).
    def dwconv2d_s8(self, x, w, stride, pad):
        return _dw_forward(x, w, stride, pad, np.int32)

    def dwconv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return _dw_backward_data(err, w, stride, pad, in_hw, np.int32)

    def dwconv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        depth = err.shape[0] * err.shape[1] * err.shape[2]
        return _dw_backward_weight(err, x, stride, pad, kernel, numerics.acc_dtype(depth))

    def dwconv2d_f32(self, x, w, stride, pad):
        return _dw_forward(x, w, stride, pad, np.float32)

    def dwconv2d_bwd_data_f32(self, err, w, stride, pad, in_hw):
        return _dw_backward_data(err, w, stride, pad, in_hw, np.float32)

    def dwconv2d_bwd_weight_f32(self, err, x, stride, pad, kernel):
        return _dw_backward_weight(err, x, stride, pad, kernel, np.float32)

    # ------------------------------------------------------------ epilogue
    def absmax(self, acc):
        return int(np.max(np.abs(acc.astype(np.int64)))) if acc.size else 0

    def shift_round(self, acc, shift, mode, rng):
        return numerics.shift_round(acc, shift, mode, rng)

    # ------------------------------------------------------------ element-wise
    def relu_s8(self, x):
        return np.maximum(x, 0).astype(x.dtype)

    def relu_bwd_s8(self, err, y):
        return np.where(y > 0, err, 0).astype(err.dtype)

    def maxpool_s8(self, x, kernel, stride):
        windows = pool_windows(x, kernel, stride)
        argmax = windows.argmax(axis=-1).astype(np.uint8)
        y = np.take_along_axis(windows, argmax[..., None].astype(np.intp), axis=-1)[..., 0]
        return np.ascontiguousarray(y), argmax

    def maxpool_bwd_s8(self, err, argmax, kernel, stride, in_hw):
        n, oh, ow, c = err.shape
        dx = np.zeros((n, in_hw[0], in_hw[1], c), np.int32)
        for kh in range(kernel):
            for kw in range(kernel):
                hit = np.where(argmax == kh * kernel + kw, err, 0)
                dx[:, kh : kh + stride * oh : stride, kw : kw + stride * ow : stride, :] += hit
        return numerics.clip_int8(dx)

    # ------------------------------------------------------------ NITI loss and update
    def niti_loss_grad_s8(self, logits, exponent, labels, rng):
        return niti_loss_grad(logits, exponent, labels, rng)

    def niti_update_s8(self, w, grad, mu, mode, rng):
        shift = numerics.gradient_shift(self.absmax(grad), mu)
        if shift is None:
            return w.copy()
        step = numerics.shift_round(grad, shift, mode, rng)
        return numerics.clip_int8(w.astype(np.int16) - step.astype(np.int16))

    # ------------------------------------------------------------ residual networks (integer recipes)
    def add_align_s8(self, a, ea: int, b, eb: int, mode: str, rng, shift: int | None = None):
        """a * 2**ea + b * 2**eb as int8 with a fresh exponent: the finer operand is shifted
        right onto the coarser exponent (nearest), the int16 sum brought back to int8 by its
        range (`shift`: a given shift, by the rule of `requantize`). Returns (q, e)."""
        if ea < eb:
            a, ea, b, eb = b, eb, a, ea
        total = (
            a.astype(np.int16) + numerics.shift_round(b, ea - eb, "round").astype(np.int16)
            if ea > eb
            else a.astype(np.int16) + b.astype(np.int16)
        )
        q, shift = self.requantize(total, mode, rng, shift)
        return q, ea + shift

    def avgpool_global_s8(self, x, e: int, mode: str, rng, shift: int | None = None):
        """Mean over H, W of int8 NHWC: int32 sum, divided by H*W (a power of two) through
        the exponent, then brought to int8 by its range (`shift`: a given shift, by the rule
        of `requantize`). Returns (q [N, C], e)."""
        hw = x.shape[1] * x.shape[2]
        if hw & (hw - 1):
            raise ValueError(f"global average pool over {x.shape[1]}x{x.shape[2]}: {hw} is not a power of two")
        total = x.astype(np.int32).sum(axis=(1, 2))
        q, shift = self.requantize(total, mode, rng, shift)
        return q, e - (hw.bit_length() - 1) + shift

    # ------------------------------------------------------------ float recipes (float_ops.py)
    def absmax_f(self, x):
        return float_ops.absmax_f(x)

    def quantize_f(self, x, step, bits, mode, rng):
        return float_ops.quantize_f(x, step, bits, mode, rng)

    def dequantize(self, acc, scale, reuse=False):
        return float_ops.dequantize(acc, scale)

    def prc_squared_errors(self, x, top, ratios, qmax):
        return float_ops.prc_squared_errors(x, top, ratios, qmax)

    def prc_quantize(self, x, prev_ratio, momentum, ratios, bits, mode, rng):
        return float_ops.prc_quantize(x, prev_ratio, momentum, ratios, bits, mode, rng)

    def quantize_mls(self, x, group, top, tensor_scale, kmax, qmax, mode, rng):
        return float_ops.quantize_mls(x, group, top, tensor_scale, kmax, qmax, mode, rng)

    def quantize_mls_ranged(self, x, group, kmax, qmax, mode, rng):
        return float_ops.quantize_mls_ranged(x, group, kmax, qmax, mode, rng)

    def round_float(self, x, exponent_bits, mantissa_bits, mode, rng):
        return float_ops.round_float(x, exponent_bits, mantissa_bits, mode, rng)

    def matmul_s16(self, a, b, a_transposed=False):
        return float_ops.matmul_s16(a, b, a_transposed)

    def dwconv2d_fp16_chunked(self, x, w, stride, pad, chunk, fp16_adds):
        return ref_fp8_depthwise.dwconv2d_fp16_chunked(x, w, stride, pad, chunk, fp16_adds)

    def dwconv2d_bwd_data_fp16(self, err, w, stride, pad, in_hw):
        return ref_fp8_depthwise.dwconv2d_bwd_data_fp16(err, w, stride, pad, in_hw)

    def dwconv2d_bwd_weight_fp16_chunked(self, err, x, stride, pad, kernel, chunk, fp16_adds):
        return ref_fp8_depthwise.dwconv2d_bwd_weight_fp16_chunked(err, x, stride, pad, kernel, chunk, fp16_adds)

    def im2col(self, x, kh, kw, stride, pad):
        return float_ops.im2col(x, kh, kw, stride, pad)

    def col2im(self, dcols, err_nhw, kernel_hwc, stride, pad, in_hw):
        return float_ops.col2im(dcols, err_nhw, kernel_hwc, stride, pad, in_hw)

    def matmul_fp16_chunked(self, a, b, a_transposed, chunk, fp16_adds):
        return float_ops.matmul_fp16_chunked(a, b, a_transposed, chunk, fp16_adds)

    def relu_f32(self, x):
        return float_ops.relu_f32(x)

    def relu_bwd_f32(self, err, y):
        return float_ops.relu_bwd_f32(err, y)

    def maxpool_f32(self, x, kernel, stride):
        return float_ops.maxpool_f32(x, kernel, stride)

    act_f32 = staticmethod(float_ops.act_f32)
    act_bwd_f32 = staticmethod(float_ops.act_bwd_f32)
    mul_f32 = staticmethod(float_ops.mul_f32)
    mul_bwd_f32 = staticmethod(float_ops.mul_bwd_f32)
    concat_channels = staticmethod(float_ops.concat_channels)
    slice_channels = staticmethod(float_ops.slice_channels)
    pad_channels = staticmethod(float_ops.pad_channels)
    channel_shuffle = staticmethod(float_ops.channel_shuffle)
    bn_fwd_f32 = staticmethod(float_ops.bn_fwd_f32)
    bn_bwd_f32 = staticmethod(float_ops.bn_bwd_f32)
    channel_mean_f32 = staticmethod(float_ops.channel_mean_f32)
    channel_sum_f32 = staticmethod(float_ops.channel_sum_f32)
    add_f32 = staticmethod(float_ops.add_f32)
    bias_add_f32 = staticmethod(float_ops.bias_add_f32)
    dropout_apply_f32 = staticmethod(float_ops.dropout_apply_f32)
    bn_fwd_grid_f32 = staticmethod(float_ops.bn_fwd_grid_f32)
    bn_bwd_grid_f32 = staticmethod(float_ops.bn_bwd_grid_f32)
    softmax_xent_grad_f32 = staticmethod(float_ops.softmax_xent_grad_f32)
    channel_mean_bwd_f32 = staticmethod(float_ops.channel_mean_bwd_f32)
    maxpool_pad_f32 = staticmethod(float_ops.maxpool_pad_f32)
    maxpool_pad_bwd_f32 = staticmethod(float_ops.maxpool_pad_bwd_f32)

    def maxpool_bwd_f32(self, err, argmax, kernel, stride, in_hw):
        return float_ops.maxpool_bwd_f32(err, argmax, kernel, stride, in_hw)

    def compensation_fwd(self, z, scale, shift):
        return float_ops.compensation_fwd(z, scale, shift)

    def wageubn_update(self, q, e, grad, m, lr, momentum, weight_decay, grad_bits, momentum_bits, acc_bits, rng):
        return float_ops.wageubn_update(
            q, e, grad, m, lr, momentum, weight_decay, grad_bits, momentum_bits, acc_bits, rng
        )

    def compensation_bwd(self, err, z, scale, gate=None):
        return float_ops.compensation_bwd(err if gate is None else float_ops.relu_bwd_f32(err, gate), z, scale)

    def sgd_f32(self, w, grad, v, lr, momentum, weight_decay, nesterov):
        return float_ops.sgd_f32(w, grad, v, lr, momentum, weight_decay, nesterov)

    # ------------------------------------------------------------ float32 (the FP32 recipe)
    def gemm_f32(self, a, b, b_transposed=True):
        return a @ (b.T if b_transposed else b)

    def conv2d_f32(self, x, w, stride, pad):
        n, h, wd, _ = x.shape
        o, kh, kw, c = w.shape
        cols = im2col(x, kh, kw, stride, pad).astype(np.float32)
        out = cols @ w.reshape(o, -1).T
        return out.reshape(n, out_size(h, kh, stride, pad), out_size(wd, kw, stride, pad), o)

    def conv2d_bwd_data_f32(self, err, w, stride, pad, in_hw):
        o, kh, kw, c = w.shape
        dcols = err.reshape(-1, o) @ w.reshape(o, -1)
        return col2im(dcols, err.shape, (kh, kw, c), stride, pad, in_hw).astype(np.float32)

    def conv2d_bwd_weight_f32(self, err, x, stride, pad, kernel):
        kh, kw = kernel
        o = err.shape[-1]
        cols = im2col(x, kh, kw, stride, pad).astype(np.float32)
        return (err.reshape(-1, o).T @ cols).reshape(o, kh, kw, x.shape[-1])


# ---------------------------------------------------------------- depthwise arithmetic
# One loop over the taps, each a whole-tensor multiply-add in `dtype`. For int8 operands in
# int32 (int64) this is exact, so any order agrees. For float32 it fixes the order every
# backend keeps to give the same bits: each product rounded to float32, then added (no fused
# multiply-add), a sum starting from 0.0 --
#   forward and backward data: over the taps in (kh, kw) order;
#   weight gradient: per image over its output positions in (oh, ow) order, then the images'
#   sums added in image order (per-image sums keep the rounding of a long sum in check).


def _dw_padded(x, pad, dtype):
    return np.pad(x.astype(dtype), ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x.astype(dtype)


def _dw_tap(xp, i, j, oh, ow, stride):
    """The input (padded) each output position meets at tap (i, j): [N, OH, OW, C]."""
    return xp[:, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride, :]


def _dw_forward(x, w, stride, pad, dtype):
    n, h, wd, c = x.shape
    kh, kw = w.shape[1:3]
    if w.shape != (c, kh, kw, 1):
        raise ValueError(f"depthwise weight shape {w.shape} does not match {c} input channels (C, KH, KW, 1)")
    oh, ow = out_size(h, kh, stride, pad), out_size(wd, kw, stride, pad)
    xp, wc = _dw_padded(x, pad, dtype), w[..., 0].astype(dtype)
    y = np.zeros((n, oh, ow, c), dtype)
    for i in range(kh):
        for j in range(kw):
            y += _dw_tap(xp, i, j, oh, ow, stride) * wc[:, i, j]
    return y


def _dw_backward_data(err, w, stride, pad, in_hw, dtype):
    n, oh, ow, c = err.shape
    kh, kw = w.shape[1:3]
    h, wd = in_hw
    dx = np.zeros((n, h + 2 * pad, wd + 2 * pad, c), dtype)
    e, wc = err.astype(dtype), w[..., 0].astype(dtype)
    for i in range(kh):
        for j in range(kw):
            dx[:, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride, :] += e * wc[:, i, j]
    return np.ascontiguousarray(dx[:, pad : pad + h, pad : pad + wd, :])


def _dw_backward_weight(err, x, stride, pad, kernel, dtype):
    n, oh, ow, c = err.shape
    kh, kw = kernel
    xp, e = _dw_padded(x, pad, dtype), err.astype(dtype)
    taps = np.stack([_dw_tap(xp, i, j, oh, ow, stride) for i in range(kh) for j in range(kw)], axis=3)
    per_image = np.zeros((n, kh * kw, c), dtype)  # [N, taps, C]
    for p in range(oh):
        for q in range(ow):
            per_image += taps[:, p, q] * e[:, p, q, None, :]
    dw = np.zeros((kh * kw, c), dtype)
    for image in per_image:
        dw += image
    return np.ascontiguousarray(dw.T.reshape(c, kh, kw, 1))


def _c_div(a: np.ndarray, divisor) -> np.ndarray:
    """C integer division (truncation toward zero) of int64 arrays by a positive divisor."""
    return np.sign(a) * (np.abs(a) // divisor)


def niti_loss_grad(logits, exponent, labels, rng):
    """NITI's integer loss gradient (numerics.py: the constants and where the form comes from)."""
    s = logits.astype(np.int64)
    e = max(int(exponent), MIN_EXPONENT)
    if e > TAYLOR_BELOW:
        s = _c_div(s * LOG2E_Q15, 1 << 15)
        s = s * (1 << e) if e >= 0 else _c_div(s, 1 << -e)
        s = np.maximum(s - (s.max(axis=1, keepdims=True) - 10), 0)
        p = (np.int64(1) << s) - 1
    else:
        p = (1 << (1 - 2 * e)) + s * (1 << (1 - e)) + s * s
    p = p * (1 << LOSS_SCALE_BITS) // p.sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    p[rows, labels] -= p.sum(axis=1)
    return numerics.shift_round(p.astype(np.int32), LOSS_SHIFT, "sto", rng)
