"""The requantize pass fused into the int8 products (cpu_ops/requant.h FusedRequant, run by
gemm_driver.cpp for_each_c_tile): with a given shift, each GEMM task rounds its tile of
the accumulators while it is in cache. Bit-exact against ops_ref's composition
(product, then requantize with the given shift) on every ISA at one and two threads: a
shift large enough (used as is), zero (a clipping cast), and one too small (the product's
own maximum asks for a larger shift, the accumulators are rounded again with it) - in the
three rounding modes, on shapes that take every product path (implicit GEMM, the 3-channel
one widened to 4, im2col, pixel panels, 1 x 1, a linear layer). Also the few-channel paths
this file's kernels changed: the 3-channel forward and the panel weight gradient that
reads err^T in place."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.numerics import activation_shift

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, stride, pad): implicit GEMM with ragged M and N (on a small image,
# with the taps on the zero border left out: conv_trimmed.cpp); 3 channels (an RGB
# input: widened to 4 on AVX-512 VNNI) at two kernel sizes; tap rows that are not whole
# groups of 4 (im2col); few output channels (pixel panels); a 1 x 1 convolution; the
# first's channels over a 17 x 13 image (the plain implicit GEMM).
SHAPES = [
    (2, 7, 5, 64, 120, 3, 1, 1),
    (3, 9, 7, 3, 64, 3, 1, 1),
    (1, 8, 9, 3, 128, 5, 2, 2),
    (2, 6, 5, 5, 64, 3, 1, 1),
    (2, 6, 6, 16, 20, 3, 1, 1),
    (2, 5, 5, 32, 65, 1, 1, 0),
    (1, 17, 13, 64, 120, 3, 1, 1),
]
IDS = ["n{}h{}w{}c{}o{}k{}s{}p{}".format(*s) for s in SHAPES]


def conv_case(shape):
    n, h, w, c, o, k, stride, pad = shape
    rng = np.random.default_rng(sum(shape))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o))


def given_shifts(acc) -> list[int]:
    """Zero, one below the estimate (too small: falls back), the estimate, and one above."""
    needed = activation_shift(int(np.abs(acc.astype(np.int64)).max()), 8)
    return sorted({0, max(needed - 1, 0), needed, needed + 1})


def same(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1] == want[1]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_conv_products_with_a_given_shift_every_isa(cpu_isa, ref, shape, threads):
    x, w, err = conv_case(shape)
    stride, pad, hw = shape[6], shape[7], shape[1:3]
    fwd, bwd = ref.conv2d_s8(x, w, stride, pad), ref.conv2d_bwd_data_s8(err, w, stride, pad, hw)
    for i, mode in enumerate(cases.ROUNDING):
        key = cases.rng_key(i)
        for shift in given_shifts(fwd):
            same(
                cpu_isa.conv2d_requant_s8(x, w, stride, pad, mode, key, shift=shift),
                ref.conv2d_requant_s8(x, w, stride, pad, mode, key, shift=shift),
            )
        for shift in given_shifts(bwd):
            same(
                cpu_isa.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key, shift=shift),
                ref.conv2d_bwd_data_requant_s8(err, w, stride, pad, hw, mode, key, shift=shift),
            )


@pytest.mark.parametrize("mkn", [(130, 70, 65), (7, 27, 3), (64, 512, 10)], ids=lambda s: "x".join(map(str, s)))
def test_gemm_requant_with_a_given_shift_every_isa(cpu_isa, ref, mkn, threads):
    m, k, n = mkn
    rng = np.random.default_rng(m + k + n)
    a, b = cases.int8(rng, (m, k)), cases.int8(rng, (n, k))
    for i, mode in enumerate(cases.ROUNDING):
        key = cases.rng_key(i + 3)
        for shift in given_shifts(ref.gemm_s8(a, b)):
            same(
                cpu_isa.gemm_requant_s8(a, b, mode, key, shift=shift), ref.gemm_requant_s8(a, b, mode, key, shift=shift)
            )


# Weight gradients on the panel path, with more than one block of 256 pixels and a ragged
# last one (450 and 135 pixels), output channels off the 6-row tile, 3 and 8 channels
# (17, not 9-16: those run on conv_lanes.cpp's output-channel lanes).
WGRAD_SHAPES = [(2, 15, 15, 3, 64, 3, 1, 1), (3, 9, 5, 8, 20, 3, 1, 1), (1, 6, 7, 3, 17, 5, 1, 2)]


@pytest.mark.parametrize("shape", WGRAD_SHAPES, ids=["n{}h{}w{}c{}o{}k{}s{}p{}".format(*s) for s in WGRAD_SHAPES])
def test_panel_weight_gradient_every_isa(cpu_isa, ref, shape, threads):
    x, w, err = conv_case(shape)
    stride, pad = shape[6], shape[7]
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
        ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
    )
    for fill in ((-128, -128), (127, -128)):  # the offset trick's extremes (err^T read biased)
        xf, ef = np.full_like(x, fill[0]), np.full_like(err, fill[1])
        np.testing.assert_array_equal(
            cpu_isa.conv2d_bwd_weight_s8(ef, xf, stride, pad, w.shape[1:3]),
            ref.conv2d_bwd_weight_s8(ef, xf, stride, pad, w.shape[1:3]),
        )


def test_the_shapes_take_the_paths_named_on_avx512(on_avx512vnni):
    """Else the tests above would check fewer paths than they say."""
    algos = [native.conv_algorithm("forward", *conv_case(s)[:2], s[6], s[7]) for s in SHAPES]
    assert algos == [
        "implicit_gemm_trimmed",
        "implicit_gemm_c4",
        "implicit_gemm_c4",
        "im2col_gemm",
        "pixel_panels",
        "gemm_1x1",
        "implicit_gemm",
    ]
    assert all(
        native.conv_algorithm("backward_weight", *conv_case(s)[:2], s[6], s[7]) == "wgrad_panels" for s in WGRAD_SHAPES
    )


def test_round_to_nearest_at_the_halves_every_shift(ref):
    """The 32-bit round-to-nearest loop (AVX-512 where the CPU has it): accumulators on
    either side of each rounding boundary, and of the +-127 clip, at every shift up to 31,
    both signs, a ragged length; plain, with a given shift, and fused into a product."""
    from dsptrain.backends.ops_cpu import CpuBackend

    backend = CpuBackend()
    key = cases.rng_key(2)
    for shift in range(1, 32):
        half, unit = 1 << (shift - 1), 1 << shift
        base = np.array([0, 1, 2, 126, 127, 128, 1000], np.int64)[:, None] * unit
        acc = (base + np.array([0, 1, half - 1, half, half + 1, unit - 1])[None, :]).ravel()
        acc = np.clip(np.concatenate([acc, -acc, [2**31 - 1, -(2**31)]]), -(2**31), 2**31 - 1).astype(np.int32)
        np.testing.assert_array_equal(
            backend.shift_round(acc, shift, "round", key), ref.shift_round(acc, shift, "round", key)
        )
        same(backend.requantize(acc, "round", key, shift=shift), ref.requantize(acc, "round", key, shift=shift))
