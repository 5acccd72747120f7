// Images are independent: the pool splits over them, each image's taps in (kh, kw) order.
#include "conv_cols.h"

#include <cstring>

#include <algorithm>
#include <cstddef>

#include "thread_pool.h"

namespace dsptrain {

template <typename T>
void col2im_add(const T* dcols, const Col2imShape& s, T* dx) {
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c, per_image = static_cast<size_t>(s.oh) * s.ow * taps;
  const size_t bytes = static_cast<size_t>(s.n) * (per_image + image) * sizeof(T);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    std::fill(dx + n0 * image, dx + n1 * image, T{0});
    for (int n = n0; n < n1; ++n)
      for (int i = 0; i < s.oh; ++i)
        for (int j = 0; j < s.ow; ++j) {
          const T* src = dcols + n * per_image + (static_cast<size_t>(i) * s.ow + j) * taps;
          for (int a = 0; a < s.kh; ++a) {
            const int y = i * s.stride + a - s.pad;
            if (y < 0 || y >= s.h) continue;
            for (int b = 0; b < s.kw; ++b) {
              const int x = j * s.stride + b - s.pad;
              if (x < 0 || x >= s.w) continue;
              T* d = dx + n * image + (static_cast<size_t>(y) * s.w + x) * s.c;
              const T* v = src + (static_cast<size_t>(a) * s.kw + b) * s.c;
              for (int ch = 0; ch < s.c; ++ch) d[ch] += v[ch];
            }
          }
        }
  });
}

template <typename T>
void im2col_copy(const T* x, const Col2imShape& s, T* cols) {
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c, per_image = static_cast<size_t>(s.oh) * s.ow * taps;
  const size_t bytes = static_cast<size_t>(s.n) * (per_image + image) * sizeof(T);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n)
      for (int i = 0; i < s.oh; ++i)
        for (int j = 0; j < s.ow; ++j) {
          T* dst = cols + n * per_image + (static_cast<size_t>(i) * s.ow + j) * taps;
          for (int a = 0; a < s.kh; ++a) {
            const int y = i * s.stride + a - s.pad;
            T* row = dst + static_cast<size_t>(a) * s.kw * s.c;
            if (y < 0 || y >= s.h) {
              std::memset(row, 0, static_cast<size_t>(s.kw) * s.c * sizeof(T));
              continue;
            }
            for (int b = 0; b < s.kw; ++b) {
              const int x0 = j * s.stride + b - s.pad;
              if (x0 < 0 || x0 >= s.w) std::memset(row + static_cast<size_t>(b) * s.c, 0, s.c * sizeof(T));
              else std::memcpy(row + static_cast<size_t>(b) * s.c, x + n * image + (static_cast<size_t>(y) * s.w + x0) * s.c,
                               s.c * sizeof(T));
            }
          }
        }
  });
}

template void im2col_copy<int16_t>(const int16_t*, const Col2imShape&, int16_t*);
template void im2col_copy<float>(const float*, const Col2imShape&, float*);
template void col2im_add<int64_t>(const int64_t*, const Col2imShape&, int64_t*);
template void col2im_add<double>(const double*, const Col2imShape&, double*);

}  // namespace dsptrain
