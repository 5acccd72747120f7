// Images are independent, so the pool splits over them; each image's loops run in a
// fixed order, which keeps the overlapping-window sums of the backward NumPy's.
#include "pool_f32.h"

#include <algorithm>
#include <cstring>

#include "thread_pool.h"

namespace dsptrain {

void maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax) {
  const int oh = s.oh(), ow = s.ow(), c = s.c, k = s.kernel;
  const size_t in_image = static_cast<size_t>(s.h) * s.w * c, out_image = static_cast<size_t>(oh) * ow * c;
  const size_t bytes = static_cast<size_t>(s.n) * (in_image * 4 + out_image * 5);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          float* yo = y + n * out_image + (static_cast<size_t>(i) * ow + j) * c;
          uint8_t* ao = argmax + n * out_image + (static_cast<size_t>(i) * ow + j) * c;
          for (int kh = 0; kh < k; ++kh)
            for (int kw = 0; kw < k; ++kw) {
              const float* xi = x + n * in_image + ((static_cast<size_t>(i) * s.stride + kh) * s.w + j * s.stride + kw) * c;
              const uint8_t tap = static_cast<uint8_t>(kh * k + kw);
              if (tap == 0) {
                std::memcpy(yo, xi, c * sizeof(float));
                std::memset(ao, 0, c);
                continue;
              }
              for (int ch = 0; ch < c; ++ch)  // strictly greater: the first maximum wins, as argmax
                if (xi[ch] > yo[ch]) {
                  yo[ch] = xi[ch];
                  ao[ch] = tap;
                }
            }
        }
  });
}

void maxpool_bwd_f32(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx) {
  const int oh = s.oh(), ow = s.ow(), c = s.c, k = s.kernel;
  const size_t in_image = static_cast<size_t>(s.h) * s.w * c, out_image = static_cast<size_t>(oh) * ow * c;
  const size_t bytes = static_cast<size_t>(s.n) * (in_image * 4 + out_image * 5);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    std::fill(dx + n0 * in_image, dx + n1 * in_image, 0.0f);
    for (int n = n0; n < n1; ++n)
      for (int kh = 0; kh < k; ++kh)
        for (int kw = 0; kw < k; ++kw) {
          const uint8_t tap = static_cast<uint8_t>(kh * k + kw);
          for (int i = 0; i < oh; ++i)
            for (int j = 0; j < ow; ++j) {
              const size_t o = n * out_image + (static_cast<size_t>(i) * ow + j) * c;
              float* d = dx + n * in_image + ((static_cast<size_t>(i) * s.stride + kh) * s.w + j * s.stride + kw) * c;
              for (int ch = 0; ch < c; ++ch) d[ch] += argmax[o + ch] == tap ? err[o + ch] : 0.0f;
            }
        }
  });
}

}  // namespace dsptrain
