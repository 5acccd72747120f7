// Padded float max-pool (pool_pad_f32.h): an image's output rows split across the pool.
#include "pool_pad_f32.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "thread_pool.h"

namespace dsptrain {

namespace {
// a window's row or column `tap` of output `o`: inside the image, or -1
inline long cell(size_t o, int tap, const PadPoolShape& s, size_t size) {
  const long at = long(o) * s.stride - s.pad + tap;
  return (at >= 0 && at < long(size)) ? at : -1;
}
}  // namespace

void maxpool_pad_f32(const float* x, const PadPoolShape& s, float* y, uint8_t* argmax) {
  const size_t rows = s.n * s.oh;
  SerialScope serial(4 * s.n * s.h * s.w * s.c < kTaskGrainBytes);
  parallel_ranges(int(rows), 4 * s.n * s.h * s.w * s.c, [&](int b, int e) {
    const float neg = -std::numeric_limits<float>::infinity();
    for (size_t r = size_t(b); r < size_t(e); ++r) {
      const size_t img = r / s.oh, oy = r % s.oh;
      for (size_t ox = 0; ox < s.ow; ++ox) {
        float* out = y + ((img * s.oh + oy) * s.ow + ox) * s.c;
        uint8_t* idx = argmax + ((img * s.oh + oy) * s.ow + ox) * s.c;
        for (int t = 0; t < s.kernel * s.kernel; ++t) {
          const long iy = cell(oy, t / s.kernel, s, s.h), ix = cell(ox, t % s.kernel, s, s.w);
          const float* in = (iy >= 0 && ix >= 0) ? x + ((img * s.h + size_t(iy)) * s.w + size_t(ix)) * s.c : nullptr;
          for (size_t ch = 0; ch < s.c; ++ch) {
            const float v = in ? in[ch] : neg;
            if (t == 0) {
              out[ch] = v;
              idx[ch] = 0;
            } else if (v > out[ch] || (std::isnan(v) && !std::isnan(out[ch]))) {
              out[ch] = v;
              idx[ch] = uint8_t(t);
            }
          }
        }
      }
    }
  });
}

void maxpool_pad_bwd_f32(const float* err, const uint8_t* argmax, const PadPoolShape& s, float* dx) {
  // images split across the pool; inside one, taps in (kh, kw) order as the judge adds them
  SerialScope serial(8 * s.n * s.h * s.w * s.c < kTaskGrainBytes);
  parallel_ranges(int(s.n), 8 * s.n * s.h * s.w * s.c, [&](int b, int e) {
    for (size_t img = size_t(b); img < size_t(e); ++img) {
      float* image = dx + img * s.h * s.w * s.c;
      std::memset(image, 0, s.h * s.w * s.c * sizeof(float));
      for (int t = 0; t < s.kernel * s.kernel; ++t)
        for (size_t oy = 0; oy < s.oh; ++oy) {
          const long iy = cell(oy, t / s.kernel, s, s.h);
          if (iy < 0) continue;
          for (size_t ox = 0; ox < s.ow; ++ox) {
            const long ix = cell(ox, t % s.kernel, s, s.w);
            if (ix < 0) continue;
            const size_t at = ((img * s.oh + oy) * s.ow + ox) * s.c;
            float* to = image + (size_t(iy) * s.w + size_t(ix)) * s.c;
            for (size_t ch = 0; ch < s.c; ++ch)
              if (argmax[at + ch] == t) to[ch] += err[at + ch];
          }
        }
    }
  });
}

}  // namespace dsptrain
