"""The emulated recipes' number grids in NumPy: rounding (nearest, nearest-even, stochastic on
the counter RNG), the quantizers (int grids, Octo's PRC, MLS's groups, FP8's float grids,
WAGEUBN's power-of-two grids), their updates (WAGEUBN's, PyTorch's SGD) and Octo's
compensation. Quantizers are bit-exact definitions; PRC's squared errors and the
compensation's channel sums are float64 and agree with a native backend within 1e-12
relative (their summation order may differ)."""

from __future__ import annotations

import numpy as np

from .. import numerics

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
