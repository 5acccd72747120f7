"""The number grids of the emulated recipes against float64 computations."""

import itertools

import numpy as np
import pytest
from dsptrain import float_ops as ref_float
from dsptrain.algorithms import _quant as q
from dsptrain.algorithms.afp import choose_bits
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import RngKey

R = RefBackend()


def round_float(x, e, m, mode="nearest_even", rng=None):
    return ref_float.round_float(x, e, m, mode, rng)


def chunked_dot(a, b, chunk=64, chunk_sum="fp16"):
    return ref_float.matmul_fp16_chunked(a, np.asarray(b).T, False, chunk, chunk_sum == "fp16")


def fp8_values():
    """Every finite FP8 1-5-2 value, built from the bit fields."""
    values = set()
    for exponent, mantissa in itertools.product(range(31), range(4)):  # exponent 31 is inf/NaN
        v = (mantissa / 4) * 2.0**-14 if exponent == 0 else (1 + mantissa / 4) * 2.0 ** (exponent - 15)
        values.update((v, -v))
    return np.array(sorted(values))


def test_fp8_round_to_nearest_even_matches_brute_force():
    grid = fp8_values()
    assert grid.max() == 57344.0 and grid[grid > 0].min() == 2.0**-16
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(scale=s, size=2000) for s in (1e-5, 1e-2, 1, 100, 3e4)])
    midpoints = (grid[:-1] + grid[1:]) / 2  # ties must go to the even mantissa
    x = np.concatenate([x, midpoints])
    got = round_float(x, 5, 2)
    for value, rounded in zip(x, got):
        distance = np.abs(grid - value)
        best = grid[distance == distance.min()]
        if len(best) == 2:  # a tie: the one with an even mantissa (last bit of the 2-bit field 0)
            even = [b for b in best if b == 0 or ((abs(b) / 2.0 ** max(np.floor(np.log2(abs(b))), -14)) * 4) % 2 == 0]
            assert rounded == even[0], (value, best, rounded)
        else:
            assert rounded == best[0], (value, best, rounded)


def test_fp16_rounding_matches_ieee_half():
    x = np.random.default_rng(1).normal(scale=10.0, size=20000) * np.exp(
        np.random.default_rng(2).uniform(-12, 3, 20000)
    )
    np.testing.assert_array_equal(q.to_fp16(R, x), x.astype(np.float16))


def test_fp8_saturates_instead_of_overflowing():
    assert round_float(np.array([1e6, -1e6]), 5, 2).tolist() == [57344.0, -57344.0]


def test_stochastic_rounding_picks_a_neighbour_and_is_unbiased():
    x = np.full(40000, 1.1)  # FP8 neighbours 1.0 and 1.25, P(up) = 0.4
    got = round_float(x, 5, 2, "sto", RngKey(3, 0, 7))
    assert set(np.unique(got)) == {1.0, 1.25}
    assert abs(got.mean() - 1.1) < 0.005
    again = round_float(x, 5, 2, "sto", RngKey(3, 0, 7))
    np.testing.assert_array_equal(got, again)  # the counter RNG is reproducible


def sequential_fp16(a, b):
    """The FP16 dot product, one add at a time, in Python scalars."""
    total = np.float16(0)
    for x, y in zip(a, b):
        total = np.float16(total + np.float16(np.float16(x) * np.float16(y)))
    return total


def test_chunked_accumulation_matches_a_scalar_fp16_loop():
    rng = np.random.default_rng(4)
    a = q.to_fp8(R, rng.normal(size=(3, 150)))
    b = q.to_fp8(R, rng.normal(size=(2, 150)))
    got = chunked_dot(a, b, chunk=64)
    for i, j in itertools.product(range(3), range(2)):
        chunks = [sequential_fp16(a[i, s : s + 64], b[j, s : s + 64]) for s in range(0, 150, 64)]
        expected = np.float16(0)
        for c in chunks:
            expected = np.float16(expected + c)
        assert got[i, j] == expected


def test_float32_chunk_sums_round_each_chunk_once():
    """chunk_sum fp32: each chunk summed exactly (these products and sums fit float32),
    rounded to FP16 once, then the chunk sums added one by one in FP16."""
    rng = np.random.default_rng(5)
    for m, n, k in ((3, 2, 150), (2, 3, 64 * 20 + 7), (40, 5, 64)):  # few chunks, many (batched), one
        a = rng.integers(-8, 9, (m, k)) / 4.0  # k/4 with |k| <= 8: FP8 values, exact products
        b = rng.integers(-8, 9, (n, k)) / 4.0
        got = chunked_dot(a, b, chunk=64, chunk_sum="fp32")
        for i, j in itertools.product(range(m), range(n)):
            sums = [np.float16(np.dot(a[i, s : s + 64], b[j, s : s + 64])) for s in range(0, k, 64)]
            expected = sums[0]
            for c in sums[1:]:
                expected = np.float16(expected + c)
            assert got[i, j] == expected


