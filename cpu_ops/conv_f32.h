// The FP32 recipe's convolutions (NHWC activations, OHWC weights) on the float32 GEMM
// (gemm_f32.h): each image's patches are gathered a block of output pixels at a time
// into a per-thread buffer that stays in L2, multiplied, and (backward data) scattered
// back. Images are split over the pool; the weight gradient sums fixed groups of images
// and adds the groups in order, so every pass gives the same floats at any thread count.
#pragma once

#include "conv.h"
#include "scratch.h"

namespace dsptrain {

// y[N,OH,OW,O] = x[N,H,W,C] * w[O,KH,KW,C].
void conv2d_f32(const float* x, const float* w, const ConvShape& s, float* y);

// dx[N,H,W,C] from err[N,OH,OW,O] and w.
void conv2d_bwd_data_f32(const float* err, const float* w, const ConvShape& s, float* dx);

// dw[O,KH,KW,C] from err[N,OH,OW,O] and x.
void conv2d_bwd_weight_f32(const float* err, const float* x, const ConvShape& s, float* dw);

// The per-thread buffers one pass keeps (a block of patches, a padded image), by name:
// what the memory plan counts (scratch.h).
ScratchList conv_f32_scratch(ConvPass pass, const ConvShape& s);

}  // namespace dsptrain
