"""The float-recipe ops (Octo, WAGEUBN, AFP, MLS, FP8, FP32) defined in NumPy: what the
reference backend (backends/ops_ref.py) runs as the judge, what every native
implementation is tested against, and the grids the recipes round to at initialisation.

Quantizers and element-wise ops are bit-exact definitions. Sums over many elements
(PRC's squared errors, the compensation layer's channel sums) are float64 and agree with
a native backend within 1e-12 relative (their summation order may differ). Integer
products are exact; the chunked FP16 product fixes its summation order (product by
product inside a chunk), so it is deterministic and exact to reproduce.
"""

from __future__ import annotations

import numpy as np

from . import numerics
from .layout import col2im as col2im_float
from .layout import pool_windows

ROUNDINGS = ("round", "nearest_even", "sto")


def uniform(rng, shape) -> np.ndarray:
    """Uniform [0, 1) float64 from the counter RNG (24 bits, as a device would draw them)."""
    if rng is None:
        raise ValueError("stochastic rounding needs an RngKey")
    count = int(np.prod(shape))
    return (numerics.random_u32(rng, count) >> np.uint32(8)).astype(np.float64).reshape(shape) / 2.0**24


def round_values(x: np.ndarray, mode: str, rng=None) -> np.ndarray:
    """Round float64 values to integers: nearest (halves away from zero), nearest_even,
    or stochastic (`sto`: up with probability equal to the fraction, counter RNG)."""
    if mode == "round":
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    if mode == "nearest_even":
        return np.rint(x)
    if mode == "sto":
        return np.floor(x + uniform(rng, x.shape))
    raise ValueError(f"rounding mode {mode!r} is not one of {', '.join(ROUNDINGS)}")


def absmax_f(x) -> float:
    x = np.asarray(x)
    return float(np.max(np.abs(x))) if x.size else 0.0


def quantize_f(x, step: float, bits: int, mode: str, rng) -> np.ndarray:
    qmax = 2 ** (bits - 1) - 1
    q = np.clip(round_values(np.asarray(x, np.float64) / step, mode, rng), -qmax, qmax)
    return q.astype(np.int8 if bits <= 8 else np.int16)


def dequantize(acc, scale: float) -> np.ndarray:
    return (np.asarray(acc).astype(np.float64) * float(scale)).astype(np.float32)


def prc_squared_errors(x, top: float, ratios, qmax: int) -> list[float]:
    magnitude = np.abs(np.asarray(x, np.float64))
    out = []
    for r in ratios:
        step = r * top / qmax
        e = np.minimum(np.floor(magnitude * (1.0 / step) + 0.5), qmax) * step - magnitude
        out.append(float(np.dot(e.ravel(), e.ravel())))
    return out


def prc_quantize(x, prev_ratio: float, momentum: float, ratios, bits: int, mode: str, rng):
    """Octo's error quantizer (Zhou et al. 2021): the clip ratio with the least squared
    error (prc_squared_errors, np.argmin; 1.0 when x is all zero) moves the layer's ratio
    by `momentum`; x is quantized over [-ratio * max|x|, ratio * max|x|] (float step).
    Returns (q, step, ratio)."""
    x = np.asarray(x, np.float32)
    qmax = 2 ** (bits - 1) - 1
    top = absmax_f(x)
    best = 1.0 if top == 0.0 else float(ratios[int(np.argmin(prc_squared_errors(x, top, ratios, qmax)))])
    ratio = (1 - momentum) * prev_ratio + momentum * best
    limit = ratio * top
    if limit == 0.0:
        return np.zeros(x.shape, np.int8 if bits <= 8 else np.int16), 1.0, ratio
    step = limit / qmax
    return quantize_f(x, step, bits, mode, rng), step, ratio


def floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2(x)) of positive float64 values, exactly (frexp, not a rounded log2)."""
    _, e = np.frexp(x)
    return (e - 1).astype(np.float64)


def quantize_mls(x, group: int, top: float, tensor_scale: float, kmax: int, qmax: int, mode: str, rng) -> np.ndarray:
    """MLS elements with their group shift applied: q * 2**(kmax - k), int16."""
    x = np.asarray(x, np.float64)
    channels = x.shape[-1]
    groups = x.reshape(*x.shape[:-1], channels // group, group)
    group_max = np.max(np.abs(groups), axis=-1, keepdims=True)
    k = np.clip(floor_log2(top / np.maximum(group_max, top * 2.0**-64)), 0, kmax)
    q = np.clip(round_values(groups / (tensor_scale * 2.0**-k), mode, rng), -qmax, qmax)
    return (q * 2.0 ** (kmax - k)).astype(np.int16).reshape(x.shape)


def quantize_mls_ranged(x, group: int, kmax: int, qmax: int, mode: str, rng) -> tuple[np.ndarray, float]:
    """(quantize_mls's elements, top) with top = max|x| and the tensor scale top / qmax:
    absmax_f and quantize_mls as one call (all zeros, top 0.0, when x is all zero or empty)."""
    top = absmax_f(x)
    if top == 0.0:
        return np.zeros(np.shape(x), np.int16), 0.0
    return quantize_mls(x, group, top, top / qmax, kmax, qmax, mode, rng), top


def round_float(x, exponent_bits: int, mantissa_bits: int, mode: str, rng) -> np.ndarray:
    """Nearest value of a (1, exponent_bits, mantissa_bits) float with subnormals, as
    float32; overflow saturates at the largest finite value (Wang et al. 2018 clip)."""
    x = np.asarray(x, np.float64)
    bias = 2 ** (exponent_bits - 1) - 1
    emin, largest = 1 - bias, (2 - 2.0**-mantissa_bits) * 2.0 ** (2**exponent_bits - 2 - bias)
    magnitude = np.abs(x)
    exponent = floor_log2(np.where(magnitude > 0, magnitude, 1.0))
    ulp = 2.0 ** (np.maximum(exponent, emin) - mantissa_bits)
    return np.clip(round_values(x / ulp, mode, rng) * ulp, -largest, largest).astype(np.float32)


def ceil_log2(t: float) -> int:
    """ceil(log2(t)) of a positive finite t, exactly (frexp: a rounded log2 misses by one
    just above a power of two)."""
    mantissa, exponent = np.frexp(float(t))
    return int(exponent) - 1 if mantissa == 0.5 else int(exponent)


def pow2_grid(x, bits: int, mode: str, rng) -> np.ndarray:
    """x (float64) on a `bits`-bit power-of-two grid fitted to its range, float64 values
    (zeros when x is all zero)."""
    top = absmax_f(x)
    if top == 0.0:
        return np.zeros(np.shape(x))
    step = 2.0 ** (ceil_log2(top) - (bits - 1))
    return quantize_f(x, step, bits, mode, rng).astype(np.float64) * step


def wageubn_update(
    q,
    e: int,
    grad,
    m,
    lr: float,
    momentum: float,
    weight_decay: float,
    grad_bits: int,
    momentum_bits: int,
    acc_bits: int,
    rng,
):
    """WAGEUBN's update (Yang et al. 2020) of weights q * 2**e on an acc_bits grid with
    momentum m: the gradient (plus weight decay) on a grad_bits grid (stochastic), the
    momentum on a momentum_bits grid (nearest), the weights moved by rint(lr * m / 2**e).
    Returns (new q int32, new m float32)."""
    current = np.asarray(q).astype(np.float64) * 2.0**e
    g = pow2_grid(np.asarray(grad, np.float64) + weight_decay * current, grad_bits, "sto", rng)
    m_new = pow2_grid(momentum * np.asarray(m, np.float64) + g, momentum_bits, "round", None)
    limit = 2 ** (acc_bits - 1) - 1
    q_new = np.clip(np.asarray(q).astype(np.int64) - np.rint(lr * m_new / 2.0**e).astype(np.int64), -limit, limit)
    return q_new.astype(np.int32), m_new.astype(np.float32)


def compensation_fwd(z, scale, shift) -> np.ndarray:
    """y = (1 + scale) * z + shift per channel (the last axis), float32."""
    return (z * (1 + scale) + shift).astype(np.float32)


def compensation_bwd(err, z, scale):
    """(d z, d scale, d shift) of compensation_fwd, summed over all but channels."""
    axes = tuple(range(err.ndim - 1))
    e64 = err.astype(np.float64)
    return (
        (e64 * (1 + scale)).astype(np.float32),
        (e64 * z).sum(axis=axes).astype(np.float32),
        e64.sum(axis=axes).astype(np.float32),
    )


def sgd_f32(w, grad, v, lr, momentum, weight_decay, nesterov):
    """PyTorch's SGD in float32: (new w, new velocity)."""
    g = grad + np.float32(weight_decay) * w
    v = np.float32(momentum) * v + g
    step = g + np.float32(momentum) * v if nesterov else v
    return (w - np.float32(lr) * step).astype(np.float32), v.astype(np.float32)


def matmul_s16(a, b, a_transposed=False) -> np.ndarray:
    """int16 (a.T if a_transposed else a) @ b[K,N], exact int64 (float64 sums stay exact
    below 2**53)."""
    a = a.T if a_transposed else a
    depth = a.shape[1]
    bound = float(np.max(np.abs(a), initial=0)) * float(np.max(np.abs(b), initial=0)) * depth
    if bound >= 2.0**53:
        raise OverflowError(f"int16 product of depth {depth} may exceed 2**53")
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


def _fp16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to FP16, kept as float32: a float32 sum or product of FP16
    values rounded once to FP16 is the correctly rounded FP16 operation."""
    return x.astype(np.float16).astype(np.float32)


def matmul_fp16_chunked(a, b, a_transposed: bool, chunk: int, fp16_adds: bool) -> np.ndarray:
    """FP16 values (a.T if a_transposed else a) @ b[K,N] with Wang et al.'s chunk-based
    accumulation, as float32:
    each run of `chunk` products summed one by one (each product and running sum rounded
    to FP16 when `fp16_adds`, else in float32), the chunk sum rounded to FP16, the chunk
    sums added one by one in FP16."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    a, b = (a.T if a_transposed else a), b.T
    m, k = a.shape
    n = b.shape[0]
    chunk = max(1, min(chunk, k))
    chunks = -(-k // chunk)
    pad = chunks * chunk - k
    if pad:
        a, b = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, 0), (0, pad)))
    a = np.ascontiguousarray(a.reshape(m, chunks, chunk).transpose(2, 1, 0))  # [chunk, chunks, M]
    b = np.ascontiguousarray(b.reshape(n, chunks, chunk).transpose(2, 1, 0))  # [chunk, chunks, N]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        partial = np.zeros((chunks, m, n), np.float32)
        for j in range(chunk):
            p = a[j][:, :, None] * b[j][:, None, :]
            partial = _fp16(partial + _fp16(p)) if fp16_adds else partial + p
        partial = _fp16(partial)
        total = partial[0].copy()
        for c in range(1, chunks):
            total = _fp16(total + partial[c])
    return total


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


