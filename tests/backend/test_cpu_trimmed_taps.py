"""The implicit GEMM with each output position's taps trimmed to the source
(cpu_ops/conv_trimmed.cpp): a stride-1 pass on a small image leaves out the products of
its zero border, by classes of positions whose windows meet the source alike, their rows
scattered over the output. Bit-exact against ops_ref, forward and backward data, at one
and two threads: the int32 sums (random, and every input at the offset trick's extremes),
the requantized results with the product's own range and with given shifts (too small,
exact, larger) in every rounding mode (round and psto from the registers, sto after)."""
from __future__ import annotations

import numpy as np
import pytest

from . import cases
from .test_cpu_fused_requant import given_shifts, same, threads  # noqa: F401  (threads: the fixture)
from .test_cpu_kernels import cpu_isa  # noqa: F401  (the fixture: one GEMM path per run)

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, pad), stride 1: VGG-11's last convolutions in small (2 x 2 and 8 x 8
# with 120 outputs: a panel of 56 columns; 4 x 4), a ragged 7 x 5 image of
# 172 channels (tiles that straddle image rows, stored row by row), a 5 x 5 kernel with
# padding 2 on 3 x 4, no padding (only the backward data's error is padded), and padding 3
# around one pixel (output positions whose windows meet no source at all: zeros; its
# backward data has no border).
SHAPES = [(5, 2, 2, 64, 120, 3, 1), (3, 4, 4, 128, 64, 3, 1), (2, 8, 8, 64, 120, 3, 1), (3, 7, 5, 172, 120, 3, 1),
          (2, 3, 4, 60, 64, 5, 2), (2, 5, 7, 128, 128, 3, 0), (2, 1, 1, 64, 64, 3, 3)]
IDS = ["n{}h{}w{}c{}o{}k{}p{}".format(*s) for s in SHAPES]
# (forward, backward data) on AVX-512 VNNI
PASSES = [("trimmed", "trimmed")] * 5 + [("implicit_gemm", "trimmed"), ("trimmed", "implicit_gemm")]
FILLS = [None, (-128, -128), (127, -128), (-128, 127)]


def case(shape, fill):
    n, h, w, c, o, k, pad = shape
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    if fill is None:
        rng = np.random.default_rng(sum(shape))
        return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o))
    return (np.full((n, h, w, c), fill[0], np.int8), np.full((o, k, k, c), fill[1], np.int8),
            np.full((n, oh, ow, o), fill[0], np.int8))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_trimmed_products_every_isa(cpu_isa, ref, shape, threads):
    pad, hw = shape[6], shape[1:3]
    for fill in FILLS:
        x, w, err = case(shape, fill)
        np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, w, 1, pad), ref.conv2d_s8(x, w, 1, pad))
        np.testing.assert_array_equal(cpu_isa.conv2d_bwd_data_s8(err, w, 1, pad, hw),
                                      ref.conv2d_bwd_data_s8(err, w, 1, pad, hw))
    x, w, err = case(shape, None)
    fwd, bwd = ref.conv2d_s8(x, w, 1, pad), ref.conv2d_bwd_data_s8(err, w, 1, pad, hw)
    for i, mode in enumerate(cases.ROUNDING):
        key = cases.rng_key(i)
        for shift in [None] + given_shifts(fwd):
            same(cpu_isa.conv2d_requant_s8(x, w, 1, pad, mode, key, shift=shift),
                 ref.conv2d_requant_s8(x, w, 1, pad, mode, key, shift=shift))
        for shift in [None] + given_shifts(bwd):
            same(cpu_isa.conv2d_bwd_data_requant_s8(err, w, 1, pad, hw, mode, key, shift=shift),
                 ref.conv2d_bwd_data_requant_s8(err, w, 1, pad, hw, mode, key, shift=shift))


@pytest.mark.parametrize("shape, passes", list(zip(SHAPES, PASSES)), ids=IDS)
def test_the_shapes_take_the_trimmed_path_on_avx512(shape, passes, on_avx512vnni):
    """Else the test above would check the plain implicit GEMM again."""
    x, w, _ = case(shape, None)
    names = {"trimmed": "implicit_gemm_trimmed"}
    assert native.conv_algorithm("forward", x, w, 1, shape[6]) == names.get(passes[0], passes[0])
    assert native.conv_algorithm("backward_data", x, w, 1, shape[6]) == names.get(passes[1], passes[1])


def test_vgg11_convolutions_trimmed_from_8x8(on_avx512vnni):
    """VGG-11 at 32 x 32, batch 64: conv3-8 (8 x 8 and smaller, 16-56 % of their taps on the
    border) leave the border out in both passes; conv2 (16 x 16, 8 %) keeps the plain one."""
    layers = [(16, 64, 128), (8, 128, 256), (8, 256, 256), (4, 256, 512), (4, 512, 512), (2, 512, 512)]
    for hw, c, o in layers:
        x, w = np.zeros((64, hw, hw, c), np.int8), np.zeros((o, 3, 3, c), np.int8)
        want = "implicit_gemm" if hw == 16 else "implicit_gemm_trimmed"
        assert native.conv_algorithm("forward", x, w, 1, 1) == want, (hw, c, o)
        assert native.conv_algorithm("backward_data", x, w, 1, 1) == want, (hw, c, o)
