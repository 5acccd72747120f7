"""The products of a small padded image with the taps on its zero border left out.
Forward and backward data: the implicit GEMM by classes of positions whose windows meet
the source alike, their rows scattered over the output (cpu_ops/conv_trimmed.cpp). Weight
gradient: the streamed GEMM with err^T position by position, each panel reducing over the
runs of pixels whose tap lands in the source (conv_wgrad_stream.cpp, trimmed).
Bit-exact against ops_ref at one and two threads: the int32 sums (random, and every input
at the offset trick's extremes), the requantized results with the product's own range and
with given shifts (too small, exact, larger) in every rounding mode (round and psto from
the registers, sto after)."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases
from .test_cpu_fused_requant import given_shifts, same

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, pad), stride 1: VGG-11's last convolutions in small (2 x 2 and 8 x 8
# with 120 outputs: a panel of 56 columns; 4 x 4), a ragged 7 x 5 image of
# 172 channels (tiles that straddle image rows, stored row by row), a 5 x 5 kernel with
# padding 2 on 3 x 4, no padding (only the backward data's error is padded), and padding 3
# around one pixel (output positions whose windows meet no source at all: zeros; its
# backward data has no border).
SHAPES = [
    (5, 2, 2, 64, 120, 3, 1),
    (3, 4, 4, 128, 64, 3, 1),
    (2, 8, 8, 64, 120, 3, 1),
    (3, 7, 5, 172, 120, 3, 1),
    (2, 3, 4, 60, 64, 5, 2),
    (2, 5, 7, 128, 128, 3, 0),
    (2, 1, 1, 64, 64, 3, 3),
]
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
    return (
        np.full((n, h, w, c), fill[0], np.int8),
        np.full((o, k, k, c), fill[1], np.int8),
        np.full((n, oh, ow, o), fill[0], np.int8),
    )


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_trimmed_products_every_isa(cpu_isa, ref, shape, threads):
    pad, hw = shape[6], shape[1:3]
    for fill in FILLS:
        x, w, err = case(shape, fill)
        np.testing.assert_array_equal(cpu_isa.conv2d_s8(x, w, 1, pad), ref.conv2d_s8(x, w, 1, pad))
        np.testing.assert_array_equal(
            cpu_isa.conv2d_bwd_data_s8(err, w, 1, pad, hw), ref.conv2d_bwd_data_s8(err, w, 1, pad, hw)
        )
    x, w, err = case(shape, None)
    fwd, bwd = ref.conv2d_s8(x, w, 1, pad), ref.conv2d_bwd_data_s8(err, w, 1, pad, hw)
    for i, mode in enumerate(cases.ROUNDING):
        key = cases.rng_key(i)
        for shift in [None] + given_shifts(fwd):
            same(
                cpu_isa.conv2d_requant_s8(x, w, 1, pad, mode, key, shift=shift),
                ref.conv2d_requant_s8(x, w, 1, pad, mode, key, shift=shift),
            )
        for shift in [None] + given_shifts(bwd):
            same(
                cpu_isa.conv2d_bwd_data_requant_s8(err, w, 1, pad, hw, mode, key, shift=shift),
                ref.conv2d_bwd_data_requant_s8(err, w, 1, pad, hw, mode, key, shift=shift),
            )


@pytest.mark.parametrize("shape, passes", list(zip(SHAPES, PASSES)), ids=IDS)
def test_the_shapes_take_the_trimmed_path_on_avx512(shape, passes, on_avx512vnni):
    """Else the test above would check the plain implicit GEMM again."""
    x, w, _ = case(shape, None)
    names = {"trimmed": "implicit_gemm_trimmed"}
    assert native.conv_algorithm("forward", x, w, 1, shape[6]) == names.get(passes[0], passes[0])
    assert native.conv_algorithm("backward_data", x, w, 1, shape[6]) == names.get(passes[1], passes[1])


def test_vgg11_convolutions_trimmed_from_8x8(on_avx512vnni):
    """VGG-11 at 32 x 32, batch 64: conv3-8 (8 x 8 and smaller, 16-56 % of their taps on the
    border) leave the border out in all three passes; conv2 (16 x 16, 8 %) in its weight
    gradient only."""
    layers = [(16, 64, 128), (8, 128, 256), (8, 256, 256), (4, 256, 512), (4, 512, 512), (2, 512, 512)]
    for hw, c, o in layers:
        x, w = np.zeros((64, hw, hw, c), np.int8), np.zeros((o, 3, 3, c), np.int8)
        want = "implicit_gemm" if hw == 16 else "implicit_gemm_trimmed"
        assert native.conv_algorithm("forward", x, w, 1, 1) == want, (hw, c, o)
        assert native.conv_algorithm("backward_data", x, w, 1, 1) == want, (hw, c, o)
        assert native.conv_algorithm("backward_weight", x, w, 1, 1) == "wgrad_stream_trimmed", (hw, c, o)


# (N, H, W, C, O, K, pad), stride 1, images in groups of 4: VGG-11's conv7 and conv5 in
# small (2 x 2, 4 x 4 with 72 outputs: 12 whole row tiles), 8 x 8 over 36
# images (2,304 pixels: the centre taps' runs cross the K block of 2,048), a ragged 7 x 5
# image, a 5 x 5 kernel with padding 2, and padding 3 around one pixel (taps that meet no
# source at all: zero columns).
WGRAD_SHAPES = [
    (4, 2, 2, 64, 64, 3, 1),
    (8, 4, 4, 128, 72, 3, 1),
    (36, 8, 8, 64, 64, 3, 1),
    (4, 7, 5, 128, 120, 3, 1),
    (4, 6, 6, 64, 64, 5, 2),
    (4, 1, 1, 64, 64, 3, 3),
]
WGRAD_IDS = ["n{}h{}w{}c{}o{}k{}p{}".format(*s) for s in WGRAD_SHAPES]


@pytest.mark.parametrize("shape", WGRAD_SHAPES, ids=WGRAD_IDS)
def test_trimmed_weight_gradient_every_isa(cpu_isa, ref, shape, threads):
    pad, kernel = shape[6], (shape[5], shape[5])
    for fill in FILLS[:3]:
        x, _, err = case(shape, fill)
        np.testing.assert_array_equal(
            cpu_isa.conv2d_bwd_weight_s8(err, x, 1, pad, kernel), ref.conv2d_bwd_weight_s8(err, x, 1, pad, kernel)
        )


def test_the_weight_gradients_take_the_trimmed_stream_on_avx512(on_avx512vnni):
    """Else the test above would check other paths; and shapes just outside keep theirs:
    6 images (not whole groups of 4), 32 channels (panels across taps), 48 output
    channels, a 32 x 32 image (4 % of the taps on the border)."""
    for shape in WGRAD_SHAPES:
        x, w, _ = case(shape, None)
        assert native.conv_algorithm("backward_weight", x, w, 1, shape[6]) == "wgrad_stream_trimmed", shape
    for shape in [(6, 4, 4, 64, 64, 3, 1), (4, 4, 4, 32, 64, 3, 1), (4, 4, 4, 64, 48, 3, 1), (4, 32, 32, 64, 64, 3, 1)]:
        x, w, _ = case(shape, None)
        assert native.conv_algorithm("backward_weight", x, w, 1, shape[6]) != "wgrad_stream_trimmed", shape
