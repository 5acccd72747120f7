// Convolutions on top of the GEMM (NHWC activations, OHWC weights), im2col style:
// forward, the error backward as a stride-1 convolution of the (zero-dilated) error
// with the flipped, transposed weights, and the weight gradient as cols^T x err.
// Output element types follow numerics.acc_dtype of the reduction depth (int32/int64).
#pragma once
#include <cstdint>

#include "conv_shapes.h"

namespace dsptrain {

struct FusedRequant;  // requant.h

// Which algorithm a pass runs for shape `s` on the active ISA (for tests and debugging):
// "gemm_1x1", "gemm_1x1_strided" (1x1, stride > 1: the strided pixels in place),
// "im2col_gemm", "implicit_gemm" (no im2col copy: gemm_rows),
// "implicit_gemm_c4" (the same on 3 channels widened to 4), "pixel_panels", "wgrad_panels" or
// "wgrad_planes" (few source channels: the taps as the GEMM's rows), and the lane kernels'.
enum class ConvPass { kForward, kBackwardData, kBackwardWeight };
const char* conv_algorithm(ConvPass pass, const ConvShape& s);

// Whether the int32 im2col weight gradient packs its B straight from the padded source
// (conv.cpp; else through an im2col copy).
bool wgrad_packs_source(const ConvShape& s);

// y[N,OH,OW,O] = x * w. T is int32_t or int64_t. `absmax`, if given, receives max |y|
// where the GEMM took it on the way (int32 im2col paths), else -1 (not taken). `fused`
// (int32, with absmax): the GEMM paths round y into fused->out as they go (requant.h).
template <typename T>
void conv2d_fwd(const int8_t* x, const int8_t* w, const ConvShape& s, T* y, int64_t* absmax = nullptr,
                FusedRequant* fused = nullptr);

// dx[N,H,W,C] from err[N,OH,OW,O] and w; `absmax` and `fused` as for conv2d_fwd.
template <typename T>
void conv2d_bwd_data(const int8_t* err, const int8_t* w, const ConvShape& s, T* dx, int64_t* absmax = nullptr,
                     FusedRequant* fused = nullptr);

// dw[O,KH,KW,C] from err[N,OH,OW,O] and x.
template <typename T>
void conv2d_bwd_weight(const int8_t* err, const int8_t* x, const ConvShape& s, T* dw);

}  // namespace dsptrain
