// Float 2x2 max-pool, stride 2, of up to 16 channels on AVX-512 (pool_f32_pairs.cpp): the
// same results as pool.cpp's loops, which call these first. false: not this case (another
// window, more channels, an odd height or width, no AVX-512), nothing written.
#pragma once
#include <cstdint>

#include "pool.h"

namespace dsptrain {

// relu: each tap through relu_f32's select first (relu_maxpool_f32); gate: the pooled
// values, each window's error taken where gate > 0, else +0.0 (relu_maxpool_bwd_f32).
bool maxpool_f32_pairs(const float* x, const PoolShape& s, float* y, uint8_t* argmax, bool relu = false);
bool maxpool_bwd_f32_pairs(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx,
                           const float* gate = nullptr);

}  // namespace dsptrain
