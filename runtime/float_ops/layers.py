"""The float layers in NumPy: ReLU and max-pools, the mobile CNNs' activations, Mul, concat,
slice and shuffle, batch normalisation (PyTorch's, and on WAGEUBN's grids), channel means
and sums, residual add, dropout, bias and the softmax cross-entropy gradient. Element-wise
ops are bit-exact definitions."""

from __future__ import annotations

import numpy as np

from ..layout import pool_windows
from .quantize import pow2_grid


def relu_f32(x):
    """x where x >= 0 (so -0.0 stays -0.0) or NaN, else +0.0. Spelled as a select: what
    np.maximum(x, 0) gives a -0.0 depends on NumPy's version and SIMD path (2.x: +0.0)."""
    x = np.asarray(x, np.float32)
    return np.where((x >= 0) | np.isnan(x), x, np.float32(0))


def relu_bwd_f32(err, y):
    return np.where(y > 0, err, np.float32(0))


def maxpool_f32(x, kernel, stride):
    windows = pool_windows(x, kernel, stride)
    argmax = windows.argmax(axis=-1).astype(np.uint8)
    y = np.take_along_axis(windows, argmax[..., None].astype(np.intp), axis=-1)[..., 0]
    return np.ascontiguousarray(y), argmax


def maxpool_bwd_f32(err, argmax, kernel, stride, in_hw):
    n, oh, ow, c = err.shape
    dx = np.zeros((n, in_hw[0], in_hw[1], c), np.float32)
    for kh in range(kernel):
        for kw in range(kernel):
            dx[:, kh : kh + stride * oh : stride, kw : kw + stride * ow : stride, :] += np.where(
                argmax == kh * kernel + kw, err, 0
            )
    return dx


# ---------------------------------------------------------------- mobile CNNs' float layers
# (algorithms/_branch_layers.py lowers them; the derivatives are PyTorch's, ATen's
# hardtanh/hardsigmoid/hardswish/silu backward kernels, so FP32 matches it).


def act_f32(x, function: str, params=()) -> np.ndarray:
    """nn.Nonlinearity's function of float32 `x`, computed in float64, rounded once to float32."""
    v = np.asarray(x, np.float64)
    if function == "clip":
        y = np.clip(v, params[0], params[1])
    elif function == "hardsigmoid":
        y = np.clip(params[0] * v + params[1], 0.0, 1.0)
    elif function == "hardswish":
        y = v * np.clip(v / 6.0 + 0.5, 0.0, 1.0)
    elif function == "sigmoid":
        y = _sigmoid(v)
    elif function == "silu":
        y = v * _sigmoid(v)
    elif function == "tanh":
        y = np.tanh(v)
    else:
        raise ValueError(f"unknown activation function {function!r}")
    return y.astype(np.float32)


def act_bwd_f32(err, x, function: str, params=()) -> np.ndarray:
    """d input of act_f32 from its input `x` and the output's error, float64 inside."""
    v, e = np.asarray(x, np.float64), np.asarray(err, np.float64)
    if function == "clip":
        d = ((v > params[0]) & (v < params[1])).astype(np.float64)
    elif function == "hardsigmoid":
        z = params[0] * v + params[1]
        d = np.where((z > 0.0) & (z < 1.0), params[0], 0.0)
    elif function == "hardswish":
        d = np.where(v <= -3.0, 0.0, np.where(v < 3.0, v / 3.0 + 0.5, 1.0))
    elif function == "sigmoid":  # s * (1 - s) with 1 - s as sigmoid(-v): no cancellation where s is near 1
        d = _sigmoid(v) * _sigmoid(-v)
    elif function == "silu":
        d = _sigmoid(v) * (1.0 + v * _sigmoid(-v))
    elif function == "tanh":  # 1 - tanh**2 as 1 / cosh**2: no cancellation near saturation
        with np.errstate(over="ignore"):
            d = 1.0 / np.cosh(v) ** 2
    else:
        raise ValueError(f"unknown activation function {function!r}")
    return (e * d).astype(np.float32)


def _sigmoid(v):
    """1 / (1 + e**-v), from the exponential of -|v| (no overflow, no cancellation for large |v|)."""
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def mul_f32(x, g) -> np.ndarray:
    """x * g, g of x's shape or (N, 1, 1, C) (a channel scale: squeeze-excitation)."""
    return (np.asarray(x, np.float32) * np.asarray(g, np.float32)).astype(np.float32, copy=False)


def mul_bwd_f32(err, x, g) -> tuple[np.ndarray, np.ndarray]:
    """(d x, d g) of mul_f32; d g summed over H and W (float64) when g scales channels."""
    err = np.asarray(err, np.float32)
    dx = (err * np.asarray(g, np.float32)).astype(np.float32, copy=False)
    prod = np.asarray(err, np.float64) * np.asarray(x, np.float64)
    if g.shape != x.shape:
        prod = prod.sum(axis=(1, 2), keepdims=True)
    return dx, prod.astype(np.float32)


