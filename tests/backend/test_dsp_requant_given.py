"""REQUANT with a given shift on the emulated DSP (requant.c: checked_round), bit for bit
against ops_ref: adaptive rescaling's skipped range estimate.

With the saturation check (`requantize(acc, mode, rng, shift=s)`) the shift used is
max(s, the estimate); DSPT_ROUND reads the range only when its rounding pass's peak (the
largest rounded magnitude before the clamp) reaches 2**(bits-1), so the boundary cases
sit right there: max |acc| = 2**(s+7) (peak 128, the shift holds), 2**(s+7) + 1 (it gives
way), 2**(s+7) - 2**(s-1) (peak 128 from a value that rounds up, the shift holds), in the
vector part of a range and in the scalar tail; above the bound the shift that gives way
comes from the peak when the peak lies strictly between two powers of two. Without the check (`shift_round`) the shift
is used as given. Sizes are ragged around the 128-element steps and split across 1 to 4
HVX threads (the last range has the tail; some threads get nothing).
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import RngKey, activation_shift

ref = RefBackend()
MODES = ["round", "sto", "psto"]
SIZES = [1, 127, 128, 129, 255, 257, 515, 1000]
KEY = RngKey(seed=7, step=3, tensor_id=11, offset=5)


def same(got, want):
    (g, gs), (w, ws) = got, want
    assert gs == ws
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.fixture(params=[1, 2, 3, 4])
def threads(dsp, request):
    """The epilogue's passes split across 1 to 4 HVX threads, 4 restored after."""
    dsp.hvx_threads = request.param
    yield request.param
    dsp.hvx_threads = 4


def accs(rng, size):
    """Random sums of ~18 bits, and the same with INT32_MIN / INT32_MAX in them."""
    acc = rng.integers(-(2**18), 2**18, size, dtype=np.int32)
    wide = acc.copy()
    wide[rng.integers(0, size)] = np.iinfo(np.int32).min
    wide[rng.integers(0, size)] = np.iinfo(np.int32).max
    return [acc, wide]


@pytest.mark.parametrize("mode", MODES)
def test_given_shift_is_bit_exact(dsp, mode, threads, rng):
    """Every size, shifts 0 / 1 / 31 and around the estimate (one below: it saturates and
    gives way), checked and unchecked."""
    for size in SIZES:
        for acc in accs(rng, size):
            est = activation_shift(ref.absmax(acc), 8)
            for shift in sorted({0, 1, 31, max(est - 1, 0), est, est + 1}):
                same(dsp.requantize(acc, mode, KEY, shift=shift), ref.requantize(acc, mode, KEY, shift=shift))
                q = dsp.shift_round(acc, shift, mode, KEY)
                np.testing.assert_array_equal(q, ref.shift_round(acc, shift, mode, KEY))


@pytest.mark.parametrize("mode", MODES)
def test_the_saturation_bound(dsp, mode, threads, rng):
    """max |acc| at, just above and half a step below 2**(s+7), placed in each thread's
    range and in the scalar tail, positive and negative: the shift holds exactly when
    the estimate does not ask for more."""
    for size in (129, 515, 1000):
        for shift in (1, 2, 9, 22):
            bound = 2 ** (shift + 7)
            # at, above and half a step below the bound; then peaks of 256 (a power of two:
            # the range is read) and 383 (between two: the shift is derived from the peak)
            near = (bound, bound + 1, bound - 2 ** (shift - 1), bound - 2 ** (shift - 1) - 1)
            for peak in near + (2 * bound, 2 * bound + 1, 3 * bound - 2**shift):
                for where in (0, size // 3, size - 129, size - 1):
                    acc = rng.integers(-(2**shift), 2**shift, size, dtype=np.int64)
                    acc[where] = peak if where % 2 else -peak
                    acc = acc.astype(np.int32)
                    got, want = dsp.requantize(acc, mode, KEY, shift=shift), ref.requantize(acc, mode, KEY, shift)
                    same(got, want)
                    assert want[1] == {bound + 1: shift + 1, 2 * bound: shift + 1}.get(
                        peak, shift if peak in near else shift + 2
                    )


def test_a_skipped_estimate_costs_less_than_a_run_one(dsp, rng):
    """The path pin: rounding on a given shift keeps its peak in the plain DSPT_ROUND pass,
    so it costs less than ABSMAX + rounding (it was 14 % more with max |acc| taken in the
    general loop); a given shift that would saturate reads the range and rounds again."""
    acc = (rng.standard_normal(64 * 1024) * 2**14).astype(np.int32)  # a product's bell, not at the bound
    est = activation_shift(ref.absmax(acc), 8)
    assert ref.absmax(acc) < 2 ** (est + 7) - 2 ** (est - 1)
    packets = {}
    for label, shift in (("estimate", None), ("given", est), ("stale", est - 2)):
        got = dsp.requantize(acc, "round", KEY, shift=shift)
        same(got, ref.requantize(acc, "round", KEY, shift=shift))
        assert got[1] == est
        packets[label] = sum(p for _, p, _, _ in dsp.last_costs)
    assert packets["given"] < 0.85 * packets["estimate"], packets
    assert packets["stale"] > packets["estimate"], packets
    # a peak of exactly 128 with the shift holding: the range is read, no second rounding
    acc[77] = 2 ** (est + 7)
    got = dsp.requantize(acc, "round", KEY, shift=est)
    same(got, ref.requantize(acc, "round", KEY, shift=est))
    assert packets["given"] < sum(p for _, p, _, _ in dsp.last_costs) < packets["stale"]
