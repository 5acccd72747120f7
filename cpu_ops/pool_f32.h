// Float max-pool (NHWC, no padding) and its backward, for the emulated recipes and FP32:
// the same argmax convention as the int8 kernels (pool.h): kh * kernel + kw of the first
// maximum of each window; the backward adds in the order (kh, kw) as NumPy does. Both
// types are one template in pool.cpp.
#pragma once
#include <cstdint>

#include "pool.h"

namespace dsptrain {

void maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax);
void maxpool_bwd_f32(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx);

// ReLU then max-pool in one pass: y and argmax as maxpool_f32(relu_f32(x)). Its backward
// from the pooled y: maxpool_bwd_f32(relu_bwd_f32(err, y), argmax), which equals
// relu_bwd_f32(maxpool_bwd_f32(err, argmax), relu_f32(x)) (a window's error lands on its
// argmax cell, whose ReLU output is y).
void relu_maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax);
void relu_maxpool_bwd_f32(const float* err, const float* y, const uint8_t* argmax, const PoolShape& s, float* dx);

// Octo's compensation backward (eltwise_f32.h compensation_bwd) of the input error of a
// max-pool whose windows do not overlap (stride >= kernel), without that full-size error:
// it is made a chunk of rows at a time as maxpool_bwd_f32 (gate null) or
// relu_maxpool_bwd_f32 (gate: the pooled y) writes it, so dz, d_scale and d_shift are
// those of the two ops bit for bit. err, gate, argmax: the pooled shape; z, dz: s's input.
void pool_compensation_bwd(const float* err, const float* gate, const uint8_t* argmax, const PoolShape& s,
                           const float* z, const float* scale, float* dz, float* d_scale, float* d_shift);

}  // namespace dsptrain
