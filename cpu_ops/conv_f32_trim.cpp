#include "conv_f32_trim.h"

#include <algorithm>
#include <cstddef>

namespace dsptrain {
namespace {

// Along one axis (input size `in`, `out` outputs, kernel `k`): tap t is live when some
// output i reads a real input, 0 <= i * stride + t - pad < in, i.e. from
// pad - (out - 1) * stride to in - 1 + pad.
void live_range(int in, int out, int k, int stride, int pad, int* lo, int* hi) {
  *lo = std::max(0, pad - (out - 1) * stride);
  *hi = std::min(k - 1, in - 1 + pad);
}

}  // namespace

bool live_taps(const ConvShape& s, LiveTaps* live) {
  int a0, a1, b0, b1;
  live_range(s.h, s.oh(), s.kh, s.stride, s.pad, &a0, &a1);
  live_range(s.w, s.ow(), s.kw, s.stride, s.pad, &b0, &b1);
  if (a1 < a0 || b1 < b0) return false;   // no live tap at all: not a shape the model has
  if (a0 == 0 && b0 == 0 && a1 == s.kh - 1 && b1 == s.kw - 1) return false;
  // output i reads input i * stride + t - pad = i * stride + (t - a0) - (pad - a0): the
  // live taps are a convolution with padding pad - a0 in front, if both axes agree on it
  // and that padding gives the same number of outputs
  if (s.pad - a0 != s.pad - b0) return false;
  const ConvShape t{s.n, s.h, s.w, s.c, s.o, a1 - a0 + 1, b1 - b0 + 1, s.stride, s.pad - a0};
  if (t.oh() != s.oh() || t.ow() != s.ow()) return false;
  *live = {a0, b0, t};
  return true;
}

std::vector<float> slice_live_taps(const float* w, const ConvShape& s, const LiveTaps& live) {
  const ConvShape& t = live.s;
  std::vector<float> out(static_cast<size_t>(s.o) * t.kh * t.kw * s.c);
  float* dst = out.data();
  for (int o = 0; o < s.o; ++o)
    for (int a = 0; a < t.kh; ++a, dst += static_cast<size_t>(t.kw) * s.c)
      std::copy_n(w + ((static_cast<size_t>(o) * s.kh + live.a0 + a) * s.kw + live.b0) * s.c,
                  static_cast<size_t>(t.kw) * s.c, dst);
  return out;
}

void place_live_taps(const float* dw_live, const ConvShape& s, const LiveTaps& live, float* dw) {
  const ConvShape& t = live.s;
  std::fill(dw, dw + static_cast<size_t>(s.o) * s.kh * s.kw * s.c, 0.0f);
  for (int o = 0; o < s.o; ++o)
    for (int a = 0; a < t.kh; ++a, dw_live += static_cast<size_t>(t.kw) * s.c)
      std::copy_n(dw_live, static_cast<size_t>(t.kw) * s.c,
                  dw + ((static_cast<size_t>(o) * s.kh + live.a0 + a) * s.kw + live.b0) * s.c);
}

}  // namespace dsptrain
