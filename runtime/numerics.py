"""The integer numerics of NITI, exactly as docs/ARCHITECTURE.md states them.

A tensor is `(q, e)`: int8 values `q` in [-127, 127] and a power-of-two exponent
`e`, so the real value is `q * 2**e`. Accumulators are int32 (int64 where a sum can
overflow). Shifting an accumulator right by `s` bits works on magnitudes
(truncation toward zero, then the sign back) and then clips to +-127; the three
rounding modes differ only in how they decide to round the magnitude up:

- round (RoundShift): nearest, halves away from zero.
- psto  (PstoShift):  the high half of the discarded bits against the low half
  (NITI's pseudo-stochastic rounding, Wang et al. 2022, `ti_torch.py`).
- sto   (StoShift):   the discarded bits against fresh random bits.

Random bits come from a counter-based generator, Threefry-2x32 with 20 rounds
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), keyed by
(seed, tensor id) with counter (element index, step). It needs only 32-bit add,
rotate and xor, so the C++ and HVX kernels reproduce it bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

INT8_MAX = 127
ROUNDING_MODES = ("round", "psto", "sto")

# Threefry-2x32-20 constants (Random123): the key-schedule parity and rotations.
_THREEFRY_PARITY = 0x1BD11BDA
_THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_STO_MAX_BITS = 32  # StoShift compares at most the top 32 discarded bits.


@dataclass(frozen=True)
class QTensor:
    """An integer tensor: `q * 2**e`."""

    q: np.ndarray
    e: int

    def dequantize(self) -> np.ndarray:
        return self.q.astype(np.float64) * (2.0**self.e)


@dataclass(frozen=True)
class RngKey:
    """Where a tensor's random bits come from.

    Element `i` of the tensor draws `random_u32(seed, step, tensor_id, offset + i)`;
    `offset` lets a micro-batch draw exactly the bits of its rows in the full batch.
    """

    seed: int
    step: int
    tensor_id: int
    offset: int = 0

    def shifted(self, offset: int) -> RngKey:
        return RngKey(self.seed, self.step, self.tensor_id, self.offset + offset)


# ---------------------------------------------------------------- random bits


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(key: tuple[int, int], counter0, counter1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds on uint32 arrays; returns both output words."""
    k0, k1 = np.uint32(key[0] & 0xFFFFFFFF), np.uint32(key[1] & 0xFFFFFFFF)
    schedule = (k0, k1, np.uint32(_THREEFRY_PARITY) ^ k0 ^ k1)
    x0 = np.asarray(counter0, dtype=np.uint32) + k0
    x1 = np.asarray(counter1, dtype=np.uint32) + k1
    for group in range(5):
        for r in _THREEFRY_ROTATIONS[(group % 2) * 4 : (group % 2) * 4 + 4]:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        x0 = x0 + schedule[(group + 1) % 3]
        x1 = x1 + schedule[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def random_u32(key: RngKey, count: int) -> np.ndarray:
    """`count` random uint32 words for elements offset .. offset+count-1 of a tensor."""
    index = np.arange(key.offset, key.offset + count, dtype=np.uint64).astype(np.uint32)
    step = np.full(count, key.step & 0xFFFFFFFF, dtype=np.uint32)
    with np.errstate(over="ignore"):
        word, _ = threefry2x32((key.seed, key.tensor_id), index, step)
    return word


# ---------------------------------------------------------------- range and shifts


def range_bits(max_abs: int) -> int:
    """NITI's range estimate: 0 if max|acc| == 0 else ceil(log2(max|acc|))."""
    max_abs = int(max_abs)
    return 0 if max_abs == 0 else (max_abs - 1).bit_length()


def activation_shift(max_abs: int, bits: int = 8) -> int:
    """The right shift that brings an accumulator into `bits`-bit range (never negative)."""
    return max(range_bits(max_abs) - (bits - 1), 0)


def gradient_shift(max_abs: int, mu: int) -> int | None:
    """NITI's weight-gradient shift: None means the gradient is all zero."""
    b = range_bits(max_abs)
    if b == 0:
        return None
    return max(b - mu, 0)


def clip_int8(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -INT8_MAX, INT8_MAX).astype(np.int8)


def shift_round(acc: np.ndarray, shift: int, mode: str, rng: RngKey | None = None) -> np.ndarray:
    """Shift `acc` right by `shift` bits with rounding `mode`, clip to +-127, as int8.

    `shift == 0` is a clipping cast. `mode == "sto"` needs `rng`.
    """
    if mode not in ROUNDING_MODES:
        raise ValueError(f"rounding mode {mode!r} is not one of {ROUNDING_MODES}")
    acc = np.asarray(acc)
    wide = acc.astype(np.int64)
    if shift <= 0:
        return clip_int8(wide)
    # a shift past 62 gives what 62 gives for any |acc| < 2**61 (nothing kept, nothing rounds
    # up), and keeps `1 << shift` inside int64: exponents of residual operands can differ by 64+
    shift = min(shift, 62)
    magnitude = np.abs(wide)
    kept = magnitude >> shift
    dropped = magnitude & ((1 << shift) - 1)
    if mode == "round":
        up = (dropped >> (shift - 1)) & 1
    elif mode == "psto":
        low_bits = shift // 2
        high = dropped >> low_bits
        low = dropped & ((1 << low_bits) - 1)
        if shift % 2:
            low = low << 1  # give both halves the same width, as NITI does
        up = (high > low).astype(np.int64)
    else:
        if rng is None:
            raise ValueError("stochastic rounding needs an RngKey")
        if shift > _STO_MAX_BITS:
            dropped = dropped >> (shift - _STO_MAX_BITS)
        width = min(shift, _STO_MAX_BITS)
        bits = random_u32(rng, wide.size).reshape(wide.shape).astype(np.int64)
        if width < 32:
            bits &= (1 << width) - 1
        up = (dropped > bits).astype(np.int64)
    return clip_int8(np.sign(wide) * (kept + up))


def acc_dtype(depth: int, bound_a: int = INT8_MAX, bound_b: int = INT8_MAX) -> np.dtype:
    """int32 when a dot product of `depth` terms cannot overflow it, else int64."""
    return np.dtype(np.int32 if depth * bound_a * bound_b < 2**31 else np.int64)


# ---------------------------------------------------------------- the integer loss

# NITI's integer loss gradient (backends/ops_ref.py: niti_loss_grad), in the integer form
# of Mandheling's NITI_CPULossGrad_Int8.cpp: softmax in base 2 (47274 / 2**15 ~ log2(e)), a second-order
# Taylor form when the exponent is too small for that, normalised to 2**11, then
# StoShift by 4 as in NITI's ti_loss.py. Divisions truncate toward zero as in C.
LOG2E_Q15 = 47274
LOSS_SCALE_BITS = 11
LOSS_SHIFT = 4
LOSS_EXPONENT = LOSS_SHIFT - LOSS_SCALE_BITS
TAYLOR_BELOW = -7  # exponents <= this use 1 + x + x^2/2
MIN_EXPONENT = -30  # keeps 2**(1 - 2e) inside int64; logits that small are all ~0 anyway


# ---------------------------------------------------------------- float boundaries


def float_exponent(max_abs: float, bits: int = 8) -> int:
    """NITI's exponent for a float range: ceil(log2(max_abs)) - (bits - 1), read off the float's
    own exponent (exact where log2 would round), 0 for an all-zero tensor."""
    if not max_abs > 0.0:
        return 0
    mantissa, exponent = math.frexp(max_abs)  # max_abs = mantissa * 2**exponent, 0.5 <= mantissa < 1
    return (exponent - 1 if mantissa == 0.5 else exponent) - (bits - 1)


def quantize_float(x: np.ndarray, bits: int = 8) -> QTensor:
    """NITI's input quantization: exponent from the range, round to nearest, clip."""
    max_abs = float(np.max(np.abs(x))) if x.size else 0.0
    if max_abs == 0.0:
        return QTensor(np.zeros(x.shape, np.int8), 0)
    e = float_exponent(max_abs, bits)
    return QTensor(clip_int8(np.round(x * 2.0 ** (-e))), e)


def quantize_weights(w: np.ndarray) -> QTensor:
    """NITI's weight quantization: scale the range to +-127, exponent ceil(log2(range)) - 7."""
    max_abs = float(np.max(np.abs(w)))
    if max_abs == 0.0:
        return QTensor(np.zeros(w.shape, np.int8), 0)
    b = int(np.ceil(np.log2(max_abs)))
    return QTensor(clip_int8(np.round(w / max_abs * INT8_MAX)), b - 7)
