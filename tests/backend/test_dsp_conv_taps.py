"""Forward convolutions of one-channel inputs with 4 to 7 outputs (LeNet's first conv), in
the emulated DSP, against ops_ref bit for bit.

dsp_kernels/conv_taps.c puts 4 output pixels x 8 channel slots in vrmpy's lanes, the
weights (biased, shifted per pixel) in the vector and words of the image row in the
scalar; a slot of 1s sums each window, which a vrdelta copies over the pixel's lanes to
take the bias back out, and a second vrdelta compacts the channels before the store. The
cases cover every output count, kernels of 1 to 13 taps a row (one to four image words a
window row: the compiled two-word tiles and the general ones), rows read in place
(no padding, widths of whole words) and through the zero-bordered copy (padding, ragged
widths, rows wider than a vector), output rows of 1 to 3 pixels past a group of 4, more
than 8 groups a row (two tiles), thread splits inside an image, accumulation and the
extreme values. Needs qemu-hexagon, clang-16 and lld-16.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

from .cases import same

ref = RefBackend()


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


SHAPES = [  # N, H, W, O, KH, KW, pad (one input channel, stride 1)
    (3, 28, 28, 6, 5, 5, 0),  # LeNet's bench row: in place, 6 groups a row
    (2, 28, 28, 6, 5, 5, 2),  # the trainer's: the padded copy, 7 groups
    (2, 9, 9, 4, 5, 5, 0),  # 5 outputs a row: a whole group and one pixel
    (1, 7, 13, 5, 3, 3, 1),  # ragged width, copy
    (2, 6, 40, 7, 5, 5, 1),  # 10 groups: a tile of 8 and one of 2
    (1, 5, 5, 5, 1, 1, 0),  # one tap: one image word a row
    (2, 8, 9, 6, 13, 13, 6),  # 13 taps: four words, the general tile
    (1, 6, 70, 6, 5, 7, 2),  # 7 taps: three words; rows of 74 bytes
    (1, 3, 130, 4, 3, 3, 1),  # padded rows wider than a vector: the row-by-row copy
    (1, 4, 8, 7, 2, 3, 0),  # in place, 6 outputs a row, kh != kw
]


@pytest.mark.parametrize("shape", SHAPES)
def test_conv_taps(dsp, shape, rng):
    n, h, w, o, kh, kw, p = shape
    x, wt = s8(rng, n, h, w, 1), s8(rng, o, kh, kw, 1)
    same(dsp.conv2d_s8(x, wt, 1, p), ref.conv2d_s8(x, wt, 1, p))


def test_conv_taps_extremes(dsp):
    """All -128 inputs against all -128 and all 127 weights: the window sums and the bias
    correction at their limits."""
    x = np.full((2, 12, 12, 1), -128, np.int8)
    for value in (-128, 127):
        wt = np.full((6, 5, 5, 1), value, np.int8)
        same(dsp.conv2d_s8(x, wt, 1, 0), ref.conv2d_s8(x, wt, 1, 0))
        same(dsp.conv2d_s8(x, wt, 1, 2), ref.conv2d_s8(x, wt, 1, 2))


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("pad", [0, 2])
def test_conv_taps_threads_and_accumulate(dsp, threads, pad, rng):
    """Output rows split across threads mid-image (5 images of 10 rows); accumulating into
    y goes through exact loads and stores for every group."""
    x, wt = s8(rng, 5, 14, 12, 1), s8(rng, 6, 5, 5, 1)
    want = ref.conv2d_s8(x, wt, 1, pad)
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    dsp.hvx_threads = threads
    try:
        same(dsp.conv2d_s8(x, wt, 1, pad), want)
        same(dsp.accumulate(start, "conv2d_s8", x, wt, 1, pad), start + want)
    finally:
        dsp.hvx_threads = 4