def im2col(x, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
    """NHWC -> [N*OH*OW, KH*KW*C] patches in x's own dtype (int16, float32), zero padded."""
    x = np.asarray(x)
    n, h, w, ch = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    st = xp.strides
    windows = np.lib.stride_tricks.as_strided(
        xp, (n, oh, ow, kh, kw, ch), (st[0], st[1] * stride, st[2] * stride, st[1], st[2], st[3]), writeable=False
    )
    return windows.reshape(n * oh * ow, kh * kw * ch)


def col2im(dcols, err_nhw, kernel_hwc, stride: int, pad: int, in_hw) -> np.ndarray:
    """Scatter-add [N*OH*OW, KH*KW*C] patch sums onto NHWC: int64 sums exactly in int64,
    float64 ones in float64 (exact for FP8's at most KH*KW FP16-valued terms)."""
    n, oh, ow = err_nhw
    if np.asarray(dcols).dtype.kind == "f":
        return np.ascontiguousarray(col2im_float(dcols, (n, oh, ow, None), kernel_hwc, stride, pad, in_hw))
    kh, kw, ch = kernel_hwc
    h, w = in_hw
    cols = np.asarray(dcols, np.int64).reshape(n, oh, ow, kh, kw, ch)
    dx = np.zeros((n, h + 2 * pad, w + 2 * pad, ch), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            dx[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :] += cols[:, :, :, i, j, :]
    return np.ascontiguousarray(dx[:, pad : pad + h, pad : pad + w, :])


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
