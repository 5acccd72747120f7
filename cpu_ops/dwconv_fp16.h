// FP8's depthwise convolution (algorithms/fp8.py, Wang et al., NeurIPS 2018): operands hold FP8
// or FP16 values as float32; every product is rounded to FP16 and a dot product is summed by
// the recipe's chunk rule over its own terms (float_ops.matmul_fp16_chunked's rule):
// - forward: an output's KH*KW taps in (kh, kw) order, cut into runs of `chunk`;
// - weight gradient: a channel's tap over the N*OH*OW output pixels in order, runs of `chunk`
//   (the last run padded with 0 * 0 products, as the reference pads it);
// - backward data: an input pixel's (at most KH*KW) FP16 products added exactly in double (they
//   are multiples of 2**-24 below 2**20), rounded to FP16 once.
// ops_ref's judge: backends/ref_fp8_depthwise.py. One thread sums each element in a fixed order.
#pragma once
#include "dwconv.h"

namespace dsptrain {

void dwconv2d_fwd_fp16_chunked(const float* x, const float* w, const DwShape& s, int chunk, bool fp16_adds, float* y);
void dwconv2d_bwd_data_fp16(const float* err, const float* w, const DwShape& s, float* dx);
void dwconv2d_bwd_weight_fp16_chunked(const float* err, const float* x, const DwShape& s, int chunk, bool fp16_adds,
                                      float* dw);

}  // namespace dsptrain
