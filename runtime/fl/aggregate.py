"""Federated averaging of integer weights `(q, e)`, exactly, in integers only.

Each client k sends a weight tensor as integers q_k (int8 for NITI) with one
power-of-two exponent e_k (value q_k * 2**e_k) and the number of examples n_k it
trained on. FedAvg (McMahan et al., "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017) wants the weighted mean

    m = sum_k n_k * q_k * 2**e_k / N,        N = sum_k n_k.

Averaging the q_k and the e_k separately is wrong as soon as the exponents differ
(the mean of 64 * 2**-7 and 64 * 2**-8 is 48 * 2**-7, not 64 * 2**-7.5). Two sound
ways exist: dequantize to float, average, requantize; or stay in integers. This
module stays in integers:

1. Align: with e_lo = min_k e_k, q_k * 2**(e_k - e_lo) is an exact integer.
2. Sum: S = sum_k n_k * q_k * 2**(e_k - e_lo), in int64 (Python integers when the
   bound sum_k n_k * qmax * 2**(e_k - e_lo) could pass 2**62), exact.
3. Divide with one rounding: the result keeps e_hi = max_k e_k, the coarsest
   exponent sent, and q = round(S / (N * 2**(e_hi - e_lo))) with the recipe's weight
   rounding (NITI: `round`, nearest with halves away from zero; `nearest_even` too).

Why e_hi: |m| <= max_k |q_k| * 2**e_k <= qmax * 2**e_hi, so the mean always fits
without clipping; and NITI keeps a layer's weight exponent for the whole run, so in
practice every client sends the same e and the global model keeps it. A finer
exponent would silently change NITI's learning rate, which is `mu` bits of the
weight's last place.

Why exact rather than through float: the rule "integer paths stay integer" holds on
the server too; the result is the single correctly rounded value of the true mean,
bit-identical on every machine and for every order of the clients (a float64 mean
rounds twice, and a tie such as 2.5 can arrive as 2.4999999 and round the other way);
the cost is a few integer passes over ~60k weights per round.

Float tensors (FP32 recipes) are not handled here: they use Flower's FedAvg as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..numerics import QTensor

ROUNDINGS = ("round", "nearest_even")
_INT64_SAFE = 1 << 62


def qmax(bits: int) -> int:
    """Largest magnitude of a symmetric signed integer of `bits` bits (127 for 8)."""
    return (1 << (bits - 1)) - 1


def divide_rounded(numerator: np.ndarray, denominator: int, rounding: str = "round") -> np.ndarray:
    """numerator / denominator rounded to an integer, for integer arrays and a positive int.

    `round`: nearest, halves away from zero (NITI's RoundShift); `nearest_even`: halves
    to the even neighbour. Works on magnitudes so that negative values round like
    positive ones (NumPy's `//` floors).
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r} is not one of {', '.join(ROUNDINGS)}")
    if denominator <= 0:
        raise ValueError(f"denominator {denominator} must be > 0")
    sign = np.sign(numerator)
    magnitude = np.abs(numerator)
    whole, rest = magnitude // denominator, magnitude % denominator
    twice = rest * 2
    if rounding == "round":
        up = twice >= denominator
    else:
        up = (twice > denominator) | ((twice == denominator) & (whole % 2 == 1))
    return sign * (whole + up)


def aggregate_tensor(updates: Sequence[tuple[QTensor, int]], bits: int = 8, rounding: str = "round") -> QTensor:
    """The example-weighted mean of integer tensors, as one integer tensor (see the module doc).

    `updates` holds (tensor, number of examples) per client; every tensor has the same
    shape. The result has the dtype of the inputs and exponent max_k e_k.
    """
    if not updates:
        raise ValueError("aggregate_tensor needs at least one update")
    counts = [int(n) for _, n in updates]
    if any(n <= 0 for n in counts):
        raise ValueError(f"example counts {counts} must all be > 0")
    exponents = [int(t.e) for t, _ in updates]
    low, high = min(exponents), max(exponents)
    limit = qmax(bits)
    total = sum(counts)
    bound = sum(n * limit << (e - low) for n, e in zip(counts, exponents))
    denominator = total << (high - low)
    # int64 while every partial sum, and twice the remainder, stays below 2**62
    exact_dtype = np.int64 if max(bound, denominator) < _INT64_SAFE else object
    acc = np.zeros(updates[0][0].q.shape, exact_dtype)
    for (tensor, n), e in zip(updates, exponents):
        aligned = tensor.q.astype(exact_dtype) * (1 << (e - low)) if e != low else tensor.q.astype(exact_dtype)
        acc += aligned * n
    mean = divide_rounded(acc, denominator, rounding)
    q = np.clip(mean.astype(np.int64), -limit, limit).astype(updates[0][0].q.dtype)
    return QTensor(q, high)


def aggregate_state(updates: Sequence[tuple[dict, int]], bits: int = 8, rounding: str = "round") -> dict:
    """Aggregate whole models: {name: QTensor or float array} per client, with its example
    count. Integer tensors exactly (aggregate_tensor); float ones (batch-norm state beside
    integer weights) by the plain weighted mean, in float64, back in their dtype."""
    total = sum(int(n) for _, n in updates)
    out = {}
    for name, first in updates[0][0].items():
        if isinstance(first, QTensor):
            out[name] = aggregate_tensor([(state[name], n) for state, n in updates], bits, rounding)
        else:
            mean = sum(np.asarray(state[name], np.float64) * int(n) for state, n in updates) / total
            out[name] = mean.astype(np.asarray(first).dtype)
    return out
