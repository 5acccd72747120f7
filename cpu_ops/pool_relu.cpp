// Channels are innermost (NHWC), so every loop here runs over contiguous channels
// and vectorises; work is split over images (pooling) or chunks (ReLU).
#include "pool_relu.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "rounding.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr size_t kChunk = 1 << 16;

template <typename F>
void for_chunks(size_t n, F body) {
  parallel_for(static_cast<int>((n + kChunk - 1) / kChunk), [&](int t) {
    const size_t b = static_cast<size_t>(t) * kChunk;
    body(b, std::min(n, b + kChunk));
  });
}

}  // namespace

void relu_s8(const int8_t* x, size_t n, int8_t* y) {
  for_chunks(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) y[i] = x[i] > 0 ? x[i] : 0;
  });
}

void relu_bwd_s8(const int8_t* err, const int8_t* y, size_t n, int8_t* dx) {
  for_chunks(n, [&](size_t b, size_t e) {
    // Both loads unconditional and a mask instead of a branch, so the loop vectorises.
    for (size_t i = b; i < e; ++i) dx[i] = static_cast<int8_t>(err[i] & -static_cast<int8_t>(y[i] > 0));
  });
}

void maxpool_s8(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax) {
  const int oh = s.oh(), ow = s.ow(), c = s.c;
  parallel_for(s.n * oh, [&](int row) {
    const int b = row / oh, oy = row % oh;
    for (int ox = 0; ox < ow; ++ox) {
      const ptrdiff_t out = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
      int8_t* best = y + out;
      uint8_t* idx = argmax + out;
      for (int i = 0; i < s.kernel; ++i) {
        for (int j = 0; j < s.kernel; ++j) {
          const int8_t* v = x + ((static_cast<ptrdiff_t>(b) * s.h + oy * s.stride + i) * s.w + ox * s.stride + j) * c;
          const uint8_t tap = static_cast<uint8_t>(i * s.kernel + j);
          if (tap == 0) {
            for (int ch = 0; ch < c; ++ch) best[ch] = v[ch], idx[ch] = 0;
            continue;
          }
          for (int ch = 0; ch < c; ++ch) {  // strict '>' keeps the first maximum
            const bool more = v[ch] > best[ch];
            best[ch] = more ? v[ch] : best[ch];
            idx[ch] = more ? tap : idx[ch];
          }
        }
      }
    }
  });
}

void maxpool_bwd_s8(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx) {
  const int oh = s.oh(), ow = s.ow(), c = s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * c;
  // Where tap t of a window lands, relative to the window's corner (no division per element).
  ptrdiff_t tap_at[256];
  for (int t = 0; t < s.kernel * s.kernel; ++t)
    tap_at[t] = (static_cast<ptrdiff_t>(t / s.kernel) * s.w + t % s.kernel) * c;
  const bool disjoint = s.stride >= s.kernel;  // each input cell gets at most one error
  parallel_for(s.n, [&](int b) {
    int8_t* out = dx + b * image;
    if (disjoint) {
      std::memset(out, 0, image);
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          const ptrdiff_t at = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
          int8_t* corner = out + (static_cast<ptrdiff_t>(oy) * s.stride * s.w + ox * s.stride) * c;
          for (int ch = 0; ch < c; ++ch) corner[tap_at[argmax[at + ch]] + ch] = std::max<int8_t>(err[at + ch], -127);
        }
      return;
    }
    thread_local std::vector<int32_t> acc;
    acc.assign(image, 0);
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        const ptrdiff_t at = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
        int32_t* corner = acc.data() + (static_cast<ptrdiff_t>(oy) * s.stride * s.w + ox * s.stride) * c;
        for (int ch = 0; ch < c; ++ch) corner[tap_at[argmax[at + ch]] + ch] += err[at + ch];
      }
    }
    for (size_t i = 0; i < image; ++i) out[i] = clip_s8(acc[i]);
  });
}

}  // namespace dsptrain