def test_float32_chunk_sums_stay_close_to_fp16_adds():
    rng = np.random.default_rng(6)
    a, b = q.to_fp8(R, rng.normal(size=(16, 600))), q.to_fp8(R, rng.normal(size=(8, 600)))
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    fast, paper = (chunked_dot(a, b, 64, mode).astype(np.float64) for mode in ("fp32", "fp16"))
    # both within a few FP16 roundings of the exact sum; the fast one no further off than the paper's
    assert np.abs(fast - exact).mean() <= np.abs(paper - exact).mean()
    assert np.abs(fast - paper).max() <= 2.0**-6 * np.abs(exact).max()


def test_chunking_stops_swamping_of_a_long_sum():
    ones = np.ones((1, 4096), np.float16)
    plain = chunked_dot(ones, ones, chunk=4096)[0, 0]  # one long FP16 sum stalls at 2048
    chunked = chunked_dot(ones, ones, chunk=64)[0, 0]
    assert plain == 2048 and chunked == 4096


def test_mls_group_scales_against_float64():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 32)) * np.repeat([1.0, 0.3, 0.05, 1e-4], 8)[None, :]  # groups of 8 channels, quieter
    x = x.astype(np.float32)
    m = q.quantize_mls(R, x, bits=8, group_size=8, group_bits=2)
    top = float(np.abs(x).max())
    tensor_scale = top / 127
    assert m.q.dtype == np.int16 and m.scale == tensor_scale * 2.0**-3  # elements carry their group shift
    for row, group in itertools.product(range(4), range(4)):
        cols = slice(8 * group, 8 * group + 8)
        k = min(3, max(0, int(np.floor(np.log2(top / np.abs(x[row, cols]).max())))))
        scale = tensor_scale * 2.0**-k
        elements = np.clip(np.round(x[row, cols].astype(np.float64) / scale), -127, 127)
        np.testing.assert_array_equal(m.q[row, cols], elements * 2 ** (3 - k))
        np.testing.assert_array_equal(m.values()[row, cols], elements * scale)
    plain = q.quantize_int(R, x, 8, "float")
    # the group scale keeps quiet groups: the MLS error is below the single-scale error
    assert np.abs(m.values() - x).sum() < np.abs(plain.values() - x).sum()


def test_range_clipping_clips_and_picks_the_least_squared_error():
    """Octo's error quantizer (the prc_quantize hook, float_ops on ref): with momentum 1 its
    ratio is the search's pick, with momentum 0 it keeps the layer's ratio and clips there."""
    e = np.random.default_rng(6).laplace(size=20000).astype(np.float32)  # long tails: at 4 bits clipping pays
    top = float(np.abs(e).max())
    _, _, ratio = R.prc_quantize(e, 1.0, 1.0, q.PRC_CANDIDATES, 4, "round", None)
    errors = {a: np.sum((q.quantize_int(R, e, 4, "float", clip=a * top).values() - e) ** 2) for a in q.PRC_CANDIDATES}
    assert ratio == min(errors, key=errors.get) and ratio < 1.0
    codes, step, kept = R.prc_quantize(e, 0.5, 0.0, q.PRC_CANDIDATES, 8, "round", None)
    clipped = q.Scaled(codes, step)
    assert kept == 0.5
    assert np.isclose(np.abs(clipped.values()).max(), top / 2) and clipped.q.dtype == np.int8
    inside = np.abs(e) <= top / 2
    assert np.abs(clipped.values()[inside] - e[inside]).max() <= clipped.scale / 2 + 1e-12


@pytest.mark.parametrize("scale", [1e-9, 1.0])
def test_afp_switches_to_16_bits_when_8_bits_lose_the_distribution(scale):
    rng = np.random.default_rng(7)
    heavy = np.concatenate([rng.normal(size=10000) * 1e-3, [1.0]]) * scale  # most values under the 8-bit step
    plain = rng.normal(size=10000) * scale
    assert choose_bits(R, heavy, 8, 4, 8, 16, 0.05, 1, 64) == (16, 1)  # switch, and check again soon
    assert choose_bits(R, plain, 8, 4, 8, 16, 0.05, 1, 64) == (8, 8)  # holds: the interval doubles
    assert choose_bits(R, plain, 16, 4, 8, 16, 0.05, 1, 64) == (8, 1)  # comes back down
    assert choose_bits(R, plain, 8, 64, 8, 16, 0.05, 1, 64) == (8, 64)  # capped at max_interval
