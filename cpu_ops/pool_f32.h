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

}  // namespace dsptrain
