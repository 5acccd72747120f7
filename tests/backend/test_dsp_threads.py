"""The HVX thread split, run for real: each share on its own worker thread of the emulated
DSP server (dsp_kernels/threads.c; qemu-hexagon runs each clone as a host thread), checked
bit for bit against ops_ref for every product path with 1 to 4 threads, on shapes whose
split is uneven and where some threads get no work; and the per-thread packet counts the
workers measure on their own counters.

Needs qemu-hexagon, clang-16 and lld-16 (missing in CI: a failure, as everywhere).
"""

import os

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

ref = RefBackend()
THREADS = [1, 2, 3, 4]


def s8(rng, *shape):
    return rng.integers(-127, 128, shape, dtype=np.int8)


def out_hw(h, w, k, stride, pad):
    return (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1


# (hook, what the case exercises, the path the DSP reports for it (DspBackend.last_paths;
# None: GEMM, which has one), argument maker). Row shares come in fours (GEMM, conv.c's
# rows) or whole images / lane blocks (the few-channel paths): the sizes below leave the
# last thread a ragged share, or threads 2 and 3 nothing at all (5 GEMM rows, one image).
def conv_args(rng, n, h, w, c, o, k, stride, pad):
    return s8(rng, n, h, w, c), s8(rng, o, k, k, c), stride, pad


def bwd_data_args(rng, n, h, w, c, o, k, stride, pad):
    oh, ow = out_hw(h, w, k, stride, pad)
    return s8(rng, n, oh, ow, o), s8(rng, o, k, k, c), stride, pad, (h, w)


def bwd_weight_args(rng, n, h, w, c, o, k, stride, pad):
    oh, ow = out_hw(h, w, k, stride, pad)
    return s8(rng, n, oh, ow, o), s8(rng, n, h, w, c), stride, pad, (k, k)


CASES = [
    ("gemm_s8", "gemm, 5 rows: two shares of 4 rows at most", None, lambda rng: (s8(rng, 5, 37), s8(rng, 6, 37))),
    ("gemm_s8", "gemm, ragged 67 x 45 x 130", None, lambda rng: (s8(rng, 67, 130), s8(rng, 45, 130))),
    ("conv2d_s8", "conv.c rows, 33 channels", "im2col_gemm", lambda rng: conv_args(rng, 1, 5, 3, 33, 7, 3, 1, 1)),
    ("conv2d_s8", "conv.c rows, stride 2", "im2col_gemm", lambda rng: conv_args(rng, 3, 7, 7, 20, 9, 3, 2, 1)),
    ("conv2d_s8", "conv_lanes.c, one channel", "conv_lanes", lambda rng: conv_args(rng, 1, 3, 9, 1, 8, 3, 1, 0)),
    ("conv2d_s8", "conv_lanes.c, 5 images", "conv_lanes", lambda rng: conv_args(rng, 5, 6, 7, 1, 3, 3, 1, 1)),
    ("conv2d_s8", "conv_taps.c, one image", "conv_taps", lambda rng: conv_args(rng, 1, 3, 9, 1, 6, 3, 1, 0)),
    ("conv2d_s8", "conv_taps.c, 5 images", "conv_taps", lambda rng: conv_args(rng, 5, 6, 7, 1, 7, 3, 1, 1)),
    ("conv2d_s8", "conv_grid.c, one image", "conv_grid", lambda rng: conv_args(rng, 1, 6, 7, 6, 9, 3, 1, 1)),
    ("conv2d_s8", "conv_grid.c, 3 images", "conv_grid", lambda rng: conv_args(rng, 3, 9, 9, 3, 16, 5, 1, 0)),
    ("conv2d_s8", "conv_padded.c, 3 rows", "conv_padded", lambda rng: conv_args(rng, 1, 3, 5, 3, 40, 3, 1, 1)),
    (
        "conv2d_bwd_data_s8",
        "gather rows, stride 2",
        "gather_gemm",
        lambda rng: bwd_data_args(rng, 2, 7, 6, 33, 5, 3, 2, 1),
    ),
    (
        "conv2d_bwd_data_s8",
        "flipped conv rows",
        "flipped_gemm",
        lambda rng: bwd_data_args(rng, 1, 5, 5, 40, 36, 3, 1, 0),
    ),
    (
        "conv2d_bwd_data_s8",
        "conv_grid.c bwd, 3 images",
        "conv_grid",
        lambda rng: bwd_data_args(rng, 3, 8, 8, 6, 16, 5, 1, 0),
    ),
    (
        "conv2d_bwd_data_s8",
        "conv_col2im.c, one image",
        "col2im",
        lambda rng: bwd_data_args(rng, 1, 8, 7, 3, 20, 3, 2, 1),
    ),
    ("conv2d_bwd_data_s8", "conv_col2im.c, 5 images", "col2im", lambda rng: bwd_data_args(rng, 5, 6, 6, 2, 8, 3, 2, 0)),
    (
        "conv2d_bwd_weight_s8",
        "conv.c reduction, ragged",
        "wgrad_gemm",
        lambda rng: bwd_weight_args(rng, 2, 5, 3, 40, 33, 3, 1, 0),
    ),
    (
        "conv2d_bwd_weight_s8",
        "conv.c reduction, stride 2",
        "wgrad_gemm",
        lambda rng: bwd_weight_args(rng, 1, 7, 7, 20, 9, 3, 2, 1),
    ),
    (
        "conv2d_bwd_weight_s8",
        "conv_planar.c, one image",
        "planar",
        lambda rng: bwd_weight_args(rng, 1, 8, 8, 3, 6, 3, 1, 1),
    ),
    (
        "conv2d_bwd_weight_s8",
        "conv_planar.c, 5 images",
        "planar",
        lambda rng: bwd_weight_args(rng, 5, 8, 8, 1, 6, 3, 1, 1),
    ),
]


def split_at(dsp, threads):
    class Split:
        def __enter__(self):
            dsp.hvx_threads = threads

        def __exit__(self, *exc):
            dsp.hvx_threads = 4

    return Split()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[1] for c in CASES])
