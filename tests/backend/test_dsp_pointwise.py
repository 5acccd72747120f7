"""Pointwise (1 x 1, stride 1, no padding) convolutions on the emulated DSP against ops_ref
bit for bit, at 1 to 4 HVX threads, on MobileNetV2-like and ragged shapes: backward data
takes the GEMM on err's pixels ("pointwise") whatever the channel counts (few err channels
used to go to conv_grid, few dx channels to col2im), and a weight gradient whose positions
fit one pass interleaves x^T and err^T once and splits dw's blocks across the threads
("wgrad_outputs", dsp_kernels/conv_pointwise.c): no partial sums, no join. Plain and
accumulating. Needs qemu-hexagon, clang-16 and lld-16.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend

from .cases import same

ref = RefBackend()


@pytest.fixture
def rng():
    return np.random.default_rng(4444)


@pytest.fixture
def threads(dsp, request):
    dsp.hvx_threads = request.param
    yield request.param
    dsp.hvx_threads = 4


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


# (N, H, W, C, O): MobileNetV2's kinds of 1 x 1 layer, scaled down, and ragged ones: C, O
# not multiples of 32 (a lane of 1s in x^T's last block), positions not a multiple of 4
# (zero words past them), 1 x 1 images, more dw blocks than threads and fewer
WGRAD = {
    "expand-2x2": (5, 2, 2, 24, 144),
    "project-4x4": (3, 4, 4, 96, 20),
    "one-pixel": (9, 1, 1, 160, 96),
    "ragged": (3, 3, 3, 40, 37),
    "ragged-small": (1, 1, 3, 12, 5),
    "wide": (2, 2, 2, 200, 72),
    # rows of 32 bytes (x^T or err^T: 4 rows one vector, interleaved by two byte shuffles)
    "x-32": (5, 4, 4, 32, 192),
    "err-32": (3, 3, 5, 40, 32),
    "both-32": (1, 7, 7, 32, 32),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", WGRAD)
def test_weight_gradient_splits_outputs(dsp, rng, threads, name):
    n, h, w, c, o = WGRAD[name]
    x, err = s8(rng, n, h, w, c), s8(rng, n, h, w, o)
    want = ref.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1))
    same(dsp.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1)), want)
    assert dsp.last_paths == [("conv2d_bwd_weight_s8", "wgrad_outputs")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_bwd_weight_s8", err, x, 1, 0, (1, 1)), start + want)


def test_weight_gradient_extremes(dsp):
    """-128 everywhere: every product 16384, sums of up to 300 of them."""
    x, err = np.full((3, 10, 10, 36), -128, np.int8), np.full((3, 10, 10, 44), -128, np.int8)
    same(dsp.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1)), ref.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1)))
    assert dsp.last_paths == [("conv2d_bwd_weight_s8", "wgrad_outputs")]


# (N, H, W, C, O) of backward data: few err channels (O <= 16) and few dx channels (C < 32)
BWD_DATA = {
    "few-err-channels": (2, 6, 5, 32, 16),
    "few-dx-channels": (2, 5, 6, 12, 40),
    "expand-16": (1, 4, 4, 16, 96),
    "ragged-rows": (1, 3, 5, 24, 8),
    # rows of 24 dx channels back to back: 4 rows stored as 3 aligned vectors (gemm.c's tile),
    # the last 1-3 rows as before; deep (one_block_words) and with a rest of 2 words
    "dx-24": (2, 5, 7, 24, 144),
    "dx-24-shallow": (1, 6, 6, 24, 40),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", BWD_DATA)
def test_backward_data_is_the_gemm(dsp, rng, threads, name):
    n, h, w, c, o = BWD_DATA[name]
    wt, err = s8(rng, o, 1, 1, c), s8(rng, n, h, w, o)
    want = ref.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w))
    same(dsp.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w)), want)
    assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_bwd_data_s8", err, wt, 1, 0, (h, w)), start + want)


# (N, H, W, C, O, KH, stride, pad) -> path: backward data whose wT conv.c's pack_wt packs a
# unit (128 channels, tap, 4 err channels) at a time: whole channel quads split across the
# threads mid-run, a ragged last quad (3 blocks, the 1s lane at 8; one whole block), err
# channels past O (O % 4 != 0: zero rows), and taps, flipped (the stride-1 conv of err) or not
PACKED_WT = {
    "quads-whole": ((1, 1, 3, 256, 40, 1, 1, 0), "pointwise"),
    "quad-ragged": ((2, 2, 2, 200, 36, 1, 1, 0), "pointwise"),
    "quad-one-block": ((1, 2, 3, 160, 8, 1, 1, 0), "pointwise"),
    "strided": ((1, 4, 4, 136, 12, 1, 2, 0), "pointwise_strided"),
    "taps-flipped": ((1, 4, 4, 140, 36, 3, 1, 1), "flipped_gemm"),
    "taps-rows-past-o": ((1, 5, 5, 136, 10, 3, 2, 1), "gather_gemm"),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", PACKED_WT)
def test_backward_data_packed_wt(dsp, rng, threads, name):
    (n, h, w, c, o, k, stride, pad), path = PACKED_WT[name]
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    wt, err = s8(rng, o, k, k, c), s8(rng, n, oh, ow, o)
    want = ref.conv2d_bwd_data_s8(err, wt, stride, pad, (h, w))
    same(dsp.conv2d_bwd_data_s8(err, wt, stride, pad, (h, w)), want)
    assert dsp.last_paths == [("conv2d_bwd_data_s8", path)]


def test_backward_data_packed_wt_extremes(dsp):
    """-128 and 127 weights: the bias (w + 128) spans every byte value through the shuffles."""
    wt = np.where(np.arange(300 * 40).reshape(40, 1, 1, 300) % 3 == 0, 127, -128).astype(np.int8)
    err = np.full((1, 2, 2, 40), -128, np.int8)
    same(dsp.conv2d_bwd_data_s8(err, wt, 1, 0, (2, 2)), ref.conv2d_bwd_data_s8(err, wt, 1, 0, (2, 2)))
    assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise")]


# (N, H, W, C, O, K, pad), square images: weight gradients over more positions than one pass holds whose
# im2col columns (K * K * C <= 16) would fill at most half of the vrmpy lanes: conv.c's
# wgrad_gemm puts the outputs in the lanes instead (dwT), and the join transposes
FLIPPED = {
    "expand-16": (3, 40, 40, 16, 40, 1, 0),
    "one-channel-3x3": (2, 9, 9, 1, 32, 3, 1),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", FLIPPED)
def test_weight_gradient_flipped(dsp, rng, threads, name):
    n, h, w, c, o, k, pad = FLIPPED[name]
    oh = h + 2 * pad - k + 1
    x, err = s8(rng, n, h, w, c), s8(rng, n, oh, oh, o)
    want = ref.conv2d_bwd_weight_s8(err, x, 1, pad, (k, k))
    same(dsp.conv2d_bwd_weight_s8(err, x, 1, pad, (k, k)), want)
    assert dsp.last_paths == [("conv2d_bwd_weight_s8", "wgrad_gemm")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_bwd_weight_s8", err, x, 1, pad, (k, k)), start + want)


# (N, H, W, C, O): forwards whose outputs fill whole 32-lane blocks (no lane of 1s), so the
# GEMM sums each pixel's C bytes itself; with C = 4..128 (k4 | 32 words) 32 contiguous
# pixels are summed as C / 4 vectors reduced by vdeal rounds (gemm.c row_sums), pixels
# past a multiple of 32 one by one
FORWARD = {
    "c4": (1, 5, 13, 4, 64),
    "c8": (1, 9, 9, 8, 96),
    "c16": (2, 16, 16, 16, 96),
    "c32": (1, 7, 9, 32, 64),
    "c64": (3, 5, 5, 64, 128),
    "c128": (1, 12, 12, 128, 32),
    "c48": (2, 6, 6, 48, 32),
}


@pytest.mark.parametrize("threads", [1, 3, 4], indirect=True)
@pytest.mark.parametrize("name", FORWARD)
def test_forward_row_sums(dsp, rng, threads, name):
    n, h, w, c, o = FORWARD[name]
    x, wt = s8(rng, n, h, w, c), s8(rng, o, 1, 1, c)
    same(dsp.gemm_s8(x.reshape(-1, c), wt.reshape(o, c)), ref.gemm_s8(x.reshape(-1, c), wt.reshape(o, c)))
    if c > 4:  # 4 channels take conv_padded
        same(dsp.conv2d_s8(x, wt, 1, 0), ref.conv2d_s8(x, wt, 1, 0))
        assert dsp.last_paths == [("conv2d_s8", "pointwise")]
    x = np.full_like(x, -128)
    same(dsp.gemm_s8(x.reshape(-1, c), wt.reshape(o, c)), ref.gemm_s8(x.reshape(-1, c), wt.reshape(o, c)))


# (N, H, W, C, O): 1 x 1 products onto 16 channels over a multiple of 32 pixels (forward of
# O = 16, backward data of C = 16) put the pixels in the vrmpy lanes ("pointwise_pixels":
# pairs of pixels packed into each block's lanes, the 16 x 32 words transposed by vshuff);
# 96 channels and 8 x 12 images give 3 chunks' tails, 3 images ragged thread shares
PIXELS = {
    "project-32": (2, 16, 16, 32, 16),
    "project-96": (1, 8, 12, 96, 16),
    "project-20": (3, 4, 8, 20, 16),
    "expand-96": (1, 16, 16, 16, 96),
    "expand-36": (2, 4, 4, 16, 36),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", PIXELS)
def test_sixteen_channels_take_the_pixels_in_the_lanes(dsp, rng, threads, name):
    n, h, w, c, o = PIXELS[name]
    x, wt, err = s8(rng, n, h, w, c), s8(rng, o, 1, 1, c), s8(rng, n, h, w, o)
    if o == 16:
        want = ref.conv2d_s8(x, wt, 1, 0)
        same(dsp.conv2d_s8(x, wt, 1, 0), want)
        assert dsp.last_paths == [("conv2d_s8", "pointwise_pixels")]
        start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
        same(dsp.accumulate(start, "conv2d_s8", x, wt, 1, 0), start + want)
    if c == 16:
        want = ref.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w))
        same(dsp.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w)), want)
        assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise_pixels")]
        start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
        same(dsp.accumulate(start, "conv2d_bwd_data_s8", err, wt, 1, 0, (h, w)), start + want)


def test_sixteen_channels_extremes(dsp):
    """-128 everywhere: the bias (x + 128) and wm's row sums at their largest."""
    x, wt = np.full((1, 8, 8, 64), -128, np.int8), np.full((16, 1, 1, 64), -128, np.int8)
    same(dsp.conv2d_s8(x, wt, 1, 0), ref.conv2d_s8(x, wt, 1, 0))
    assert dsp.last_paths == [("conv2d_s8", "pointwise_pixels")]
    wt, err = np.full((64, 1, 1, 16), -128, np.int8), np.full((1, 8, 8, 64), -128, np.int8)
    same(dsp.conv2d_bwd_data_s8(err, wt, 1, 0, (8, 8)), ref.conv2d_bwd_data_s8(err, wt, 1, 0, (8, 8)))
    assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise_pixels")]


