// MLS's (and AFP's 16-bit errors') exact int16 products:
// - matmul_s16_s64: int16 op(a) x b, op(a) = a[M,K] or a[K,M] transposed, b[K,N], summed
//   exactly in int64 (a layer's products need no transposed copies: the
//   weight-gradient reduction runs down the rows of both operands). MLS's operands are
//   int8 elements with a power-of-two scale per group of channels (Zhong et al. 2022);
//   stored with the group shift applied (q * 2**(kmax - k), at most 127 * 2**7 for
//   group_bits <= 3), the groups' partial sums combine exactly inside one integer dot
//   product, whatever the thread count. AFP's 16-bit errors take the same kernel.
// (FP8's chunked-FP16 products are gemm_fp16_chunked.h.)
#pragma once
#include <cstdint>

#include "conv_cols.h"
#include "scratch.h"

namespace dsptrain {

void matmul_s16_s64(const int16_t* a, bool a_transposed, const int16_t* b, int m, int n, int k, int64_t* c);

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

// The buffers each product keeps on its calling thread (grow-only, emptied by
// release_scratch()), by name, for these sizes: what the memory plan counts (scratch.h).
ScratchList matmul_s16_scratch(int m, int n, int k, bool a_transposed);
ScratchList conv_bwd_data_s16_scratch(const Col2imShape& s, int o);
ScratchList conv_s16_scratch(bool weight_gradient, const Col2imShape& s, int o);

}  // namespace dsptrain