def test_every_product_path_is_bit_exact_on_every_thread_count(dsp, case, threads, rng):
    hook, _, path, make = CASES[case]
    args = make(rng)
    with split_at(dsp, threads):
        got = getattr(dsp, hook)(*args)
    np.testing.assert_array_equal(np.asarray(got), getattr(ref, hook)(*args))
    assert dsp.last_paths == ([(hook, path)] if path else []), "the case no longer runs the kernel it is for"


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("case", [1, 7, 8, 13, 14, 17], ids=lambda i: CASES[i][1])
def test_accumulating_products_join_the_threads_in_order(dsp, case, threads, rng):
    """ACCUMULATE: thread 0 adds into the output, the others' partial sums (weight gradient)
    or rows are added after the join."""
    hook, _, _, make = CASES[case]
    args = make(rng)
    want = getattr(ref, hook)(*args)
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    with split_at(dsp, threads):
        got = dsp.accumulate(start, hook, *args)
    np.testing.assert_array_equal(np.asarray(got), start + want)


def test_each_thread_counts_its_own_share(dsp, rng):
    """The cost a descriptor returns: per-thread packets measured by the workers, the serial
    part on the calling thread; packets = serial + shares, critical = serial + the longest."""
    a, b = s8(rng, 259, 130), s8(rng, 45, 130)
    counts = {}
    for threads in THREADS:
        with split_at(dsp, threads):
            dsp.take_cost_log()
            np.testing.assert_array_equal(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))
            ((op, packets, critical, _),) = dsp.take_cost_log()[0]
        (shares,) = dsp.last_thread_packets
        assert op == "gemm_s8" and len(shares) == threads and all(p > 0 for p in shares), shares
        serial = packets - sum(shares)
        assert serial > 0 and critical == serial + max(shares), (packets, critical, shares)
        counts[threads] = shares
    # 65 row quads over T threads: the shares' sizes follow the split (4 threads: 17, 17, 17, 14)
    one = counts[1][0]
    assert 0.2 * one < counts[4][3] < counts[4][0] < 0.3 * one, counts
    assert abs(counts[2][0] - counts[2][1]) < 0.05 * counts[2][0], counts


def test_workers_are_threads_of_the_server_started_once(dsp, rng):
    """Real threads: the qemu-hexagon process gains one host thread per HVX worker when a
    wider split first runs, and no more on later ops; at QUIT the server ends and joins
    them and exits 0 (a join that hangs would be killed after 2 s: exit -9)."""
    dsp.close()
    a, b = s8(rng, 40, 64), s8(rng, 33, 64)

    def tasks():
        return len(os.listdir(f"/proc/{dsp.transport._proc.pid}/task"))

    with split_at(dsp, 1):
        dsp.gemm_s8(a, b)
        one = tasks()
    with split_at(dsp, 4):
        dsp.gemm_s8(a, b)
        four = tasks()
        dsp.gemm_s8(a, b)
        again = tasks()
    assert four == one + 3 and again == four, (one, four, again)
    server = dsp.transport._proc
    dsp.close()
    assert server.returncode == 0


# The epilogue (REQUANT, ABSMAX, NITI_UPDATE) is split too, in ranges of 128 elements:
# 515 elements over 4 threads leave thread 2 a 3-element scalar tail and thread 3 nothing;
# each range's random stream starts at its offset, so sto rounding draws what one pass draws.
EPILOGUE_SIZES = [1, 129, 515, 1000]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("size", EPILOGUE_SIZES)
def test_epilogue_split_is_bit_exact(dsp, size, threads, rng):
    from dsptrain.numerics import RngKey

    acc = rng.integers(-(2**22), 2**22, size, dtype=np.int32)
    acc[-1] = -(2**24)  # the maximum in the last range: the joined max must find it
    key = RngKey(seed=7, step=3, tensor_id=11, offset=5)
    with split_at(dsp, threads):
        assert dsp.absmax(acc) == ref.absmax(acc)
        for mode in ("round", "psto", "sto"):
            for got, want in [
                (dsp.requantize(acc, mode, key), ref.requantize(acc, mode, key)),
                (dsp.requantize(acc, mode, key, shift=4), ref.requantize(acc, mode, key, shift=4)),
                (dsp.shift_round(acc, 9, mode, key), ref.shift_round(acc, 9, mode, key)),
            ]:
                for g, w in zip(
                    got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
                ):
                    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        w8, g32 = s8(rng, size), rng.integers(-(2**15), 2**15, size, dtype=np.int32)
        got = dsp.niti_update_s8(w8, g32, 3, "sto", key)
    np.testing.assert_array_equal(np.asarray(got), ref.niti_update_s8(w8, g32, 3, "sto", key))
