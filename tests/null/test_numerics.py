"""The integer numerics: rounding on hand-worked cases, bias, range edges, the RNG."""

import numpy as np
import pytest
from dsptrain import numerics
from dsptrain.numerics import RngKey


@pytest.mark.parametrize(
    "max_abs, bits", [(0, 0), (1, 0), (2, 1), (3, 2), (127, 7), (128, 7), (129, 8), (2**31 - 1, 31)]
)
def test_range_bits_is_ceil_log2(max_abs, bits):
    assert numerics.range_bits(max_abs) == bits


def test_activation_shift_edge_128_saturates_to_127():
    # ceil(log2(128)) = 7, so no shift: the cast clips 128 to 127 (NITI's semantics).
    acc = np.array([128, -128, 5], np.int32)
    shift = numerics.activation_shift(128)
    assert shift == 0
    np.testing.assert_array_equal(numerics.shift_round(acc, shift, "round"), [127, -127, 5])


@pytest.mark.parametrize(
    "value, shift, expected",
    [
        (5, 1, 3),
        (-5, 1, -3),  # 2.5 -> 3: halves away from zero
        (6, 2, 2),
        (-6, 2, -2),  # 1.5 -> 2
        (5, 2, 1),
        (-5, 2, -1),  # 1.25 -> 1
        (7, 2, 2),
        (-7, 2, -2),  # 1.75 -> 2
        (255, 1, 127),
        (-255, 1, -127),  # 127.5 -> 128 -> clipped
        (1000, 3, 125),
        (-1000, 3, -125),
    ],
)
def test_round_shift_hand_cases(value, shift, expected):
    assert numerics.shift_round(np.array([value]), shift, "round")[0] == expected


@pytest.mark.parametrize(
    "value, shift, expected",
    [
        # magnitude 13 = 0b1101, shift 4: dropped 1101, high half 11 (3) vs low half 01 (1): up
        (13, 4, 1),
        (-13, 4, -1),
        # 0b0110 dropped with shift 4: high 01 vs low 10: 1 <= 2, no rounding up
        (6, 4, 0),
        (-6, 4, 0),
        # odd shift 3: dropped 0b101, high 0b10 (2) vs low 0b1 doubled (2): equal -> down
        (5, 3, 0),
        # odd shift 3: dropped 0b110, high 3 vs low 0 -> up; 14 >> 3 = 1, +1 = 2
        (14, 3, 2),
        (-14, 3, -2),
    ],
)
def test_psto_shift_hand_cases(value, shift, expected):
    assert numerics.shift_round(np.array([value]), shift, "psto")[0] == expected


def test_shifts_truncate_toward_zero_not_floor():
    # floor(-9 / 4) = -3 would be biased; truncation gives -2, then rounding decides.
    assert numerics.shift_round(np.array([-9]), 2, "round")[0] == -2
    assert numerics.shift_round(np.array([-9]), 2, "psto")[0] == -2  # dropped 01: high 0 vs low 1


def test_sto_shift_is_unbiased():
    values = np.full(200_000, 37, np.int32)  # 37 / 8 = 4.625
    out = numerics.shift_round(values, 3, "sto", RngKey(1, 2, 3))
    assert set(np.unique(out)) == {4, 5}
    assert abs(out.mean() - 4.625) < 0.01
    neg = numerics.shift_round(-values, 3, "sto", RngKey(1, 2, 3))
    np.testing.assert_array_equal(neg, -out)  # same bits, mirrored magnitudes


def test_sto_shift_needs_a_key_and_depends_on_it():
    acc = np.arange(-5000, 5000, dtype=np.int32)
    with pytest.raises(ValueError):
        numerics.shift_round(acc, 4, "sto")
    a = numerics.shift_round(acc, 4, "sto", RngKey(0, 0, 1))
    b = numerics.shift_round(acc, 4, "sto", RngKey(0, 0, 2))
    assert (a != b).any()
    np.testing.assert_array_equal(a, numerics.shift_round(acc, 4, "sto", RngKey(0, 0, 1)))


def test_sto_shift_wider_than_32_bits_compares_top_bits():
    acc = np.array([(5 << 40) + (1 << 39)], np.int64)  # 5.5 after a 40-bit shift
    outs = [numerics.shift_round(acc, 40, "sto", RngKey(0, 0, t))[0] for t in range(400)]
    assert set(outs) == {5, 6}
    assert 0.4 < np.mean(outs) - 5 < 0.6


def test_rng_offsets_give_the_same_bits_as_the_whole_tensor():
    whole = numerics.random_u32(RngKey(7, 3, 11), 1000)
    part = numerics.random_u32(RngKey(7, 3, 11, offset=600), 400)
    np.testing.assert_array_equal(whole[600:], part)


def test_threefry_known_answers():
    # Random123's known-answer vectors for threefry2x32 with 20 rounds.
    cases = [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ]
    for key, ctr, expected in cases:
        x0, x1 = numerics.threefry2x32(key, np.array([ctr[0]], np.uint32), np.array([ctr[1]], np.uint32))
        assert (int(x0[0]), int(x1[0])) == expected


def test_random_bits_are_uniform():
    words = numerics.random_u32(RngKey(0, 0, 0), 100_000)
    counts = np.bincount(words >> 28, minlength=16)
    assert counts.min() > 100_000 / 16 * 0.95 and counts.max() < 100_000 / 16 * 1.05


def test_quantize_float_round_trip():
    x = np.linspace(-3, 3, 101)
    t = numerics.quantize_float(x)
    assert t.e == 2 - 7 and np.abs(t.q).max() <= 127
    assert np.abs(t.dequantize() - x).max() <= 2.0**t.e / 2 + 1e-12


def test_unknown_rounding_mode_is_an_error():
    with pytest.raises(ValueError, match="nearest"):
        numerics.shift_round(np.array([1]), 1, "nearest")
