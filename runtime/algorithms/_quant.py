"""Quantizers shared by the emulated recipes (Octo, WAGEUBN, AFP, MLS, FP8).

Each function maps float values onto a number grid exactly (float64 arithmetic on
values that are integers times powers of two, so nothing is lost) and returns a
`Scaled` tensor: integer (or FP8/FP16-valued) elements `q` and a scale, value
`q * scale`. Not a recipe: no YAML names this module.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import numerics


@dataclass(frozen=True)
class Scaled:
    """A quantized tensor: elements `q` times `scale` (a float, or an array that
    broadcasts against `q`: MLS group scales)."""

    q: np.ndarray
    scale: float | np.ndarray = 1.0

    def values(self) -> np.ndarray:
        return self.q.astype(np.float64) * self.scale

    @property
    def shape(self):
        return self.q.shape

    @property
    def scalar_int8(self) -> bool:
        """Can the int8 product hooks take it (int8 elements, one scale for the tensor)?"""
        return self.q.dtype == np.int8 and np.ndim(self.scale) == 0


def qmax(bits: int) -> int:
    return 2 ** (bits - 1) - 1


def _int_dtype(bits: int):
    return np.int8 if bits <= 8 else np.int16 if bits <= 16 else np.int32


def round_values(x: np.ndarray, mode: str, rng=None) -> np.ndarray:
    """Round float64 values to integers: nearest (halves away from zero), nearest_even,
    or stochastic (`sto`: up with probability equal to the fraction, counter RNG)."""
    if mode == "round":
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    if mode == "nearest_even":
        return np.rint(x)
    if mode == "sto":
        return np.floor(x + uniform(rng, x.shape))
    raise ValueError(f"rounding mode {mode!r} is not round, nearest_even or sto")


def uniform(rng, shape) -> np.ndarray:
    """Uniform [0, 1) float64 from the counter RNG (24 bits, as a device would draw them)."""
    if rng is None:
        raise ValueError("stochastic rounding needs an RngKey")
    count = int(np.prod(shape))
    return (numerics.random_u32(rng, count) >> np.uint32(8)).astype(np.float64).reshape(shape) / 2.0**24


# ---------------------------------------------------------------- integers with a per-tensor scale

def pow2_exponent(max_abs: float, bits: int) -> int:
    """Exponent e so that max_abs / 2**e fits `bits`-bit integers (NITI's range estimate)."""
    if max_abs == 0.0:
        return 0
    return int(np.ceil(np.log2(max_abs))) - (bits - 1)


def quantize_int(x, bits: int = 8, scale: str = "pow2", rounding: str = "round", rng=None,
                 clip: float | None = None) -> Scaled:
    """Symmetric `bits`-bit integers with one scale: a power of two covering max|x| (or
    `clip`), or the float max|x| / qmax. Values beyond the range saturate."""
    x = np.asarray(x, dtype=np.float64)
    limit = float(np.max(np.abs(x))) if clip is None else float(clip)
    if limit == 0.0:
        return Scaled(np.zeros(x.shape, _int_dtype(bits)), 1.0)
    step = 2.0 ** pow2_exponent(limit, bits) if scale == "pow2" else limit / qmax(bits)
    q = np.clip(round_values(x / step, rounding, rng), -qmax(bits), qmax(bits))
    return Scaled(q.astype(_int_dtype(bits)), step)


def quantization_error(x, quantized: Scaled) -> float:
    """The relative change of mean |x| that quantization causes (AFP's measure of how
    much a tensor's distribution moved, Zhang et al. 2020)."""
    mean = float(np.mean(np.abs(x)))
    return 0.0 if mean == 0.0 else abs(float(np.mean(np.abs(quantized.values()))) - mean) / mean


# ---------------------------------------------------------------- Octo's parameterized range clipping

PRC_CANDIDATES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


def prc_best_ratio(x, bits: int = 8, candidates=PRC_CANDIDATES) -> float:
    """The clipping ratio (of max|x|) whose int quantization has the least squared error."""
    x = np.asarray(x, dtype=np.float64)
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if top == 0.0:
        return 1.0
    magnitude = np.abs(x)
    errors = [_clip_squared_error(magnitude, a * top / qmax(bits), qmax(bits)) for a in candidates]
    return float(candidates[int(np.argmin(errors))])


def _clip_squared_error(magnitude, step, top_code) -> float:
    """sum((quantize_int(x, clip=step * top_code) - x)**2) from |x|: rounding halves away
    from zero is symmetric, so the error of x equals the error of |x|. In place, one
    temporary: Octo's PRC evaluates every candidate ratio on every error tensor."""
    q = magnitude / step
    q += 0.5
    np.floor(q, out=q)
    np.minimum(q, top_code, out=q)
    q *= step
    q -= magnitude
    return float(np.dot(q.ravel(), q.ravel()))


def quantize_prc(x, ratio: float, bits: int = 8, rounding: str = "round", rng=None) -> Scaled:
    """Integers over [-ratio * max|x|, ratio * max|x|]: larger values clip."""
    x = np.asarray(x, dtype=np.float64)
    top = float(np.max(np.abs(x))) if x.size else 0.0
    return quantize_int(x, bits, "float", rounding, rng, clip=ratio * top)


# ---------------------------------------------------------------- MLS: tensor scale x group scale x elements

def quantize_mls(x, bits: int, group_size: int, group_bits: int, rounding: str = "round", rng=None) -> Scaled:
    """Multi-level scaling (Zhong et al. 2022): a float tensor scale s = max|x| / qmax; groups
    of `group_size` consecutive channels (last axis) get a power-of-two scale 2**-k with
    k in 0 .. 2**group_bits - 1, the largest that keeps the group's max inside the range;
    elements are `bits`-bit integers. Value = q * s * 2**-k."""
    x = np.asarray(x, dtype=np.float64)
    channels = x.shape[-1]
    if channels % group_size:
        raise ValueError(f"MLS group size {group_size} does not divide {channels} channels")
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if top == 0.0:
        return Scaled(np.zeros(x.shape, _int_dtype(bits)), 1.0)
    tensor_scale = top / qmax(bits)
    groups = x.reshape(*x.shape[:-1], channels // group_size, group_size)
    group_max = np.max(np.abs(groups), axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        k = np.floor(np.log2(top / np.maximum(group_max, top * 2.0**-64)))
    k = np.clip(k, 0, 2**group_bits - 1)
    scale = tensor_scale * 2.0 ** -k
    q = np.clip(round_values(groups / scale, rounding, rng), -qmax(bits), qmax(bits))
    scale = np.broadcast_to(scale, groups.shape).reshape(x.shape)
    return Scaled(q.reshape(x.shape).astype(_int_dtype(bits)), scale)


# ---------------------------------------------------------------- small floats (FP8 1-5-2, FP16 1-5-10)

def float_grid(exponent_bits: int, mantissa_bits: int) -> tuple[int, float]:
    """(smallest normal exponent, largest finite value) of an IEEE-like format."""
    bias = 2 ** (exponent_bits - 1) - 1
    emax = 2**exponent_bits - 2 - bias
    return 1 - bias, (2 - 2.0**-mantissa_bits) * 2.0**emax


def round_float(x, exponent_bits: int, mantissa_bits: int, mode: str = "nearest_even", rng=None) -> np.ndarray:
    """Round float64 values to the nearest value of a (1, exponent_bits, mantissa_bits)
    float with subnormals; `nearest_even` breaks ties to an even mantissa, `sto` rounds
    up with probability equal to the distance. Overflow saturates at the largest finite
    value (Wang et al. clip rather than produce infinities)."""
    x = np.asarray(x, dtype=np.float64)
    emin, largest = float_grid(exponent_bits, mantissa_bits)
    magnitude = np.abs(x)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    ulp = 2.0 ** (np.maximum(exponent, emin) - mantissa_bits)
    rounded = round_values(x / ulp, mode, rng) * ulp
    return np.clip(rounded, -largest, largest)


def to_fp8(x, mode: str = "nearest_even", rng=None) -> np.ndarray:
    """FP8 1-5-2 values, held in float16 (every FP8 value is an FP16 value)."""
    return round_float(x, 5, 2, mode, rng).astype(np.float16)


def to_fp16(x, mode: str = "nearest_even", rng=None) -> np.ndarray:
    return round_float(x, 5, 10, mode, rng).astype(np.float16)


def _fp16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to FP16 and keep them as float32 (casts are vectorised; NumPy's
    float16 arithmetic is not). A float32 sum or product of two FP16 values rounded once
    to FP16 equals the correctly rounded FP16 operation: float32 has more than 2 * 11 + 2
    significant bits, so the double rounding cannot differ."""
    return x.astype(np.float16).astype(np.float32)


def chunked_dot_fp16(a: np.ndarray, b: np.ndarray, chunk: int = 64, chunk_sum: str = "fp16") -> np.ndarray:
    """a[M, K] @ b[N, K].T with Wang et al.'s chunk-based accumulation: each run of `chunk`
    products is summed into a chunk sum, then the chunk sums are added one by one in
    FP16. Operands must hold FP16 values (in any float dtype). Returns float16 [M, N].

    chunk_sum `fp16` is the paper's arithmetic: products rounded to FP16 and added one by
    one in FP16 inside the chunk. `fp32` sums each chunk with a float32 matmul (the
    products of FP16/FP8 values are exact in float32) and rounds the chunk sum to FP16
    once: one BLAS call instead of `chunk` passes over the data, and more accurate inside
    a chunk than FP16 hardware (it never swamps within a chunk, and a product below
    FP16's range still counts).
    """
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)    # FP16 values are exact in float32
    k = a.shape[1]
    chunk = min(chunk, k)      # a shorter reduction is one chunk; trailing zero products add nothing
    chunks = -(-k // chunk)
    pad = chunks * chunk - k
    if pad:
        a = np.pad(a, ((0, 0), (0, pad)))
        b = np.pad(b, ((0, 0), (0, pad)))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if chunk_sum == "fp32":
            partial = _float32_chunk_sums(a, b, chunk, chunks)
        elif chunk_sum == "fp16":
            partial = _sequential_chunk_sums(a, b, chunk, chunks)
        else:
            raise ValueError(f"chunk_sum {chunk_sum!r} is not fp16 or fp32")
        partial = partial.astype(np.float16, copy=False)
        total = partial[0].copy()
        for c in range(1, chunks):     # NumPy's float16 add is the correctly rounded FP16 add
            np.add(total, partial[c], out=total)
    return total


def _float32_chunk_sums(a, b, chunk, chunks):
    """[chunks, M, N] chunk sums by float32 matmuls, each rounded to FP16 (float16). Few
    large chunks go one BLAS call each on column slices; many small ones (weight
    gradients, whose reduction runs over the batch) as one batched matmul on contiguous
    copies, since NumPy's matmul leaves BLAS for strided batches."""
    m, n = a.shape[0], b.shape[0]
    if chunks <= 8:
        out = np.empty((chunks, m, n), np.float16)
        for c in range(chunks):
            out[c] = a[:, c * chunk:(c + 1) * chunk] @ b[:, c * chunk:(c + 1) * chunk].T
        return out
    a = np.ascontiguousarray(a.reshape(m, chunks, chunk).transpose(1, 0, 2))   # [chunks, M, chunk]
    b = np.ascontiguousarray(b.reshape(n, chunks, chunk).transpose(1, 2, 0))   # [chunks, chunk, N]
    return np.matmul(a, b).astype(np.float16)


def _sequential_chunk_sums(a, b, chunk, chunks):
    """[chunks, M, N] chunk sums, each product and each running sum rounded to FP16."""
    m, n = a.shape[0], b.shape[0]
    a = np.ascontiguousarray(a.reshape(m, chunks, chunk).transpose(2, 1, 0))   # [chunk, chunks, M]
    b = np.ascontiguousarray(b.reshape(n, chunks, chunk).transpose(2, 1, 0))   # [chunk, chunks, N]
    partial = np.zeros((chunks, m, n), np.float32)
    for j in range(chunk):
        partial = _fp16(partial + _fp16(a[j][:, :, None] * b[j][:, None, :]))
    return partial
