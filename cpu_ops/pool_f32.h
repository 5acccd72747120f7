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

}  // namespace dsptrain
