"""Forward convolutions of 2-4 channel inputs with more than 32 outputs (VGG's first conv),
in the emulated DSP, against ops_ref bit for bit.

dsp_kernels/conv_padded.c spreads each pixel's channels to a word of a zero-bordered image
(vdelta for 2 and 3 channels, none for 4), pads the weights the same way, takes each
window's byte sum from the image (pixel sums, window rows, windows) and runs the GEMM core
over the image in place (dspt_gemm_core_words). The cases cover each channel count, rows
of 31 and of more than 32 pixels (a masked last spread vector), taps past 32 (two weight
vectors), paddings 0 to 3, outputs with and without the core's lane of 1s (O % 32), and
thread splits that start and end inside an image; each image's rows go to the core in one
call (a group of rows each). With 3 channels the last tap's bytes ride in the 4th bytes of
the first three taps' words (read from views of the image), K = 4 (taps - 1). Needs
qemu-hexagon, clang-16 and lld-16.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

from .cases import same

ref = RefBackend()


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


SHAPES = [  # N, H, W, C, O, K, pad (stride 1)
    (2, 8, 8, 3, 64, 3, 1),
    (1, 6, 37, 3, 40, 3, 1),
    (3, 5, 7, 2, 33, 3, 0),
    (1, 9, 5, 4, 70, 3, 2),
    (2, 7, 9, 3, 96, 7, 3),
    (1, 4, 4, 2, 130, 1, 0),
    (1, 33, 34, 3, 64, 2, 1),
    (4, 3, 3, 4, 36, 3, 1),
    (1, 4, 31, 3, 64, 3, 1),
    (5, 4, 37, 3, 64, 3, 1),  # the last: shares of 4 threads span two images
    # 3 channels fold the last tap into the others' 4th bytes (K 4 (taps - 1)), but not with
    # fewer than 4 taps or an image too big for its 3 views beside it
    (2, 5, 6, 3, 40, 1, 0),
    (1, 66, 66, 3, 36, 3, 1),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_conv_padded(dsp, shape, rng):
    n, h, w, c, o, k, p = shape
    x, wt = s8(rng, n, h, w, c), s8(rng, o, k, k, c)
    same(dsp.conv2d_s8(x, wt, 1, p), ref.conv2d_s8(x, wt, 1, p))


def test_conv_padded_extremes(dsp):
    """All -128 inputs against all 127 weights: the window sums at their limits."""
    x, wt = np.full((2, 9, 9, 3), -128, np.int8), np.full((64, 3, 3, 3), 127, np.int8)
    same(dsp.conv2d_s8(x, wt, 1, 1), ref.conv2d_s8(x, wt, 1, 1))


@pytest.mark.parametrize("threads", [1, 3])
def test_conv_padded_accumulate(dsp, threads, rng):
    x, wt = s8(rng, 3, 7, 6, 3), s8(rng, 45, 3, 3, 3)
    want = ref.conv2d_s8(x, wt, 1, 1)
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    dsp.hvx_threads = threads
    try:
        got = dsp.accumulate(start, "conv2d_s8", x, wt, 1, 1)
    finally:
        dsp.hvx_threads = 4
    same(got, start + want)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_conv_padded_threads(dsp, threads, rng):
    """Output rows split across threads mid-image: each thread builds its own images."""
    x, wt = s8(rng, 3, 5, 11, 3), s8(rng, 64, 3, 3, 3)
    dsp.hvx_threads = threads
    try:
        got = dsp.conv2d_s8(x, wt, 1, 1)
    finally:
        dsp.hvx_threads = 4
    same(got, ref.conv2d_s8(x, wt, 1, 1))


def test_kept_controls_alternate(dsp, rng):
    """Permutation controls are routed once and kept by shape (dsp_kernels/controls.c): shapes
    whose controls differ (channel spreads 2 -> 4 and 3 -> 4, compactions of 5, 6 and 7
    output channels) run in turn, twice over, each against ops_ref."""
    cases = [
        ((2, 6, 9, 2, 40), 1),
        ((1, 7, 7, 1, 5), 0),
        ((2, 6, 9, 3, 64), 1),
        ((1, 7, 7, 1, 6), 0),
        ((1, 7, 7, 1, 7), 0),
    ]
    for _ in range(2):
        for (n, h, w, c, o), pad in cases:
            x, wt = s8(rng, n, h, w, c), s8(rng, o, 3, 3, c)
            same(dsp.conv2d_s8(x, wt, 1, pad), ref.conv2d_s8(x, wt, 1, pad))
