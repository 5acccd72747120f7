// Float max-pool with padding (and ceil_mode's partial windows) and its backward, without
// the -inf padded copy of the input: a window's cells outside the image read as -inf.
// The judge is float_ops.maxpool_pad_f32 / maxpool_pad_bwd_f32 (maxpool_f32 on that copy):
// argmax kh * kernel + kw of the first maximum (a NaN counts as the maximum, as NumPy's
// argmax), the backward adding in the order (kh, kw) as NumPy does, so bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

struct PadPoolShape {
  size_t n, h, w, c;      // the input
  size_t oh, ow;          // the output (a padded or ceil_mode pool's own count)
  int kernel, stride, pad;
};

void maxpool_pad_f32(const float* x, const PadPoolShape& s, float* y, uint8_t* argmax);
// dx (n, h, w, c) zeroed here, then each window's error added at its argmax cell.
void maxpool_pad_bwd_f32(const float* err, const uint8_t* argmax, const PadPoolShape& s, float* dx);

}  // namespace dsptrain
