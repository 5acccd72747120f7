"""The HVX GEMM core's ragged edges, in the emulated DSP, against ops_ref bit for bit.

dsp_kernels/gemm.c packs b 32 rows x 32 words at a time (a K whose last chunk has 1 to
31 words, a last word of 1 to 3 bytes), copies a's rows to a word stride when K % 4 != 0,
runs column strips of 8-row tiles (2 or 3 column blocks) or 4-row tiles (1 or 4), the
rows' sums from a lane of 1s (N % 32 != 0) or from vector sums (N % 32 == 0), 256 rows
at a time, and writes a ragged last block as a whole vector ("spilled": the lanes past
the row written back as read) except on the band's last row. Each case below takes one
of those branches; the test fails if any of them computes a wrong value. Needs qemu-hexagon,
clang-16 and lld-16 (as test_dsp_kernels).
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

from .cases import same

ref = RefBackend()


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


GEMMS = [  # m, n, k
    # 8-row tiles (2 and 3 column blocks): m % 8 of 0, 1..4 (a 4-row tail strip), 5..7
    # (one clamped 8-row tile); the 1s lane (n % 32 != 0) and vector row sums (n = 64, 96)
    (8, 45, 16),
    (12, 70, 131),
    (13, 64, 129),
    (23, 96, 130),
    (100, 70, 131),
    (7, 33, 5),
    # K's last chunk of 1 word (k4 = 33, 65), of 17 and 18 (the upper half: k4 = 17, 50),
    # last words of 1 to 3 bytes
    (16, 40, 257),
    (9, 90, 200),
    (14, 66, 67),
    (10, 70, 1),
    (11, 35, 2),
    (4, 50, 3),
    # 4 or more column blocks: 4-block strips and a last strip of 1 to 4, with and without 1s
    (21, 130, 37),
    (6, 161, 64),
    (9, 256, 20),
    (5, 250, 9),
    (3, 200, 131),
    # more than 256 rows: a second pass of row sums, the tail flag on the last pass only
    (300, 70, 37),
    (261, 64, 20),
    (258, 129, 11),
]


@pytest.mark.parametrize("m,n,k", GEMMS)
def test_gemm_edges(dsp, m, n, k, rng):
    a, b = s8(rng, m, k), s8(rng, n, k)
    same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


@pytest.mark.parametrize("m,n,k", [(13, 70, 131), (9, 33, 64)])
def test_gemm_edges_extremes(dsp, m, n, k):
    """All -128 against all 127 (and the reverse): the bias correction at its limits."""
    lo, hi = np.full((m, k), -128, np.int8), np.full((n, k), 127, np.int8)
    same(dsp.gemm_s8(lo, hi), ref.gemm_s8(lo, hi))
    same(dsp.gemm_s8(hi[:1].repeat(m, 0), lo[:1].repeat(n, 0)), ref.gemm_s8(hi[:1].repeat(m, 0), lo[:1].repeat(n, 0)))


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("m,n,k", [(13, 70, 131), (37, 45, 9), (5, 160, 33), (270, 100, 20)])
def test_gemm_edges_accumulate(dsp, m, n, k, threads, rng):
    """Adding into c: a spilled last block must add only its own lanes and write the
    next row's back as they were; each thread's last row stays exact."""
    a, b = s8(rng, m, k), s8(rng, n, k)
    start = rng.integers(-(2**20), 2**20, (m, n), dtype=np.int32)
    dsp.hvx_threads = threads
    try:
        got = dsp.accumulate(start, "gemm_s8", a, b)
    finally:
        dsp.hvx_threads = 4
    same(got, start + ref.gemm_s8(a, b))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_edges_thread_bands(dsp, threads, rng):
    """Row bands of 4 split across threads, each band a core call ending on a ragged
    last row (written exactly) and spilling on the rows before it."""
    a, b = s8(rng, 43, 131), s8(rng, 70, 131)
    dsp.hvx_threads = threads
    try:
        got = dsp.gemm_s8(a, b)
    finally:
        dsp.hvx_threads = 4
    same(got, ref.gemm_s8(a, b))


CONVS = [  # N, H, W, C, O, K, stride, pad: conv.c's im2col + GEMM core with ragged O
    (2, 9, 9, 20, 70, 3, 1, 1),
    (1, 7, 6, 33, 45, 3, 2, 1),
    (3, 6, 6, 24, 130, 3, 1, 0),
]


@pytest.mark.parametrize("shape", CONVS)
def test_conv_products_on_the_core(dsp, shape, rng):
    n, h, w, c, o, k, s, p = shape
    x, wt = s8(rng, n, h, w, c), s8(rng, o, k, k, c)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    err = s8(rng, n, oh, ow, o)
    same(dsp.conv2d_s8(x, wt, s, p), ref.conv2d_s8(x, wt, s, p))
    same(dsp.conv2d_bwd_data_s8(err, wt, s, p, (h, w)), ref.conv2d_bwd_data_s8(err, wt, s, p, (h, w)))
    same(dsp.conv2d_bwd_weight_s8(err, x, s, p, (k, k)), ref.conv2d_bwd_weight_s8(err, x, s, p, (k, k)))
