"""Exact integer FedAvg (dsptrain.fl.aggregate) on hand-worked cases and against fractions."""

from fractions import Fraction

import numpy as np
import pytest
from dsptrain.fl.aggregate import aggregate_state, aggregate_tensor, divide_rounded
from dsptrain.numerics import QTensor


def q8(values, e):
    return QTensor(np.array(values, np.int8), e)


def test_same_exponent_halves_round_away_from_zero():
    # (10 + 11) / 2 = 10.5 -> 11; (-3 - 4) / 2 = -3.5 -> -4; (127 - 127) / 2 = 0
    out = aggregate_tensor([(q8([10, -3, 127], -7), 1), (q8([11, -4, -127], -7), 1)])
    assert out.e == -7 and out.q.dtype == np.int8
    assert out.q.tolist() == [11, -4, 0]


def test_mixed_exponents_align_to_the_finest_then_keep_the_coarsest():
    # A = [64, 3, -5] * 2**-7 = [0.5, 3/128, -5/128]; B = [64, 1, 7] * 2**-8
    # A at 2**-8: [128, 6, -10]; sum [192, 7, -3]; divided by N * 2**1 = 4: [48, 1.75, -0.75]
    out = aggregate_tensor([(q8([64, 3, -5], -7), 1), (q8([64, 1, 7], -8), 1)])
    assert out.e == -7
    assert out.q.tolist() == [48, 2, -1]


def test_example_weights_with_a_three_bit_gap():
    # 3 examples of 100 * 2**-6 and 1 of -100 * 2**-9: (3 * 800 - 100) / (4 * 8) = 71.875 -> 72
    out = aggregate_tensor([(q8([100], -6), 3), (q8([-100], -9), 1)])
    assert (out.q.tolist(), out.e) == ([72], -6)
    # the float mean agrees to within half a step of the result's exponent
    mean = (3 * 100 * 2.0**-6 - 100 * 2.0**-9) / 4
    assert abs(out.q[0] * 2.0**-6 - mean) <= 2.0**-7


def test_ties_round_and_nearest_even():
    values = np.array([5, -5, 7, -7, 6, 1], np.int64)
    assert divide_rounded(values, 2, "round").tolist() == [3, -3, 4, -4, 3, 1]
    assert divide_rounded(values, 2, "nearest_even").tolist() == [2, -2, 4, -4, 3, 0]
    with pytest.raises(ValueError, match="psto"):
        divide_rounded(values, 2, "psto")


def test_a_wide_exponent_gap_stays_exact_where_float64_would_not():
    # (1 * 2**0 - 1 * 2**-60) / 2 is just below 0.5: the exact result is 0. In float64
    # 1 - 2**-60 == 1.0, so dequantize-average-requantize would give 0.5 and round to 1.
    assert (1.0 - 2.0**-60) == 1.0
    below = aggregate_tensor([(q8([1], 0), 1), (q8([-1], -60), 1)])
    above = aggregate_tensor([(q8([1], 0), 1), (q8([1], -60), 1)])
    assert (below.q.tolist(), below.e) == ([0], 0)
    assert (above.q.tolist(), above.e) == ([1], 0)


def exact_reference(updates):
    """The weighted mean as exact fractions, rounded half away from zero at the largest exponent."""
    total = sum(n for _, n in updates)
    high = max(t.e for t, _ in updates)
    out = []
    for i in range(updates[0][0].q.size):
        mean = sum(Fraction(int(t.q.flat[i]) * n) * Fraction(2) ** t.e for t, n in updates) / total
        scaled = mean / Fraction(2) ** high
        magnitude = abs(scaled)
        whole = magnitude.numerator // magnitude.denominator
        whole += (magnitude - whole) >= Fraction(1, 2)
        out.append(int(whole) * (1 if scaled >= 0 else -1))
    return out, high


@pytest.mark.parametrize("seed", range(6))
def test_random_mixed_updates_match_exact_fractions(seed):
    rng = np.random.default_rng(seed)
    clients = int(rng.integers(1, 7))
    updates = [
        (q8(rng.integers(-127, 128, 40), int(rng.integers(-12, -3))), int(rng.integers(1, 500))) for _ in range(clients)
    ]
    out = aggregate_tensor(updates)
    want, high = exact_reference(updates)
    assert out.e == high
    assert out.q.tolist() == want
    # the order of the clients does not matter
    again = aggregate_tensor(updates[::-1])
    assert np.array_equal(again.q, out.q) and again.e == out.e


def test_identical_clients_give_back_their_model():
    t = q8(np.arange(-127, 128, 5), -9)
    out = aggregate_tensor([(t, 7), (t, 300), (t, 1)])
    assert np.array_equal(out.q, t.q) and out.e == t.e


def test_aggregate_state_handles_integer_and_float_entries():
    a = {"fc.w": q8([[2, 4]], -5), "bn.mean": np.array([1.0, 2.0], np.float32)}
    b = {"fc.w": q8([[4, 8]], -5), "bn.mean": np.array([3.0, 6.0], np.float32)}
    out = aggregate_state([(a, 1), (b, 3)])
    assert out["fc.w"].q.tolist() == [[4, 7]] and out["fc.w"].e == -5  # (2+12)/4=3.5->4, (4+24)/4=7
    assert out["bn.mean"].dtype == np.float32
    np.testing.assert_allclose(out["bn.mean"], [2.5, 5.0], rtol=0, atol=1e-6)


def test_bad_counts_and_empty_updates_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        aggregate_tensor([])
    with pytest.raises(ValueError, match="> 0"):
        aggregate_tensor([(q8([1], 0), 0)])
