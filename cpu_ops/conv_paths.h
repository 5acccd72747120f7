// Which path each pass of an int8 convolution takes for a shape on the active ISA: pure
// functions of the shape, asked by conv.cpp (which runs the paths) and conv_algorithm
// (conv.h, which names them for tests). The thresholds and their measurements live in
// conv_paths.cpp.
#pragma once
#include "conv_shapes.h"

namespace dsptrain {

// 1x1, stride 1, no padding: x is the GEMM's A as it is.
bool is_1x1(const ConvShape& s);
// 1x1, stride > 1, no padding (ResNet's downsampling shortcuts): the output pixels are every
// s-th pixel of every s-th row of x, so the products are GEMMs on those pixels in place.
bool is_1x1_strided(const ConvShape& s);

// Whether the GEMM of this depth runs on a kernel that reads A in place (gemm_rows).
bool reads_a_in_place(int depth);

// Three channels (an RGB input) widened to four, so each tap row is whole groups of 4 and
// the implicit GEMM applies (fwd_implicit_c4).
constexpr int kWideChannels = 4;

// The forward: pixel panels (conv_panels.cpp), on conv_lanes when they fit; the implicit
// GEMM (no im2col copy), on 3 channels widened to 4, with the border's taps trimmed.
bool fwd_panels(const ConvShape& s);
bool fwd_lanes(const ConvShape& s);
bool fwd_implicit(const ConvShape& s);
bool fwd_implicit_c4(const ConvShape& s);
bool fwd_trimmed(const ConvShape& s);

// The backward data, likewise; bwd_broadcast: the error broadcast into dx rows (conv_lanes.cpp).
bool bwd_broadcast(const ConvShape& s);
bool bwd_data_panels(const ConvShape& s);
bool bwd_data_lanes(const ConvShape& s);
bool bwd_data_implicit(const ConvShape& s);
bool bwd_data_trimmed(const ConvShape& s);
// Whether the int32 transposed convolution packs its B from w directly (else from a
// transposed copy): whenever it runs im2col + GEMM and the packing's offsets fit.
bool bwd_data_packs_w(const ConvShape& s, bool panels);

// Where the forward's padded source holds x, and the backward data's padded error err.
SourceWindow fwd_window(const ConvShape& s);
SourceWindow bwd_data_window(const ConvShape& s);

// The weight gradient's algorithm, asked once: conv_algorithm names it, conv2d_bwd_weight
// runs it. The int32-only ones (every one but the panels and im2col) never come up for an
// int64 depth: each asks !acc_is_int64 of the pixel count, the depth the binding asks too.
enum class WgradPath { kStrided1x1, kPlanes, kStreamTrimmed, kStream, kIm2colGemm, kLanes, kOutputLanes, kPanels };
WgradPath wgrad_path(const ConvShape& s);

}  // namespace dsptrain