# (M, K, N): contiguous rows of 16, 24 or 32 bytes (K4 = 4, 6, 8 words) take the GEMM
# strips with the depth compiled in, and their whole blocks the pipelined 4-row tiles
# (gemm.c piped_tiles: a tile's stores among the next tile's vrmpy); M not a multiple of 4
# (rows left to the plain tiles), over 256 (two row blocks), N whole blocks (row sums by
# vectors), ragged (the lane of 1s after 1, 4 or 6 whole blocks) and below 32
DEPTHS = {
    "k16-n96": (301, 16, 96),
    "k16-n40": (70, 16, 40),
    "k24-n144": (262, 24, 144),
    "k24-n96": (33, 24, 96),
    "k32-n192": (129, 32, 192),
    "k32-n224": (66, 32, 224),
    "k32-n20": (45, 32, 20),
    "k24-n64": (8, 24, 64),
    "k16-n32": (3, 16, 32),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", DEPTHS)
def test_compiled_depths(dsp, rng, threads, name):
    gemm_and_1x1_convs(dsp, rng, *DEPTHS[name])


def gemm_and_1x1_convs(dsp, rng, m: int, k: int, n: int, pin_pointwise: bool = False):
    """An (M, K, N) GEMM, plain and accumulating, and the same depths as 1 x 1 convolutions:
    forward (K = C) and backward data (K = O), each pinned to the pointwise path if asked."""
    a, b = s8(rng, m, k), s8(rng, n, k)
    want = ref.gemm_s8(a, b)
    same(dsp.gemm_s8(a, b), want)
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "gemm_s8", a, b), start + want)
    x, wt = a.reshape(1, 1, m, k), b.reshape(n, 1, 1, k)
    same(dsp.conv2d_s8(x, wt, 1, 0), ref.conv2d_s8(x, wt, 1, 0))
    if pin_pointwise:
        assert dsp.last_paths == [("conv2d_s8", "pointwise")]
    err, wd = s8(rng, 1, 1, m, k), s8(rng, k, 1, 1, n)
    want = ref.conv2d_bwd_data_s8(err, wd, 1, 0, (1, m))
    same(dsp.conv2d_bwd_data_s8(err, wd, 1, 0, (1, m)), want)
    if pin_pointwise:
        assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise")]
    same(dsp.accumulate(want, "conv2d_bwd_data_s8", err, wd, 1, 0, (1, m)), 2 * want)


