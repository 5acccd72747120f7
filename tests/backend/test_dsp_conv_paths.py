"""Which path each dense convolution pass takes on the emulated DSP, pinned by shape.

dsp_kernels/conv.c picks a kernel per pass from the shape alone (the `*_fits` functions of
conv.h) and reports it in the descriptor's result_shift (enum dspt_path in ops.h), which
DspBackend.last_paths names. A shape that stops taking its kernel -- a condition changed,
a kernel that no longer fits its scratch -- fails here, not only as a slower bench row;
every pass is checked against ops_ref bit for bit as well. The table is the one in
docs/ARCHITECTURE.md ("Convolution paths and what picks them"). Needs qemu-hexagon,
clang-16 and lld-16.
"""

import numpy as np
import pytest
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.numerics import RngKey

from .cases import same

ref = RefBackend()

# name: (N, H, W, C, O, KH, KW, stride, pad), then the path of forward, backward data,
# weight gradient
PATHS = {
    # forward: one channel, 4-7 outputs (LeNet's conv1) -> conv_taps.c; its weight gradient
    # from planes (outputs are >= 55 % of the padded grid); backward data of 6 err
    # channels on the grid
    "lenet-conv1": ((2, 28, 28, 1, 6, 5, 5, 1, 2), "conv_taps", "conv_grid", "planar"),
    # one channel, 8 outputs or 1, or 16 taps a row (past conv_taps' 13): conv_lanes.c
    "1ch-8out": ((2, 9, 9, 1, 8, 3, 3, 1, 1), "conv_lanes", "conv_grid", "planar"),
    "1ch-1out": ((3, 7, 5, 1, 1, 3, 3, 1, 1), "conv_lanes", "gather_gemm", "planar"),
    "1ch-16taps": ((1, 20, 20, 1, 6, 16, 16, 1, 0), "conv_lanes", "conv_grid", "wgrad_gemm"),
    # 2-16 channels, <= 32 outputs (LeNet's conv2): the grid both ways; its weight gradient
    # on the GEMM (outputs 100 of 196 grid positions)
    "lenet-conv2": ((2, 14, 14, 6, 16, 5, 5, 1, 0), "conv_grid", "conv_grid", "wgrad_gemm"),
    # 2-4 channels, many outputs (VGG's conv1): the padded image in place; backward data
    # through col2im (C < 32, O % 4 == 0, KW * C <= 32)
    "vgg-conv1": ((2, 12, 12, 3, 64, 3, 3, 1, 1), "conv_padded", "col2im", "wgrad_gemm"),
    # a middle conv: im2col rows, backward data as the flipped forward conv of err
    "vgg-conv": ((2, 6, 6, 40, 36, 3, 3, 1, 1), "im2col_gemm", "flipped_gemm", "wgrad_gemm"),
    # stride 2, many channels: the gather for backward data
    "stride2": ((2, 7, 6, 33, 20, 3, 3, 2, 1), "im2col_gemm", "gather_gemm", "wgrad_gemm"),
    # O % 4 != 0 rules out the flipped conv and col2im
    "ragged-out": ((1, 5, 5, 40, 33, 3, 3, 1, 0), "im2col_gemm", "gather_gemm", "wgrad_gemm"),
    # pointwise (1 x 1, stride 1, no padding, C % 4 == 0; O % 4 == 0 backward): the GEMM on
    # the pixels as they lie
    # the pointwise weight gradient whose positions fit one pass splits dw's blocks across the
    # threads (conv_pointwise.c), more positions than that reduce through wgrad_gemm
    "pointwise": ((2, 5, 5, 36, 64, 1, 1, 1, 0), "pointwise", "pointwise", "wgrad_outputs"),
    "pointwise-ragged-c": ((2, 5, 5, 34, 40, 1, 1, 1, 0), "im2col_gemm", "pointwise", "wgrad_outputs"),
    "pointwise-many-positions": ((1, 33, 32, 128, 128, 1, 1, 1, 0), "pointwise", "pointwise", "wgrad_gemm"),
    # backward data of a pointwise conv stays the GEMM with few err channels (not conv_grid)
    # and few dx channels (not col2im)
    "pointwise-few-channels": ((2, 6, 5, 12, 16, 1, 1, 1, 0), "conv_grid", "pointwise", "wgrad_outputs"),
    # 16 output channels over a multiple of 32 pixels: the pixels in the vrmpy lanes, forward
    # (and backward data onto 16 dx channels)
    "pointwise-16-out": ((2, 4, 8, 32, 16, 1, 1, 1, 0), "pointwise_pixels", "pointwise", "wgrad_outputs"),
    "pointwise-16-in": ((1, 8, 4, 16, 40, 1, 1, 1, 0), "pointwise", "pointwise_pixels", "wgrad_outputs"),
    # a ResNet shortcut (1 x 1, stride 2): backward data lands in place, s*C words apart
    "pointwise-stride2": ((2, 8, 7, 32, 64, 1, 1, 2, 0), "im2col_gemm", "pointwise_strided", "wgrad_gemm"),
    # few channels, few outputs, stride 1: planes for the weight gradient
    "planar": ((1, 8, 8, 3, 6, 3, 3, 1, 1), "conv_grid", "conv_grid", "planar"),
    "planar-stride2": ((1, 9, 9, 3, 8, 3, 3, 2, 1), "im2col_gemm", "col2im", "wgrad_gemm"),
}


