"""The GEMM that reads A in place (cpu_ops/gemm_rows.cpp): the implicit-GEMM forward and
backward-data products read each pixel's patch from the biased padded source, with no
im2col copy and no packing of A, and the weight gradient reads its biased err^T rows.
Bit-exact against ops_ref on every ISA (the others take their im2col path on the same
shapes), at one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, stride, pad), each on the implicit path in both passes on AVX-512 VNNI:
# a tap row of 516 bytes with M = 105 and N = 120 off the 6 x 64 tile; stride 2 (the
# backward source zero dilated); a 5 x 5 kernel with padding 2; no padding (the backward
# pads by K - 1); a 1 x 1 kernel of stride 2; the first's tap rows over a 17 x 13 image.
# The weight gradients of the first, second and fourth read err^T in place, over 105, 40
# and 30 pixels (not all multiples of 4). Where a tenth or more of a stride-1 pass's taps
# fall on the zero border, it leaves them out (conv_trimmed.cpp, test_cpu_trimmed_taps.py):
# PASSES says which pass takes which.
IMPLICIT_SHAPES = [
    (3, 7, 5, 172, 120, 3, 1, 1),
    (2, 9, 8, 64, 252, 3, 2, 1),
    (1, 6, 6, 60, 64, 5, 1, 2),
    (2, 5, 7, 128, 128, 3, 1, 0),
    (1, 4, 4, 64, 64, 1, 2, 0),
    (1, 17, 13, 172, 120, 3, 1, 1),
]
TRIMMED = "implicit_gemm_trimmed"
PASSES = [
    (TRIMMED, TRIMMED),
    ("implicit_gemm", "implicit_gemm"),
    (TRIMMED, TRIMMED),
    ("implicit_gemm", TRIMMED),
    ("implicit_gemm", "implicit_gemm"),
    ("implicit_gemm", "implicit_gemm"),
]
IMPLICIT_IDS = ["n{}h{}w{}c{}o{}k{}s{}p{}".format(*s) for s in IMPLICIT_SHAPES]

# What AVX-512 VNNI still runs on im2col + GEMM: passes whose tap rows (3 x 5 and 3 x 63
# bytes) are not whole groups of 4. (pass, shape)
IM2COL_SHAPES = [("forward", (2, 6, 5, 5, 64, 3, 1, 1)), ("backward_data", (2, 6, 5, 64, 63, 3, 1, 1))]


def conv_case(shape, fill=None):
    n, h, w, c, o, k, stride, pad = shape
    rng = np.random.default_rng(sum(shape))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if fill is None:
        return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o))
    return (
        np.full((n, h, w, c), fill[0], np.int8),
        np.full((o, k, k, c), fill[1], np.int8),
        np.full((n, oh, ow, o), fill[0], np.int8),
    )


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shape",
    IMPLICIT_SHAPES + [s for _, s in IM2COL_SHAPES],
    ids=IMPLICIT_IDS + ["im2col_" + p for p, _ in IM2COL_SHAPES],
)
def test_implicit_gemm_conv_every_isa(cpu_isa, ref, shape, threads):
    stride, pad, hw = shape[6], shape[7], shape[1:3]
    previous = native.threads()
    native.set_threads(threads)
    try:
        for fill in (None, (-128, -128), (127, -128), (-128, 127)):  # random, and the offset trick's extremes
            x, w, err = conv_case(shape, fill)
            np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
            np.testing.assert_array_equal(
                cpu_isa.conv2d_bwd_data_s8(err, w, stride, pad, hw), ref.conv2d_bwd_data_s8(err, w, stride, pad, hw)
            )
            np.testing.assert_array_equal(
                cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
                ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
            )
        key = cases.rng_key(5)  # with the GEMM's own range estimate, then each rounding
        for mode in cases.ROUNDING:
            for got, want in (
                (
                    cpu_isa.conv2d_requant_s8(x, w, stride, pad, mode, key),
                    ref.conv2d_requant_s8(x, w, stride, pad, mode, key),
                ),
                (
                    cpu_isa.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key),
                    ref.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key),
                ),
            ):
                np.testing.assert_array_equal(got[0], want[0])
                assert got[1] == want[1]
    finally:
        native.set_threads(previous)


@pytest.mark.parametrize("shape, passes", list(zip(IMPLICIT_SHAPES, PASSES)), ids=IMPLICIT_IDS)
def test_the_shapes_take_the_implicit_path_on_avx512(shape, passes, on_avx512vnni):
    """Else the test above would check the im2col path twice."""
    x, w, _ = conv_case(shape)
    stride, pad = shape[6], shape[7]
    assert native.conv_algorithm("forward", x, w, stride, pad) == passes[0]
    assert native.conv_algorithm("backward_data", x, w, stride, pad) == passes[1]
    want = "wgrad_panels" if shape[3] * shape[4] * shape[5] ** 2 <= 128 * 1024 else "im2col_gemm"
    assert native.conv_algorithm("backward_weight", x, w, stride, pad) == want
    native.set_isa("avx2")  # no in-place kernel: im2col + GEMM
    assert native.conv_algorithm("forward", x, w, stride, pad) == "im2col_gemm"


@pytest.mark.parametrize("pass_, shape", IM2COL_SHAPES, ids=[p for p, _ in IM2COL_SHAPES])
def test_some_shapes_keep_im2col_on_avx512(pass_, shape, on_avx512vnni):
    x, w, _ = conv_case(shape)
    assert native.conv_algorithm(pass_, x, w, shape[6], shape[7]) == "im2col_gemm"


# (M, N, K) for the weight packing's dword transpose (16 columns x 16 groups at a time on
# AVX-512 VNNI): panels of 1, 17 and 64 columns, 16 groups exactly, groups left over
# after the last whole block of 16, and a partial last group.
PACKING_SHAPES = [(3, 1, 64), (7, 17, 68), (13, 64, 1024), (5, 100, 515), (9, 129, 4100)]


@pytest.mark.parametrize("m,n,k", PACKING_SHAPES, ids=lambda v: str(v))
def test_packed_weights_every_isa(cpu_isa, ref, m, n, k):
    rng = np.random.default_rng(m + n + k)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k))
    np.testing.assert_array_equal(native.gemm_packed(a, native.pack_weights(b)), ref.gemm_s8(a, b))
    np.testing.assert_array_equal(cpu_isa.gemm_s8(a, b), ref.gemm_s8(a, b))