def concat_channels(parts) -> np.ndarray:
    """NHWC images of one N, H, W joined along channels (any dtype)."""
    return np.concatenate([np.asarray(p) for p in parts], axis=-1)


def slice_channels(x, start: int, stop: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x)[..., start:stop])


def pad_channels(err, start: int, channels: int) -> np.ndarray:
    """`err` placed at channels [start, start + its channels) of zeros with `channels` channels."""
    out = np.zeros((*err.shape[:-1], channels), err.dtype)
    out[..., start : start + err.shape[-1]] = err
    return out


def channel_shuffle(x, groups: int) -> np.ndarray:
    """Channels seen as (groups, C / groups) and transposed (ShuffleNet); with C / groups
    groups it is the inverse."""
    *lead, c = x.shape
    return np.ascontiguousarray(x.reshape(*lead, groups, c // groups).swapaxes(-1, -2).reshape(*lead, c))


# ---------------------------------------------------------------- batch normalisation (PyTorch's)


class _Identity:
    @staticmethod
    def stat(v):
        return v

    affine = error = stat


_NO_GRIDS = _Identity()


def bn_forward_values(x, gamma, beta, mean, var, training, grids=None, momentum=0.1, eps=1e-5):
    """(y, x-hat, 1/std, new running mean, new running variance), float64 inside. `grids`:
    where it rounds (algorithms/_float_layers.BNGrids: WAGEUBN's integer batch norm), None for nowhere."""
    grids = grids or _NO_GRIDS
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim - 1))
    if training:
        mu = grids.stat(x.mean(axis=axes))
        sigma2 = grids.stat(((x - mu) ** 2).mean(axis=axes))
        count = x.size // x.shape[-1]
        unbiased = sigma2 * count / max(count - 1, 1)
        mean = (1 - momentum) * mean + momentum * mu
        var = (1 - momentum) * var + momentum * unbiased
    else:
        mu, sigma2 = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    inv = grids.stat(1.0 / np.sqrt(sigma2 + eps))
    xhat = grids.stat((x - mu) * inv)
    y = grids.affine(np.asarray(gamma, np.float64)) * xhat + grids.affine(np.asarray(beta, np.float64))
    return y, xhat, inv, mean, var


def bn_backward_values(err, xhat, inv, gamma, grids=None):
    """(d input, d gamma, d beta) of y = gamma * (x - mean) / std + beta over the batch."""
    grids = grids or _NO_GRIDS
    err = grids.error(np.asarray(err, np.float64))
    xhat = np.asarray(xhat, np.float64)
    axes = tuple(range(err.ndim - 1))
    count = err.size // err.shape[-1]
    d_beta = err.sum(axis=axes)
    d_gamma = (err * xhat).sum(axis=axes)
    g = grids.affine(np.asarray(gamma, np.float64))
    dx = g * inv / count * (count * err - d_beta - xhat * d_gamma)
    return dx, d_gamma, d_beta


class Pow2Grids:
    """Batch norm's grids as bit widths (WAGEUBN's): each a power-of-two grid fitted to the whole
    vector's or tensor's range, halves away from zero (pow2_grid); 0 bits: no rounding."""

    def __init__(self, stat_bits: int = 0, affine_bits: int = 0, error_bits: int = 0):
        self.bits = (stat_bits, affine_bits, error_bits)

    @staticmethod
    def _on(v, bits):
        v = np.asarray(v, np.float64)
        return pow2_grid(v, bits, "round", None) if bits else v

    def stat(self, v):
        return self._on(v, self.bits[0])

    def affine(self, v):
        return self._on(v, self.bits[1])

    def error(self, v):
        return self._on(v, self.bits[2])


def bn_fwd_grid_f32(x, gamma, beta, mean, var, training, momentum, eps, stat_bits, affine_bits):
    """backends' bn_fwd_grid_f32: bn_forward_values on WAGEUBN's grids, each result float32."""
    out = bn_forward_values(x, gamma, beta, mean, var, training, Pow2Grids(stat_bits, affine_bits), momentum, eps)
    return tuple(np.asarray(v, np.float32) for v in out)


def bn_bwd_grid_f32(err, xhat, inv_std, gamma, error_bits, affine_bits):
    grids = Pow2Grids(0, affine_bits, error_bits)
    out = bn_backward_values(err, xhat, np.asarray(inv_std, np.float64), gamma, grids)
    return tuple(np.asarray(v, np.float32) for v in out)


