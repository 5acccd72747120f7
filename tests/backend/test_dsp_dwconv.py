"""Depthwise convolutions on the emulated DSP (dsp_kernels/dwconv*.c) against
ops_ref bit for bit: forward, backward data and weight gradient, the requantizing forms and
accumulation, at 1 to 4 HVX threads, on random and ragged shapes; and which path each
shape takes (a shape that stops taking its kernel fails here). Last, the pointwise (1 x 1)
convolutions MobileNetV2 puts between them: the GEMM core on the pixels as they lie.

The paths: stride 1 or 2 with 3 kernel rows of up to 4 taps and 16 outputs an image or more
puts 4 columns of a channel in each vrmpy word ("dw_column_quads": a strip of 128 bytes of
the padded rows, or at stride 2 of a pixel's 128-channel block, goes down the rows, each
row's words built once); other stride-1 kernels run on the padded rows as they are
("dw_flat", vmpy: any channel count, the weights by residue of the vector index mod
C / gcd(C, 128)); other strides one 128-channel
block of a pixel a vector ("dw_blocks", a ragged last block masked); backward data of
stride 1 is the flipped forward (same paths), of other strides a run per class of dx pixels
("dw_classes"). With 96 channels or more, a source of at most 4 pixels (2 x 2 and 1 x 1
images; err of backward data from them) or a stride-2 forward onto 16 outputs or fewer
takes each output pixel's inside taps, 4 a vrmpy word ("dw_pixel_quads",
dsp_kernels/dwconv_pixels.c); 3 x 3 at stride 2, pad 1 with C % 32 == 0 or C > 128 puts
each input column's 3 rows in the words ("dw_column_triples", onto 2 x 2 outputs or more:
before the pixel quads; also stride 1, forward and backward data, on images of 5 to 16
pixels) and, backward, the 4 err pixels
that 4 dx pixels read ("dw_err_quads"; onto an even width with C % 32 == 0 or C = 144 as
whole aligned vectors of dx pixel pairs, "dw_err_pairs", at 96 channels their rows written in
packets, "dw_err_packets", at 144 in two passes written in packets, "dw_err_144"; from an err of one pixel with
C % 32 == 0, each dx pixel err times its one tap, "dw_err_one"); the weight gradient puts four images in each vrmpy word
("dw_image_quads", a ragged batch padded with zero images), except where the image and the
output have at most 4 pixels and every output's window holds every input pixel: there each
(output, input) pair sums over the batch in a register ("dw_image_pairs"). Needs qemu-hexagon, clang-16
and lld-16.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import RngKey

from .cases import same

ref = RefBackend()


@pytest.fixture
def rng():
    return np.random.default_rng(3333)


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def out_hw(h, w, kh, kw, stride, pad):
    return (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1


# N, H, W, C, KH, KW, stride, pad; and the paths of forward, backward data
SHAPES = [
    # the quads' rows as packets (a zero border, whole aligned output vectors): a whole strip and a tail
    ((3, 6, 7, 32, 3, 3, 1, 1), "dw_quad_packets", "dw_quad_packets"),  # C divides 128: 4 pixels a vector
    ((2, 5, 8, 16, 3, 3, 1, 2), "dw_quad_packets", "dw_column_quads"),  # pad 2: two rows only start sums
    (
        (2, 5, 6, 130, 3, 3, 1, 1),
        "dw_column_quads",
        "dw_column_quads",
    ),  # ragged: 65 weight residues, rows end mid-vector
    ((5, 4, 5, 96, 3, 3, 1, 1), "dw_quad_packets", "dw_quad_packets"),  # 3 residues, 5 images (1 and 2 a thread)
    ((5, 4, 4, 96, 3, 3, 1, 1), "dw_column_triples", "dw_column_triples"),  # stride 1 on 16 pixels: the triples
    ((3, 3, 5, 150, 3, 3, 1, 1), "dw_column_triples", "dw_column_triples"),  # ragged, odd width, 15 pixels
    ((2, 1, 1, 200, 3, 3, 1, 1), "dw_pixel_quads", "dw_pixel_quads"),  # one pixel: the centre tap alone
    ((3, 4, 4, 1, 3, 3, 1, 1), "dw_column_quads", "dw_column_quads"),  # one channel: 128 pixels a vector
    ((2, 5, 6, 24, 3, 4, 1, 1), "dw_column_quads", "dw_classes"),  # 4 taps a row: the whole word
    ((2, 6, 6, 45, 5, 5, 1, 2), "dw_flat", "dw_flat"),  # 5 x 5: the vmpy path, taps from memory
    ((3, 5, 4, 7, 2, 2, 1, 0), "dw_flat", "dw_flat"),  # even kernel, no padding
    ((2, 5, 7, 24, 3, 2, 1, 1), "dw_quad_packets", "dw_classes"),  # kh != kw: the flipped forward needs square
    ((2, 5, 5, 16, 3, 3, 1, 3), "dw_column_quads", "dw_classes"),  # pad past k - 1
    ((2, 6, 8, 32, 3, 3, 1, 0), "dw_column_quads", "dw_quad_packets"),  # no zero rows: the first row's products kept
    ((5, 11, 11, 96, 3, 3, 2, 1), "dw_column_triples", "dw_err_quads"),  # 3 x 3 stride 2, C % 32 == 0; odd width peeled
    ((3, 8, 6, 96, 3, 3, 2, 1), "dw_triple_packets", "dw_err_packets"),  # 96 channels, even width: the rows in packets
    ((3, 7, 8, 96, 3, 3, 2, 1), "dw_triple_packets", "dw_err_packets"),  # odd height: the last dx row to the sink
    ((3, 2, 10, 96, 3, 3, 2, 1), "dw_pixel_quads", "dw_err_packets"),  # one anchor row, its row m + 1 the zeros
    ((3, 1, 10, 96, 3, 3, 2, 1), "dw_pixel_quads", "dw_err_packets"),  # one dx row: the second to the sink
    ((3, 9, 4, 96, 3, 3, 2, 1), "dw_triple_packets", "dw_err_pairs"),  # odd height (a zero row below), 2 outputs a row
    # (backward data: an err row of 2 pixels is too short for the err packets' loop)
    ((3, 9, 9, 160, 3, 3, 2, 1), "dw_column_triples", "dw_err_quads"),  # odd image, a second block of 32 channels
    ((2, 8, 8, 64, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # half a vector of channels
    ((2, 9, 9, 48, 3, 3, 2, 1), "dw_column_quads", "dw_classes"),  # stride 2 quads: strips of a pixel's block
    ((2, 10, 10, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_144"),  # C > 128 ragged: the last block moved back
    ((3, 7, 5, 60, 3, 3, 2, 1), "dw_blocks", "dw_classes"),  # stride 2, 12 outputs, C < 96: the vmpy blocks
    ((2, 8, 8, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_144"),  # stride 2 onto 4 x 4 outputs: the triples
    # (backward data at 144 channels, even H, err rows of 3 or more: two passes in packets)
    ((2, 6, 6, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_144"),  # err rows of 3: the shortest the passes take
    ((2, 6, 4, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # err rows of 2: the err pairs
    ((2, 2, 10, 144, 3, 3, 2, 1), "dw_pixel_quads", "dw_err_144"),  # one anchor row, its row m + 1 the zeros
    ((3, 7, 5, 150, 3, 3, 2, 1), "dw_column_triples", "dw_err_quads"),  # the same, ragged blocks (150 = 128 + 22)
    ((2, 3, 3, 100, 3, 3, 2, 3), "dw_pixel_quads", "dw_classes"),  # pad past k: corner outputs meet no tap
    ((4, 2, 2, 576, 3, 3, 2, 1), "dw_pixel_quads", "dw_err_one"),  # MobileNetV2's last stride-2 shape
    ((3, 4, 4, 192, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # err of 2 x 2: the err quads (measured faster)
    ((3, 2, 4, 192, 3, 3, 2, 1), "dw_pixel_quads", "dw_pixel_quads"),  # 1 x 2 outputs (err): the pixel quads
    ((2, 7, 8, 160, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # odd height; a last unit of 1 group
    ((2, 6, 4, 224, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # a unit of 3 groups after a whole one
    ((2, 5, 6, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_pairs"),  # 144: 9 vectors a pixel pair, odd height
    ((2, 10, 9, 144, 3, 3, 2, 1), "dw_column_triples", "dw_err_quads"),  # odd width: dx pixel pairs do not tile a row
    ((3, 1, 1, 160, 3, 3, 1, 1), "dw_pixel_quads", "dw_err_one"),  # one pixel, C % 32 == 0: a block of 1 group
    ((2, 1, 2, 64, 3, 3, 2, 1), "dw_column_triples", "dw_err_one"),  # err 1 x 1 onto 2 dx pixels
    ((5, 2, 2, 384, 3, 3, 1, 1), "dw_pixel_quads", "dw_pixel_quads"),  # 4 sources met by 4 pixels, aligned stores
    ((3, 2, 2, 200, 3, 3, 1, 1), "dw_pixel_quads", "dw_pixel_quads"),  # the same, C % 32 != 0 (unaligned)
    ((2, 1, 3, 130, 3, 3, 1, 1), "dw_pixel_quads", "dw_pixel_quads"),  # 3 sources: the fourth slot's weight zero
    ((2, 2, 2, 100, 5, 5, 1, 2), "dw_pixel_quads", "dw_pixel_quads"),  # 5 x 5 on a 2 x 2 image
    ((2, 2, 2, 4224, 3, 3, 1, 2), "dw_pixel_quads", "dw_flat"),  # weights past the 256 KB built once: each share's own
    ((2, 7, 7, 1400, 5, 5, 2, 1), "dw_pixel_quads", "dw_classes"),  # the same for each output pixel's own taps
    ((2, 1, 1, 25600, 3, 3, 1, 1), "dw_pixel_quads", "dw_err_one"),  # and a 1 x 1 image's: 200 blocks
    ((2, 9, 9, 20, 5, 5, 2, 2), "dw_blocks", "dw_classes"),  # 5 x 5 stride 2: classes of 9, 6 and 4 taps
    ((3, 8, 7, 40, 3, 3, 3, 0), "dw_blocks", "dw_classes"),  # stride 3: classes with no tap (zeros)
]
IDS = ["x".join(map(str, s)) for s, _, _ in SHAPES]
# the shapes above whose weight gradient takes dw_image_pairs (the others dw_image_quads)
WGRAD_PAIRS = {
    (2, 1, 1, 200, 3, 3, 1, 1),
    (4, 2, 2, 576, 3, 3, 2, 1),
    (5, 2, 2, 384, 3, 3, 1, 1),
    (3, 2, 2, 200, 3, 3, 1, 1),
    (2, 2, 2, 100, 5, 5, 1, 2),
    (3, 1, 1, 160, 3, 3, 1, 1),
    (2, 1, 2, 64, 3, 3, 2, 1),
    (2, 1, 1, 25600, 3, 3, 1, 1),
}
# the shapes above whose weight gradient takes dw_image_rows (3 x 3, stride 1 with OW % 4 == 0
# or stride 2 with OW % 2 == 0: the image quads' rows as modulo-scheduled packets)
WGRAD_ROWS = {
    (5, 4, 4, 96, 3, 3, 1, 1),
    (3, 7, 8, 96, 3, 3, 2, 1),
    (3, 9, 4, 96, 3, 3, 2, 1),
    (3, 4, 4, 1, 3, 3, 1, 1),
    (5, 11, 11, 96, 3, 3, 2, 1),
    (2, 8, 8, 64, 3, 3, 2, 1),
    (2, 8, 8, 144, 3, 3, 2, 1),
    (2, 6, 4, 144, 3, 3, 2, 1),
    (2, 3, 3, 100, 3, 3, 2, 3),
    (3, 4, 4, 192, 3, 3, 2, 1),
    (3, 2, 4, 192, 3, 3, 2, 1),
    (2, 7, 8, 160, 3, 3, 2, 1),
    (2, 6, 4, 224, 3, 3, 2, 1),
    (2, 2, 2, 4224, 3, 3, 1, 2),
}


def args(rng, shape):
    n, h, w, c, kh, kw, stride, pad = shape
    oh, ow = out_hw(h, w, kh, kw, stride, pad)
    return s8(rng, n, h, w, c), s8(rng, c, kh, kw, 1), s8(rng, n, oh, ow, c), stride, pad


@pytest.mark.parametrize("case", SHAPES, ids=IDS)
def test_dwconv_matches_ref_and_takes_its_path(dsp, rng, case):
    shape, fwd_path, bwd_path = case
    x, w, err, stride, pad = args(rng, shape)
    kernel, in_hw = w.shape[1:3], x.shape[1:3]
    same(dsp.dwconv2d_s8(x, w, stride, pad), ref.dwconv2d_s8(x, w, stride, pad))
    assert dsp.last_paths == [("dwconv2d_s8", fwd_path)]
    same(dsp.dwconv2d_bwd_data_s8(err, w, stride, pad, in_hw), ref.dwconv2d_bwd_data_s8(err, w, stride, pad, in_hw))
    assert dsp.last_paths == [("dwconv2d_bwd_data_s8", bwd_path)]
    same(
        dsp.dwconv2d_bwd_weight_s8(err, x, stride, pad, kernel), ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, kernel)
    )
    wgrad_path = (
        "dw_image_pairs" if shape in WGRAD_PAIRS else "dw_image_rows" if shape in WGRAD_ROWS else "dw_image_quads"
    )
    assert dsp.last_paths == [("dwconv2d_bwd_weight_s8", wgrad_path)]


def test_bwd_data_keeps_dx_size_apart(dsp, rng):
    """Two dx sizes from one err shape (stride 2: 10 and 9 wide both give 5): the prepared
    descriptor of one must not serve the other (dx of the wrong width, no error)."""
    w = s8(rng, 144, 3, 3, 1)
    err = s8(rng, 2, 5, 5, 144)
    for in_hw, path in (((10, 10), "dw_err_144"), ((10, 9), "dw_err_quads"), ((10, 10), "dw_err_144")):
        same(dsp.dwconv2d_bwd_data_s8(err, w, 2, 1, in_hw), ref.dwconv2d_bwd_data_s8(err, w, 2, 1, in_hw))
        assert dsp.last_paths == [("dwconv2d_bwd_data_s8", path)]


def test_every_depthwise_path_is_pinned():
    """Each depthwise path of enum dspt_path has a shape above that takes it."""
    from dsptrain.backends.dsp_abi import PATH_NAMES

    depthwise = {name for name in PATH_NAMES.values() if name.startswith("dw_")}
    wgrad = {"dw_image_pairs"} if WGRAD_PAIRS else set()
    wgrad |= ({"dw_image_rows"} if WGRAD_ROWS else set()) | {"dw_image_quads"}
    taken = {path for _, *paths in SHAPES for path in paths} | wgrad
    assert taken == depthwise, depthwise ^ taken


@pytest.fixture
def threads(dsp, request):
    dsp.hvx_threads = request.param
    yield request.param
    dsp.hvx_threads = 4


# a share per image (forward, backward data) or per 4 images (weight gradient): 7 images over
# 1-4 threads leave ragged shares, and the weight gradient's partial sums joined in order;
# the weight gradient of 2 x 2 images shares 128-channel blocks (576: 5 over 1-4 threads);
# the pixel quads' last block of a ragged C > 128 overlaps the one before unless accumulating;
# the image rows (weight gradient) on whole and unaligned quads (C = 144, 40), a ragged batch
# (its last group filled in C, the others by the packet loop), odd rows at stride 2, no padding;
# the image pairs' packet fill (3 or more whole groups of aligned images, then a ragged one)
# the err pairs run a share's anchors as one loop (even H) or row by row (odd H)
# the quads' packet rows (dw_quad_packets) over several images a pass, and at pad 2
# the err pairs' rows of 96 channels in packets (dw_err_packets; accumulating: the err pairs)
# the err pairs at 144 channels in two passes (dw_err_144; accumulating: the err pairs): err rows
# of 3 (the shortest), chunks of 85 anchor rows that start and end mid-image (120 x 6 at 1-3
# threads), one anchor row an image (its bottom the zeros)
# the column triples' last group of a ragged C (150: channels 118..149) in packets, even width;
# at stride 1 a last block of two groups (192: 128..191) in packets, rows of 3 and 4 columns
@pytest.mark.parametrize("threads", [1, 2, 3, 4], indirect=True)
@pytest.mark.parametrize(
    "shape",
    [
        (7, 6, 6, 64, 3, 3, 1, 1),
        (7, 7, 5, 60, 3, 3, 2, 1),
        (9, 3, 3, 33, 3, 3, 1, 0),
        (7, 2, 2, 160, 3, 3, 1, 1),
        (7, 4, 4, 100, 3, 3, 2, 1),
        (7, 9, 9, 96, 3, 3, 2, 1),
        (5, 11, 11, 144, 3, 3, 2, 1),
        (9, 2, 2, 576, 3, 3, 2, 1),
        (7, 8, 8, 144, 3, 3, 2, 1),
        (7, 2, 2, 200, 3, 3, 1, 1),
        (5, 3, 3, 150, 5, 5, 2, 2),
        (7, 7, 9, 150, 3, 3, 2, 1),
        (7, 8, 6, 96, 3, 3, 2, 1),
        (7, 1, 1, 200, 3, 3, 1, 1),
        (7, 5, 4, 192, 3, 3, 1, 1),
        (5, 4, 4, 128, 5, 5, 1, 2),
        (7, 3, 5, 150, 3, 3, 1, 1),
        (7, 4, 4, 192, 3, 3, 1, 1),
        (9, 8, 8, 144, 3, 3, 1, 1),
        (6, 4, 6, 64, 3, 3, 1, 0),
        (5, 6, 8, 40, 3, 3, 1, 1),
        (9, 8, 8, 96, 3, 3, 2, 1),
        (5, 7, 8, 144, 3, 3, 2, 1),
        (7, 4, 4, 192, 3, 3, 2, 1),
        (5, 4, 8, 32, 5, 5, 1, 2),
        (14, 2, 2, 256, 3, 3, 1, 1),
        (13, 1, 1, 128, 3, 3, 1, 1),
        (7, 8, 6, 144, 3, 3, 2, 1),
        (5, 7, 4, 160, 3, 3, 2, 1),
        (7, 1, 1, 160, 3, 3, 1, 1),
        (7, 4, 8, 192, 3, 3, 2, 1),
        (5, 11, 12, 96, 3, 3, 2, 1),
        (7, 12, 12, 160, 3, 3, 2, 1),
        (5, 16, 16, 32, 3, 3, 1, 1),
        (5, 5, 8, 16, 3, 3, 1, 2),
        (5, 16, 16, 96, 3, 3, 2, 1),
        (6, 9, 6, 96, 3, 3, 2, 1),
        (7, 1, 10, 96, 3, 3, 2, 1),
        (5, 6, 8, 150, 3, 3, 2, 1),
        (6, 3, 3, 192, 3, 3, 1, 1),
        (3, 120, 6, 144, 3, 3, 2, 1),
        (7, 2, 10, 144, 3, 3, 2, 1),
    ],
    ids=[
        "flat",
        "blocks",
        "ragged-9",
        "pixels",
        "pixels-s2",
        "quads-s2",
        "quads-s2-ragged",
        "pairs-s2",
        "pixels-s2-overlap",
        "sources-overlap",
        "pixels-k5-overlap",
        "triples-ragged",
        "triples-96",
        "one-pixel-centre",
        "quads-rows-one-run",
        "flat-rows-one-run",
        "triples-s1-ragged",
        "triples-s1-192",
        "rows-s1-ragged",
        "rows-s1-pad0",
        "rows-s1-c40",
        "rows-s2",
        "rows-s2-odd",
        "rows-s2-192",
        "quads-k5-fill",
        "pairs-fill",
        "pairs-fill-1x1",
        "err-pairs-144",
        "err-pairs-odd-h",
        "err-one",
        "err-pairs-flat",
        "err-pairs-rows",
        "err-pairs-flat-rows-of-6",
        "quad-packets-16x16x32",
        "quad-packets-pad2",
        "err-packets-16x16x96",
        "err-packets-odd-h",
        "err-packets-one-row",
        "triples-tail-group-rows",
        "triples-s1-two-groups-rows",
        "err-144-chunks",
        "err-144-one-row",
    ],
)
def test_dwconv_every_thread_count(dsp, rng, threads, shape):
    x, w, err, stride, pad = args(rng, shape)
    start = rng.integers(
        -(2**20),
        2**20,
        (x.shape[0],) + out_hw(*x.shape[1:3], *w.shape[1:3], stride, pad) + (x.shape[3],),
        dtype=np.int32,
    )
    same(dsp.dwconv2d_s8(x, w, stride, pad), ref.dwconv2d_s8(x, w, stride, pad))
    same(dsp.accumulate(start, "dwconv2d_s8", x, w, stride, pad), start + ref.dwconv2d_s8(x, w, stride, pad))
    dx = ref.dwconv2d_bwd_data_s8(err, w, stride, pad, x.shape[1:3])
    same(dsp.dwconv2d_bwd_data_s8(err, w, stride, pad, x.shape[1:3]), dx)
    start = rng.integers(-(2**20), 2**20, dx.shape, dtype=np.int32)
    same(dsp.accumulate(start, "dwconv2d_bwd_data_s8", err, w, stride, pad, x.shape[1:3]), start + dx)
    dw = ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3])
    same(dsp.dwconv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]), dw)
    start = rng.integers(-(2**20), 2**20, dw.shape, dtype=np.int32)
    same(dsp.accumulate(start, "dwconv2d_bwd_weight_s8", err, x, stride, pad, w.shape[1:3]), start + dw)


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("shift", [None, 3, 30])
def test_dwconv_requant_fuses_niti_epilogue(dsp, rng, mode, shift):
    """The product and REQUANT in one batch: estimated shift, a given one, and a given one too
    small (the estimate wins, as base.requantize says)."""
    key = RngKey(seed=5, step=2, tensor_id=9, offset=1)
    x, w, err, stride, pad = args(rng, (3, 6, 6, 48, 3, 3, 1, 1))
    (q, used), (want_q, want_used) = (
        dsp.dwconv2d_requant_s8(x, w, stride, pad, mode, key, shift),
        ref.dwconv2d_requant_s8(x, w, stride, pad, mode, key, shift),
    )
    same(q, want_q)
    assert used == want_used
    for shape in ((2, 7, 7, 40, 3, 3, 2, 1), (2, 4, 4, 160, 3, 3, 2, 1)):  # the classes; the pixel quads
        x, w, err, stride, pad = args(rng, shape)
        (q, used), (want_q, want_used) = (
            dsp.dwconv2d_bwd_data_requant_s8(err, w, stride, pad, x.shape[1:3], mode, key, shift),
            ref.dwconv2d_bwd_data_requant_s8(err, w, stride, pad, x.shape[1:3], mode, key, shift),
        )
        same(q, want_q)
        assert used == want_used


def test_dwconv_extremes(dsp):
    """-128 everywhere: each product 16384, kept in a halfword of its own until the words."""
    for stride in (1, 2):
        x = np.full((2, 6, 6, 160), -128, np.int8)
        w = np.full((160, 3, 3, 1), -128, np.int8)
        oh, ow = out_hw(6, 6, 3, 3, stride, 1)
        err = np.full((2, oh, ow, 160), -128, np.int8)
        same(dsp.dwconv2d_s8(x, w, stride, 1), ref.dwconv2d_s8(x, w, stride, 1))
        same(dsp.dwconv2d_bwd_data_s8(err, w, stride, 1, (6, 6)), ref.dwconv2d_bwd_data_s8(err, w, stride, 1, (6, 6)))
        same(
            dsp.dwconv2d_bwd_weight_s8(err, x, stride, 1, (3, 3)), ref.dwconv2d_bwd_weight_s8(err, x, stride, 1, (3, 3))
        )


@pytest.mark.parametrize("shape", [(3, 8, 8, 160, 3, 3, 1, 1), (3, 8, 8, 160, 3, 3, 2, 1)], ids=["s1", "s2"])
def test_dwconv_image_rows_extremes(dsp, shape):
    """-128 everywhere on dw_image_rows: every vrmpy word 4 x 16384, the sums kept exact."""
    n, h, w, c, kh, kw, stride, pad = shape
    oh, ow = out_hw(h, w, kh, kw, stride, pad)
    x, err = np.full((n, h, w, c), -128, np.int8), np.full((n, oh, ow, c), -128, np.int8)
    same(
        dsp.dwconv2d_bwd_weight_s8(err, x, stride, pad, (kh, kw)),
        ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, (kh, kw)),
    )
    assert dsp.last_paths == [("dwconv2d_bwd_weight_s8", "dw_image_rows")]


@pytest.mark.parametrize(
    "shape", [(2, 3, 3, 36, 33), (3, 4, 5, 40, 36), (1, 1, 1, 64, 40)], ids=["33-ragged", "36", "one-pixel"]
)
def test_pointwise_is_a_gemm_without_im2col(dsp, rng, shape):
    """A 1 x 1 conv (stride 1, no padding, C % 4 == 0; O % 4 == 0 for backward data) runs the
    GEMM core on the pixels as they lie ("pointwise"), bit-exact, accumulating too."""
    n, h, w, c, o = shape
    x, wt, err = s8(rng, n, h, w, c), s8(rng, o, 1, 1, c), s8(rng, n, h, w, o)
    want = ref.conv2d_s8(x, wt, 1, 0)
    same(dsp.conv2d_s8(x, wt, 1, 0), want)
    assert dsp.last_paths == [("conv2d_s8", "pointwise")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_s8", x, wt, 1, 0), start + want)
    same(dsp.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w)), ref.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w)))
    assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise" if o % 4 == 0 else "gather_gemm")]


@pytest.mark.parametrize("threads", [1, 4], indirect=True)
@pytest.mark.parametrize(
    "shape", [(3, 7, 5, 36, 20, 2), (2, 8, 8, 64, 32, 2), (2, 7, 9, 40, 12, 3)], ids=["odd-hw", "even", "stride-3"]
)
def test_strided_pointwise_backward_data_lands_in_place(dsp, rng, threads, shape):
    """Backward data of a 1 x 1 conv of stride s (O % 4 == 0): err's rows times wT written s*C
    words apart into a zeroed dx ("pointwise_strided"), no gather and no col2im, accumulating
    too (the rows between left as they were); the forward keeps the chunked im2col rows."""
    n, h, w, c, o, stride = shape
    x, wt = s8(rng, n, h, w, c), s8(rng, o, 1, 1, c)
    oh, ow = out_hw(h, w, 1, 1, stride, 0)
    err = s8(rng, n, oh, ow, o)
    want = ref.conv2d_bwd_data_s8(err, wt, stride, 0, (h, w))
    same(dsp.conv2d_bwd_data_s8(err, wt, stride, 0, (h, w)), want)
    assert dsp.last_paths == [("conv2d_bwd_data_s8", "pointwise_strided")]
    start = rng.integers(-(2**20), 2**20, want.shape, dtype=np.int32)
    same(dsp.accumulate(start, "conv2d_bwd_data_s8", err, wt, stride, 0, (h, w)), start + want)
    same(dsp.conv2d_s8(x, wt, stride, 0), ref.conv2d_s8(x, wt, stride, 0))
    assert dsp.last_paths == [("conv2d_s8", "im2col_gemm")]
