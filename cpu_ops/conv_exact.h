// MLS's (and AFP's 16-bit errors') exact int16 convolutions (conv_exact.cpp), on the exact
// int16 product's packing (gemm_exact.h).
#pragma once
#include <cstdint>

#include "conv_cols.h"
#include "scratch.h"

namespace dsptrain {

// A convolution's backward data on int16 operands, exact: dx[N,H,W,C] (int64) = col2im of
// err[N*OH*OW, O] @ w[O, KH*KW*C], one image at a time, so that the image's patch sums
// stay in the cache between the product and the scatter (the whole [N*OH*OW, KH*KW*C]
// int64 matrix is never written). Images split over the threads; integers, so the
// result is the same at any thread count.
void conv_bwd_data_s16_s64(const int16_t* err, const int16_t* w, const Col2imShape& s, int o, int64_t* dx);

// The forward and weight-gradient convolutions on int16 operands, exact, with each
// image's im2col patches built in a buffer that stays in the cache and used at once
// (the whole patch matrix, 2.5 MB for LeNet's conv1 at batch 64, is never written):
// y[N*OH*OW, O] = patches(x) @ w[O, KH*KW*C].T, dw[O, KH*KW*C] = err[N*OH*OW, O].T @
// patches(x) (per-task int64 partials added in task order). Same at any thread count.
void conv_fwd_s16_s64(const int16_t* x, const int16_t* w, const Col2imShape& s, int o, int64_t* y);
void conv_wgrad_s16_s64(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw);

// The buffers each convolution keeps on its calling thread (as matmul_s16_scratch).
ScratchList conv_bwd_data_s16_scratch(const Col2imShape& s, int o);
ScratchList conv_s16_scratch(bool weight_gradient, const Col2imShape& s, int o);

}  // namespace dsptrain