@pytest.mark.parametrize("k", [16, 24, 32])
def test_compiled_depths_extremes(dsp, k):
    """-128 everywhere: the rows' sums and the bias at their largest."""
    a, b = np.full((77, k), -128, np.int8), np.full((96, k), -128, np.int8)
    same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))
    b = np.full((144, k), -128, np.int8)
    same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


# (N, H, W, C, O): weight gradients over more positions than one pass (wgrad_gemm, positions
# split across the threads) whose x or err rows are 32 or 16 bytes: the packer's one-load
# groups (16 bytes: two groups a load, flipped with 16 -> 96), positions not a multiple of 4
# (the last group's rows padded with zeros) and odd groups a thread
WGRAD_ROWS32 = {
    "project-16": (1, 61, 93, 32, 16),
    "expand-32": (3, 41, 47, 32, 64),
    "err-32": (1, 79, 83, 24, 32),
    "expand-16": (1, 53, 57, 16, 96),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", WGRAD_ROWS32)
def test_weight_gradient_rows_of_32(dsp, rng, threads, name):
    n, h, w, c, o = WGRAD_ROWS32[name]
    x, err = s8(rng, n, h, w, c), s8(rng, n, h, w, o)
    want = ref.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1))
    same(dsp.conv2d_bwd_weight_s8(err, x, 1, 0, (1, 1)), want)
    assert dsp.last_paths == [("conv2d_bwd_weight_s8", "wgrad_gemm")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_bwd_weight_s8", err, x, 1, 0, (1, 1)), start + want)


# (M, K, N): one column block (N <= 32, MobileNetV2's projections onto 24 or 32 channels)
# over deep contiguous rows on 8 bytes: the 4-row tiles load two words of a row at once
# (gemm.c tile: memd); K4 odd (the last word alone), K not a multiple of 4 (the GEMM copies
# rows to a stride of round_up(K, 4), 8-aligned or not; the convolutions take im2col_gemm),
# K4 of 1 (no pair), N whole (32) and ragged (the lane of 1s), M not a multiple of 4; K4 >= 8
# runs one_block_words' packets for K4 // 4 * 4 words (K4 % 4 of 0-3 after it: 24, 9, 10, 35;
# K4 8-9 its shortest loop), K4 7 the memd loop alone; N < 32, the product's only block:
# the sums' fix copies lane N of the 1s (1 to 31) by vdelta (gemm.c strip_spread)
ONE_BLOCK = {
    "k96-n24": (261, 96, 24),
    "k144-n24": (67, 144, 24),
    "k144-n32": (64, 144, 32),
    "k192-n32": (37, 192, 32),
    "k100-n24": (30, 100, 24),
    "k150-n20": (19, 150, 20),
    "k146-n5": (11, 146, 5),
    "k140-n24": (21, 140, 24),
    "k40-n17": (13, 40, 17),
    "k36-n32": (10, 36, 32),
    "k28-n24": (7, 28, 24),
    "k8-n31": (6, 8, 31),
    "k64-n1": (23, 64, 1),
    "k4-n24": (9, 4, 24),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", ONE_BLOCK)
def test_one_block_doubleword_rows(dsp, rng, threads, name):
    m, k, n = ONE_BLOCK[name]
    # both convolutions the GEMM on pixels (ragged or few channels go to im2col_gemm, conv_grid)
    gemm_and_1x1_convs(dsp, rng, m, k, n, pin_pointwise=k % 4 == 0 and k > 32)


def test_one_block_doubleword_extremes(dsp):
    """-128 everywhere over deep rows: sums and bias at their largest, odd and even K4."""
    for k in (144, 148, 140, 192):
        a, b = np.full((45, k), -128, np.int8), np.full((24, k), -128, np.int8)
        same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))
        b = np.full((32, k), 127, np.int8)
        same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))


