"""The im2col weight gradient with B packed one panel and K block at a time, just before
use (cpu_ops/conv_wgrad_stream.cpp: a task per panel of 64 patch columns, err^T read in
place, each K block's column-sum correction, the later blocks' added at the end).
Bit-exact against ops_ref on every ISA (the others keep their paths on the same shapes),
at one and two threads, on random values and the offset trick's extremes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O, K, stride, pad): 2,112 pixels (a block of 2,048 and one of 64), 64
# channels; 2,400 pixels at stride 2 with 70 output channels (a row tile of 4); a 5 x 5
# kernel on 128 channels (panels inside tap rows of 640 bytes); 4,608 pixels (three blocks).
# (Images in whole groups of 4 with a tenth of the taps or more on the border take the
# trimmed stream instead: test_cpu_trimmed_taps.py. Hence 33 and 15 images.)
STREAM_SHAPES = [
    (33, 8, 8, 64, 64, 3, 1, 1),
    (24, 20, 20, 64, 70, 3, 2, 1),
    (15, 12, 12, 128, 64, 5, 1, 2),
    (18, 16, 16, 64, 96, 3, 1, 1),
]
STREAM_IDS = ["n{}h{}w{}c{}o{}k{}s{}p{}".format(*s) for s in STREAM_SHAPES]
FILLS = [None, (-128, -128), (127, -128)]


def wgrad_case(shape, fill):
    n, h, w, c, o, k, stride, pad = shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    if fill is None:
        rng = np.random.default_rng(sum(shape))
        return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, k, k, c)), cases.int8(rng, (n, oh, ow, o))
    return (
        np.full((n, h, w, c), fill[0], np.int8),
        np.zeros((o, k, k, c), np.int8),
        np.full((n, oh, ow, o), fill[1], np.int8),
    )


@functools.cache
def reference(shape, fill):
    x, w, err = wgrad_case(shape, fill)
    return RefBackend().conv2d_bwd_weight_s8(err, x, shape[6], shape[7], w.shape[1:3])


@pytest.mark.parametrize("fill", FILLS, ids=["random", "min_min", "max_min"])
@pytest.mark.parametrize("shape", STREAM_SHAPES, ids=STREAM_IDS)
def test_streamed_weight_gradient_every_isa(cpu_isa, shape, fill, threads):
    x, w, err = wgrad_case(shape, fill)
    np.testing.assert_array_equal(
        cpu_isa.conv2d_bwd_weight_s8(err, x, shape[6], shape[7], w.shape[1:3]), reference(shape, fill)
    )


def test_the_shapes_take_the_streamed_path_on_avx512(on_avx512vnni):
    """Else the test above would check the other paths only; and shapes just outside its
    limits keep theirs (2,048 pixels less 4, 48 output channels, tap rows of 96 bytes)."""
    for shape in STREAM_SHAPES:
        x, w, _ = wgrad_case(shape, None)
        assert native.conv_algorithm("backward_weight", x, w, shape[6], shape[7]) == "wgrad_stream"
    for shape in [(2, 34, 30, 64, 64, 3, 1, 1), (33, 8, 8, 64, 48, 3, 1, 1), (33, 8, 8, 32, 64, 3, 1, 1)]:
        x, w, _ = wgrad_case(shape, None)
        assert native.conv_algorithm("backward_weight", x, w, shape[6], shape[7]) != "wgrad_stream"
