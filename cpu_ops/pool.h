// Pooling int8 kernels (NHWC): max-pool with the argmax of the first maximum, and its
// backward (scatter-add, clip to +-127).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

struct PoolShape {
  int n, h, w, c, kernel, stride;
  int oh() const { return (h - kernel) / stride + 1; }
  int ow() const { return (w - kernel) / stride + 1; }
};

// argmax[...] = kh * kernel + kw of the first maximum in each window.
void maxpool_s8(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax);
// dx[N,H,W,C] (H, W = s.h, s.w) from err[N,OH,OW,C].
void maxpool_bwd_s8(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx);

}  // namespace dsptrain