def s8(rng, *shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def operands(rng, shape):
    n, h, w, c, o, kh, kw, stride, pad = shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    return s8(rng, n, h, w, c), s8(rng, o, kh, kw, c), s8(rng, n, oh, ow, o), stride, pad


@pytest.mark.parametrize("name", PATHS)
def test_each_pass_takes_its_path(dsp, rng, name):
    shape, fwd, bwd_data, bwd_weight = PATHS[name]
    x, w, err, stride, pad = operands(rng, shape)
    in_hw, kernel = x.shape[1:3], w.shape[1:3]
    same(dsp.conv2d_s8(x, w, stride, pad), ref.conv2d_s8(x, w, stride, pad))
    assert dsp.last_paths == [("conv2d_s8", fwd)]
    same(dsp.conv2d_bwd_data_s8(err, w, stride, pad, in_hw), ref.conv2d_bwd_data_s8(err, w, stride, pad, in_hw))
    assert dsp.last_paths == [("conv2d_bwd_data_s8", bwd_data)]
    same(dsp.conv2d_bwd_weight_s8(err, x, stride, pad, kernel), ref.conv2d_bwd_weight_s8(err, x, stride, pad, kernel))
    assert dsp.last_paths == [("conv2d_bwd_weight_s8", bwd_weight)]


def test_every_dense_path_is_pinned():
    """Each dense path of enum dspt_path has a shape above that takes it."""
    from dsptrain.backends.dsp_abi import PATH_NAMES

    dense = {name for name in PATH_NAMES.values() if name != "none" and not name.startswith("dw_")}
    taken = {path for _, *paths in PATHS.values() for path in paths}
    assert taken == dense, dense ^ taken


def test_requantizing_hooks_report_the_product_path(dsp, rng):
    """conv2d_requant_s8 runs the product then REQUANT: last_paths names the product's path."""
    shape, fwd, bwd_data, _ = PATHS["vgg-conv1"]
    x, w, err, stride, pad = operands(rng, shape)
    key = RngKey(seed=3, step=1, tensor_id=2)
    (q, e), (want_q, want_e) = (b.conv2d_requant_s8(x, w, stride, pad, "sto", key) for b in (dsp, ref))
    same(q, want_q)
    assert e == want_e and dsp.last_paths == [("conv2d_s8", fwd)]
    in_hw = x.shape[1:3]
    (q, e), (want_q, want_e) = (
        b.conv2d_bwd_data_requant_s8(err, w, stride, pad, in_hw, "psto", key) for b in (dsp, ref)
    )
    same(q, want_q)
    assert e == want_e and dsp.last_paths == [("conv2d_bwd_data_s8", bwd_data)]
