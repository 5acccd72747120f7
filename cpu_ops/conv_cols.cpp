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

// Copies n elements by a plain loop: the runs here are short (1-channel images: one
// element per tap), and a memcpy call per run cost more than the whole product.
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void copy_run(const T* src, size_t n, T* dst) {
  for (size_t t = 0; t < n; ++t) dst[t] = src[t];
}

template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void zero_run(size_t n, T* dst) {
  for (size_t t = 0; t < n; ++t) dst[t] = T{0};
}

// kRun > 0: the tap row's length known at compile time (1-channel 3x3 and 5x5 kernels,
// LeNet's conv1: 5 elements), so its copy is a few fixed moves, not a counted loop
template <int kRun, typename T>
void im2col_walk(const T* x, const Col2imShape& s, T* cols) {
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c, per_image = static_cast<size_t>(s.oh) * s.ow * taps;
  const size_t bytes = static_cast<size_t>(s.n) * (per_image + image) * sizeof(T);
  const size_t run = kRun > 0 ? static_cast<size_t>(kRun) : static_cast<size_t>(s.kw) * s.c;   // one tap row: contiguous in x when inside the image
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n)
      for (int i = 0; i < s.oh; ++i)
        for (int j = 0; j < s.ow; ++j) {
          T* dst = cols + n * per_image + (static_cast<size_t>(i) * s.ow + j) * taps;
          const int x0 = j * s.stride - s.pad;
          const bool inside = x0 >= 0 && x0 + s.kw <= s.w;
          for (int a = 0; a < s.kh; ++a) {
            const int y = i * s.stride + a - s.pad;
            T* row = dst + static_cast<size_t>(a) * run;
            if (y < 0 || y >= s.h) {
              zero_run(run, row);
              continue;
            }
            const T* src = x + n * image + static_cast<size_t>(y) * s.w * s.c;
            if (inside) {
              if constexpr (kRun > 0) {
                for (int t = 0; t < kRun; ++t) row[t] = src[static_cast<size_t>(x0) * s.c + t];
              } else {
                copy_run(src + static_cast<size_t>(x0) * s.c, run, row);
              }
              continue;
            }
            for (int b = 0; b < s.kw; ++b) {
              const int xb = x0 + b;
              if (xb < 0 || xb >= s.w) zero_run(s.c, row + static_cast<size_t>(b) * s.c);
              else copy_run(src + static_cast<size_t>(xb) * s.c, s.c, row + static_cast<size_t>(b) * s.c);
            }
          }
        }
  });
}

template <typename T>
void im2col_copy(const T* x, const Col2imShape& s, T* cols) {
  const int run = s.kw * s.c;
  if (run == 5) im2col_walk<5>(x, s, cols);
  else if (run == 3) im2col_walk<3>(x, s, cols);
  else im2col_walk<0>(x, s, cols);
}

template void im2col_copy<int16_t>(const int16_t*, const Col2imShape&, int16_t*);
template void im2col_copy<float>(const float*, const Col2imShape&, float*);
template void col2im_add<int64_t>(const int64_t*, const Col2imShape&, int64_t*);
template void col2im_add<double>(const double*, const Col2imShape&, double*);

}  // namespace dsptrain
