"""The weight gradient of a few-channel source with the taps as the GEMM's rows
(cpu_ops/conv_wgrad_planes.cpp: A read in place from the source's biased channel planes,
the error packed as B, the reduction over the padded grid's rows in chunks whose partial
sums are added at the end). Bit-exact against ops_ref on every ISA (the others take their
own paths on the same shapes), at one and two threads, on random values and the offset
trick's extremes."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, stride, pad): 3 channels with 70 outputs (a ragged second panel of B);
# one channel and a 5 x 5 kernel (25 taps); 4 channels (36 taps) on 4-pixel rows; a grid
# of 160 rows of 16 pixels, so two threads split it into chunks that start mid-image; no
# padding (the grid rows past an image's last output row read the next image). Every
# output row holds whole groups of 4 pixels.
PLANES_SHAPES = [
    (2, 9, 8, 3, 70, 3, 1, 1),
    (1, 5, 12, 1, 32, 5, 1, 2),
    (3, 4, 4, 4, 64, 3, 1, 1),
    (5, 30, 16, 3, 64, 3, 1, 1),
    (2, 10, 10, 2, 48, 3, 1, 0),
]
PLANES_IDS = ["n{}h{}w{}c{}o{}k{}s{}p{}".format(*s) for s in PLANES_SHAPES]


def wgrad_case(shape, seed):
    n, h, w, c, o, k, stride, pad = shape
    rng = np.random.default_rng(seed)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o))


@pytest.mark.parametrize("shape", PLANES_SHAPES, ids=PLANES_IDS)
def test_planes_weight_gradient_every_isa(cpu_isa, ref, shape, threads):
    x, w, err = wgrad_case(shape, sum(shape))
    stride, pad, kernel = shape[6], shape[7], w.shape[1:3]
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, stride, pad, kernel), ref.conv2d_bwd_weight_s8(err, x, stride, pad, kernel)
    )
    for fx, fe in ((-128, -128), (127, -128), (-128, 127)):  # A read biased, B's column sums
        xf, ef = np.full_like(x, fx), np.full_like(err, fe)
        np.testing.assert_array_equal(
            cpu_isa.conv2d_bwd_weight_s8(ef, xf, stride, pad, kernel),
            ref.conv2d_bwd_weight_s8(ef, xf, stride, pad, kernel),
        )


def test_the_shapes_take_the_planes_path_on_avx512(on_avx512vnni):
    """Else the test above would check the other paths only; and the shapes just outside
    its limits keep theirs (rows of 15 pixels, 17 output channels, 5 channels)."""
    for shape in PLANES_SHAPES:
        x, w, _ = wgrad_case(shape, 0)
        assert native.conv_algorithm("backward_weight", x, w, shape[6], shape[7]) == "wgrad_planes"
    for shape in [(2, 15, 15, 3, 64, 3, 1, 1), (1, 6, 8, 3, 17, 3, 1, 1), (1, 6, 8, 5, 64, 3, 1, 1)]:
        x, w, _ = wgrad_case(shape, 0)
        assert native.conv_algorithm("backward_weight", x, w, shape[6], shape[7]) != "wgrad_planes"
