// int8 max-pool and its backward over windows that tile the image, by byte permutes
// (pool_lanes.cpp; AVX-512 VBMI). Internal to pool.cpp, which falls back to its own walk.
#pragma once
#include <cstdint>

#include "pool.h"

namespace dsptrain {

// Whether the permute kernels run `s` here: stride == kernel (2..8), every input cell in
// exactly one window, at most 64 channels with each 64-byte piece's source in reach, and
// a CPU with AVX-512 VBMI.
bool pool_lanes_fit(const PoolShape& s);

// As maxpool_s8 / maxpool_bwd_s8 (bit for bit), for shapes pool_lanes_fit accepts.
void maxpool_lanes(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax);
void maxpool_bwd_lanes(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx);

}  // namespace dsptrain