# (M, K, N): N a multiple of 32 (no lane of 1s: the rows' sums from gemm.c row_sums_fold,
# 32 rows folded into one vector) with rows of 1-10 vectors, the count compiled in (K 100,
# 128 exactly, 132, 260, 512, 516, 1280) and past them (1284, 1540: counted), M ragged
# around 32 and past 256 (ROW_BLOCK: sums per pass), K not a multiple of 4 (copied rows),
# one and several blocks
ROW_SUMS = {
    "k100-n32": (45, 100, 32),
    "k128-n64": (33, 128, 64),
    "k132-n32": (70, 132, 32),
    "k144-n32": (290, 144, 32),
    "k260-n96": (37, 260, 96),
    "k510-n32": (31, 510, 32),
    "k512-n64": (19, 512, 64),
    "k516-n32": (41, 516, 32),
    "k1280-n32": (9, 1280, 32),
    "k1284-n64": (35, 1284, 64),
    "k1538-n32": (6, 1538, 32),
}


@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize("name", ROW_SUMS)
def test_row_sums_folded(dsp, rng, threads, name):
    m, k, n = ROW_SUMS[name]
    gemm_and_1x1_convs(dsp, rng, m, k, n, pin_pointwise=k % 4 == 0)


@pytest.mark.parametrize("k", [96, 144, 388, 1300])
def test_row_sums_folded_extremes(dsp, k):
    """-128 and 127 rows: the folded sums at their largest and smallest."""
    for fill in (-128, 127):
        a, b = np.full((67, k), fill, np.int8), np.full((64, k), -128, np.int8)
        same(dsp.gemm_s8(a, b), ref.gemm_s8(a, b))