def bn_stats(x, mean, var, training: bool, eps: float) -> np.ndarray:
    """(2, C) float64: the mean and 1/std batch norm normalises float32 `x` with (bn_forward_values's,
    bit for bit: the batch's in training, else the running `mean` and `var`)."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim - 1))
    if training:
        mu = x.mean(axis=axes)
        sigma2 = ((x - mu) ** 2).mean(axis=axes)
    else:
        mu, sigma2 = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    return np.stack([mu, 1.0 / np.sqrt(sigma2 + eps)])


def bn_from_stats(x, stats, gamma, beta) -> tuple[np.ndarray, np.ndarray]:
    """(x-hat, y) float32 of batch norm's forward on float32 `x` normalised by `stats` (bn_stats):
    the values bn_fwd_f32 wrote, recomputed (NITI's fused batch norm keeps its int8 input, not them)."""
    h = (np.asarray(x, np.float64) - stats[0]) * stats[1]
    y = np.asarray(gamma, np.float64) * h + np.asarray(beta, np.float64)
    return h.astype(np.float32), y.astype(np.float32)


def bn_fwd_f32(x, gamma, beta, mean, var, training, momentum, eps):
    """backends' bn_fwd_f32: bn_forward_values, each result float32."""
    out = bn_forward_values(x, gamma, beta, mean, var, training, None, momentum, eps)
    return tuple(np.asarray(v, np.float32) for v in out)


def bn_bwd_f32(err, xhat, inv_std, gamma):
    return tuple(
        np.asarray(v, np.float32) for v in bn_backward_values(err, xhat, np.asarray(inv_std, np.float64), gamma)
    )


def channel_mean_f32(x):
    return np.asarray(x).mean(axis=(1, 2), dtype=np.float64).astype(np.float32)


def channel_sum_f32(x):
    x = np.asarray(x)
    return x.reshape(-1, x.shape[-1]).sum(axis=0, dtype=np.float64).astype(np.float32)


def add_f32(a, b):
    return (np.asarray(a, np.float32) + np.asarray(b, np.float32)).astype(np.float32, copy=False)


def dropout_apply_f32(x, keep, p: float):
    """x / float32(1 - p) where `keep`, else 0, float32 (dropout's forward and backward)."""
    return np.where(keep, np.asarray(x, np.float32) / np.float32(1 - p), 0).astype(np.float32)


def bias_add_f32(y, b):
    """y + b over the last axis, float32 (a layer's bias)."""
    return (np.asarray(y, np.float32) + np.asarray(b, np.float32)).astype(np.float32, copy=False)


def softmax_xent_grad_f32(logits, labels, divisor: float):
    """(softmax(logits) - onehot(labels)) / divisor per row, in float64, one rounding to float32:
    softmax cross-entropy's gradient (divisor: the batch, FP8's over its loss scale)."""
    logits = np.asarray(logits, np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(labels)), labels] -= 1.0
    return (p / divisor).astype(np.float32)


def channel_mean_bwd_f32(err, in_hw):
    """The global average pool's input error: err (N, C) or (N, 1, 1, C) / float32(H * W) at every pixel."""
    err = np.asarray(err, np.float32)
    n, c = err.shape[0], err.shape[-1]
    share = err.reshape(n, c) / np.float32(in_hw[0] * in_hw[1])
    return np.ascontiguousarray(np.broadcast_to(share[:, None, None, :], (n, *in_hw, c)))


def _pool_padding(size, out, kernel, stride, pad):
    """-inf cells after an axis of `size` so that `out` windows fit (padding, and ceil_mode's partial windows)."""
    return max((out - 1) * stride + kernel - size - pad, 0)


def maxpool_pad_f32(x, kernel, stride, pad, out_hw):
    """maxpool_f32 of x padded with -inf: `pad` cells before each axis, after it as many as
    `out_hw` windows reach (PyTorch's padded and ceil_mode max-pool)."""
    (oh, ow), (h, w) = out_hw, x.shape[1:3]
    after = (_pool_padding(h, oh, kernel, stride, pad), _pool_padding(w, ow, kernel, stride, pad))
    padded = np.pad(x, ((0, 0), (pad, after[0]), (pad, after[1]), (0, 0)), constant_values=-np.inf)
    y, argmax = maxpool_f32(padded, kernel, stride)
    return np.ascontiguousarray(y[:, :oh, :ow]), np.ascontiguousarray(argmax[:, :oh, :ow])


def maxpool_pad_bwd_f32(err, argmax, kernel, stride, pad, in_hw):
    """The input error of maxpool_pad_f32: maxpool_bwd_f32 on the padded image, cropped."""
    (h, w), (oh, ow) = in_hw, err.shape[1:3]
    padded = (h + pad + _pool_padding(h, oh, kernel, stride, pad), w + pad + _pool_padding(w, ow, kernel, stride, pad))
    dx = maxpool_bwd_f32(err, argmax, kernel, stride, padded)
    return np.ascontiguousarray(dx[:, pad : pad + h, pad : pad + w])
