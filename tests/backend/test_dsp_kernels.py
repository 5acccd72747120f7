"""Every HVX kernel, run in the emulated DSP, against ops_ref bit for bit.

Needs qemu-hexagon, clang-16 and lld-16. Outside CI they are skipped when missing;
in CI (CI set) a missing tool fails loudly. Sizes are small: QEMU is slow.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import RngKey

ref = RefBackend()


def s8(rng, *shape, lo=-127, hi=127):
    return rng.integers(lo, hi + 1, shape, dtype=np.int8)


def same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


# n % 32 == 0 takes the vector row-sum path, other n the packed lane of 1s; n <= 16 the
# two-rows-per-store path; m not a multiple of 4 or 32 the clamped tail tiles
@pytest.mark.parametrize(
    "m,n,k",
    [
        (1, 1, 1),
        (5, 3, 7),
        (4, 33, 130),
        (9, 64, 128),
        (13, 70, 257),
        (45, 64, 70),
        (38, 128, 9),
        (7, 6, 25),
        (11, 16, 150),
        (66, 160, 131),
    ],
)
def test_gemm(dsp, m, n, k, rng):
    a, b = s8(rng, m, k), s8(rng, n, k)
    same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


def test_gemm_extremes(dsp):
    a, b = np.full((6, 200), -128, np.int8), np.full((35, 200), 127, np.int8)
    same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


CONVS = [  # N, H, W, C, O, K, stride, pad
    (1, 1, 1, 1, 1, 1, 1, 0),
    (2, 7, 6, 3, 5, 3, 1, 1),
    (1, 9, 9, 1, 6, 5, 1, 0),
    (2, 8, 7, 6, 16, 5, 2, 2),
    (1, 6, 6, 33, 3, 3, 3, 1),
    (1, 5, 5, 2, 2, 3, 2, 0),
    # stride 1 with O % 4 == 0: bwd data as a forward conv of err with flipped taps
    (2, 9, 7, 5, 8, 3, 1, 1),
    (1, 6, 6, 40, 36, 3, 1, 0),
    (1, 5, 5, 8, 64, 3, 1, 2),
    (3, 12, 12, 6, 16, 5, 1, 0),
    (2, 10, 10, 1, 6, 5, 1, 2),
    # stride 1, C <= 4: forward with output pixels in the lanes (conv_lanes.c): two pixel
    # blocks (OW > 32), channel tiles past 32 with a ragged last tile, O a power of two
    # (no compaction), O = 1, C = 2 and 4 spread / taken as words, odd image counts
    (3, 5, 37, 1, 9, 5, 1, 2),
    (1, 4, 9, 3, 45, 3, 1, 1),
    (2, 6, 6, 4, 16, 3, 1, 0),
    (3, 7, 5, 1, 1, 3, 1, 1),
    (1, 6, 8, 2, 7, 2, 1, 0),
    (1, 3, 33, 3, 64, 3, 1, 1),
    (2, 6, 9, 1, 8, 3, 1, 1),
    (1, 7, 7, 1, 5, 3, 1, 0),
    (5, 5, 6, 1, 7, 2, 1, 1),
    # one channel, 8 outputs at LeNet's shape (28 x 28, pad 2): 5-8 channels in one tile,
    # accumulators through registers straight into y (conv_lanes.c's fused store); 4 to 7
    # outputs go to conv_taps.c (tests/backend/test_dsp_conv_taps.py), LeNet's 6 here too,
    # 16 taps a row (past its 13) to conv_lanes.c
    (3, 28, 28, 1, 8, 5, 1, 2),
    (3, 28, 28, 1, 6, 5, 1, 2),
    (1, 20, 20, 1, 6, 16, 1, 0),
    # stride 1, 2 to 16 channels, O <= 32: the padded grid in the lanes (conv_grid.c), forward
    # and backward data; C or O of 11 to 13 spread to 16 (four word planes)
    (2, 6, 7, 11, 9, 3, 1, 1),
    (3, 5, 9, 12, 13, 3, 1, 0),
]


@pytest.mark.parametrize("shape", CONVS)
def test_conv2d(dsp, shape, rng):
    n, h, w, c, o, k, s, p = shape
    x, wt = s8(rng, n, h, w, c), s8(rng, o, k, k, c)
    same(dsp.conv2d_s8(x, wt, s, p), ref.conv2d_s8(x, wt, s, p))


@pytest.mark.parametrize("shape", CONVS)
def test_conv2d_bwd_data(dsp, shape, rng):
    n, h, w, c, o, k, s, p = shape
    wt = s8(rng, o, k, k, c)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    err = s8(rng, n, oh, ow, o)
    same(dsp.conv2d_bwd_data_s8(err, wt, s, p, (h, w)), ref.conv2d_bwd_data_s8(err, wt, s, p, (h, w)))


@pytest.mark.parametrize("shape", CONVS)
def test_conv2d_bwd_weight(dsp, shape, rng):
    n, h, w, c, o, k, s, p = shape
    x = s8(rng, n, h, w, c)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    err = s8(rng, n, oh, ow, o)
    same(dsp.conv2d_bwd_weight_s8(err, x, s, p, (k, k)), ref.conv2d_bwd_weight_s8(err, x, s, p, (k, k)))


# DSPT_F_ACCUMULATE: every product path adds into what the output buffer holds (GEMM with
# the lane of 1s and with vector row sums; conv forward through conv.c and with pixels in
# the lanes; backward data through the gather and col2im; weight gradient through conv.c
# and the planes, with 1 and 3 HVX threads: the first share adds, the others join)
ACCUMULATING = [
    ("gemm_s8", lambda rng: (s8(rng, 9, 70), s8(rng, 45, 70))),
    ("gemm_s8", lambda rng: (s8(rng, 6, 33), s8(rng, 64, 33))),
    ("conv2d_s8", lambda rng: (s8(rng, 2, 7, 6, 3), s8(rng, 5, 3, 3, 3), 1, 1)),
    ("conv2d_s8", lambda rng: (s8(rng, 3, 9, 9, 1), s8(rng, 6, 5, 5, 1), 1, 2)),
    ("conv2d_bwd_data_s8", lambda rng: (s8(rng, 2, 4, 4, 33), s8(rng, 33, 3, 3, 40), 1, 0, (6, 6))),
    ("conv2d_bwd_data_s8", lambda rng: (s8(rng, 2, 4, 4, 16), s8(rng, 16, 5, 5, 6), 1, 0, (8, 8))),
    ("conv2d_bwd_weight_s8", lambda rng: (s8(rng, 2, 4, 4, 40), s8(rng, 2, 6, 6, 33), 1, 0, (3, 3))),
    ("conv2d_bwd_weight_s8", lambda rng: (s8(rng, 3, 8, 8, 6), s8(rng, 3, 8, 8, 1), 1, 2, (5, 5))),
]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("case", range(len(ACCUMULATING)))
def test_products_accumulate(dsp, case, threads, rng):
    hook, make = ACCUMULATING[case]
    args = make(rng)
    want = getattr(ref, hook)(*args)
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    dsp.hvx_threads = threads
    try:
        got = dsp.accumulate(start, hook, *args)
    finally:
        dsp.hvx_threads = 4
    same(got, start + want)


def acc32(rng, *shape, bits=20):
    return rng.integers(-(2**bits), 2**bits, shape, dtype=np.int32)


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("size,shift", [(1, 3), (127, 1), (300, 9), (515, 17), (256, 0), (130, 31), (64, 40)])
def test_shift_round(dsp, mode, size, shift, rng):
    acc = acc32(rng, size, bits=24)
    acc[0] = np.iinfo(np.int32).min if size > 1 else acc[0]
    key = RngKey(seed=7, step=3, tensor_id=11, offset=5)
    same(dsp.shift_round(acc, shift, mode, key), ref.shift_round(acc, shift, mode, key))


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("shift", [1, 6, 30, 31])
def test_shift_round_full_range_and_ties(dsp, mode, shift, rng):
    """Every int32 (the extremes, both signs of every tie: k * 2**shift +- 2**(shift - 1))
    through the vector paths (whole 128-element steps) and the scalar tail."""
    ties = (rng.integers(-(2**31) >> shift, 2**31 >> shift, 200, dtype=np.int64) << shift) + (1 << (shift - 1))
    ties = np.clip(np.concatenate([ties, -ties]), -(2**31), 2**31 - 1)
    ext = [-(2**31), -(2**31) + 1, 2**31 - 1, -1, 0, 1]
    acc = np.concatenate([ties, ext, rng.integers(-(2**31), 2**31, 300, dtype=np.int64)]).astype(np.int32)
    key = RngKey(seed=7, step=3, tensor_id=11, offset=5)
    same(dsp.shift_round(acc, shift, mode, key), ref.shift_round(acc, shift, mode, key))
    for part in (acc, acc[acc != -(2**31)], -np.abs(acc[acc != -(2**31)])):  # |INT32_MIN| = 2**31; the minimum wins
        assert dsp.absmax(part) == ref.absmax(part)


@pytest.mark.parametrize("shape", [(1,), (7, 33), (3, 5, 5, 16)])
def test_absmax_and_requantize(dsp, shape, rng):
    acc = acc32(rng, *shape, bits=18)
    assert dsp.absmax(acc) == ref.absmax(acc)
    key = RngKey(1, 2, 3)
    for mode in ("round", "psto", "sto"):
        same(dsp.requantize(acc, mode, key), ref.requantize(acc, mode, key))
        same(dsp.requantize(acc, mode, key, shift=4), ref.requantize(acc, mode, key, shift=4))
    zeros = np.zeros(shape, np.int32)
    same(dsp.requantize(zeros, "round", None), ref.requantize(zeros, "round", None))


def test_fused_requant_hooks(dsp, rng):
    key = RngKey(5, 1, 9)
    x, w = s8(rng, 2, 8, 8, 3), s8(rng, 6, 5, 5, 3)
    same(dsp.conv2d_requant_s8(x, w, 1, 2, "sto", key), ref.conv2d_requant_s8(x, w, 1, 2, "sto", key))
    a, b = s8(rng, 7, 45), s8(rng, 10, 45)
    same(dsp.gemm_requant_s8(a, b, "round", None), ref.gemm_requant_s8(a, b, "round", None))
    same(dsp.gemm_requant_s8(a, b, "psto", None, shift=3), ref.gemm_requant_s8(a, b, "psto", None, shift=3))
    err = s8(rng, 2, 4, 4, 6)
    same(
        dsp.conv2d_bwd_data_requant_s8(err, w, 1, 0, (8, 8), "sto", key),
        ref.conv2d_bwd_data_requant_s8(err, w, 1, 0, (8, 8), "sto", key),
    )


@pytest.mark.parametrize("shape", [(1,), (3, 7, 7, 6), (2, 130)])
def test_relu_and_backward(dsp, shape, rng):
    x, err = s8(rng, *shape, lo=-128), s8(rng, *shape)
    y = ref.relu_s8(x)
    same(dsp.relu_s8(x), y)
    same(dsp.relu_bwd_s8(err, y), ref.relu_bwd_s8(err, y))


@pytest.mark.parametrize(
    "shape,k,s", [((1, 2, 2, 1), 2, 2), ((2, 6, 7, 6), 2, 2), ((1, 7, 7, 130), 3, 2), ((2, 5, 5, 3), 3, 1)]
)
def test_maxpool_and_backward(dsp, shape, k, s, rng):
    x = s8(rng, *shape, lo=-3, hi=3)  # few values: many ties, the first maximum must win
    same(dsp.maxpool_s8(x, k, s), ref.maxpool_s8(x, k, s))
    _, argmax = ref.maxpool_s8(x, k, s)
    err = s8(rng, *argmax.shape)
    same(dsp.maxpool_bwd_s8(err, argmax, k, s, shape[1:3]), ref.maxpool_bwd_s8(err, argmax, k, s, shape[1:3]))


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("shape,mu", [((6, 5, 5, 1), 3), ((10, 84), 2), ((3,), 5)])
def test_niti_update(dsp, mode, shape, mu, rng):
    w, g = s8(rng, *shape), acc32(rng, *shape, bits=15)
    key = RngKey(3, 8, 21, 0)
    same(dsp.niti_update_s8(w, g, mu, mode, key), ref.niti_update_s8(w, g, mu, mode, key))
    zero = np.zeros(shape, np.int32)
    same(dsp.niti_update_s8(w, zero, mu, mode, key), ref.niti_update_s8(w, zero, mu, mode, key))


def test_inputs_never_written(dsp, rng):
    x, w = s8(rng, 1, 6, 6, 2), s8(rng, 3, 3, 3, 2)
    x0, w0 = x.copy(), w.copy()
    dsp.conv2d_requant_s8(x, w, 1, 1, "round", None)
    g = dsp.conv2d_bwd_weight_s8(s8(rng, 1, 6, 6, 3), x, 1, 1, (3, 3))
    w1 = dsp.niti_update_s8(w, g, 2, "psto", None)
    same(x, x0)
    same(w, w0)
    same(w1, ref.niti_update_s8(w0, np.array(g), 2, "psto", None))


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_thread_split_is_bit_exact_and_shortens_the_critical_path(dsp, threads, rng):
    """Each product's work split across HVX threads: same bits, and with T threads the
    critical path (the serial part + the longest share) is about 1/T of the packets."""
    a, b = s8(rng, 259, 130), s8(rng, 45, 130)
    x, w = s8(rng, 2, 15, 13, 8), s8(rng, 40, 3, 3, 8)
    dsp.hvx_threads = threads
    try:
        dsp.take_cost_log()
        same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))
        same(dsp.conv2d_s8(x, w, 1, 1), ref.conv2d_s8(x, w, 1, 1))
        log, calls = dsp.take_cost_log()
    finally:
        dsp.hvx_threads = 4
    assert calls == 2 and [r[0] for r in log] == ["gemm_s8", "conv2d_s8"]
    for op, packets, critical, nbytes in log:
        assert 0 < critical <= packets and nbytes > 0
        if threads == 1:
            assert critical == packets, op
        else:
            # never better than a perfect split; the packing of b stays serial
            assert packets / threads <= critical < packets * 0.7, (op, packets, critical)
