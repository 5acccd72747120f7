// Images are independent: the pool splits over them, each image's taps in (kh, kw) order.
#include "conv_cols.h"

#include <cstring>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "thread_pool.h"

namespace dsptrain {

template <typename T>
inline void add_run(const T* __restrict src, size_t n, T* __restrict dst) {
  for (size_t t = 0; t < n; ++t) dst[t] += src[t];
}

template <typename T>
void col2im_add_image(const T* dcols, const Col2imShape& s, T* dx) {
  const size_t run = static_cast<size_t>(s.kw) * s.c, taps = run * s.kh;
  std::fill(dx, dx + static_cast<size_t>(s.h) * s.w * s.c, T{0});
  for (int i = 0; i < s.oh; ++i)
    for (int j = 0; j < s.ow; ++j) {
      const T* src = dcols + (static_cast<size_t>(i) * s.ow + j) * taps;
      const int x0 = j * s.stride - s.pad;
      const bool inside = x0 >= 0 && x0 + s.kw <= s.w;
      for (int a = 0; a < s.kh; ++a) {
        const int y = i * s.stride + a - s.pad;
        if (y < 0 || y >= s.h) continue;
        if (inside) {   // the tap row lands on kw * c contiguous elements of dx: one vector loop
          add_run(src + static_cast<size_t>(a) * run, run, dx + (static_cast<size_t>(y) * s.w + x0) * s.c);
          continue;
        }
        for (int b = 0; b < s.kw; ++b) {
          const int x = x0 + b;
          if (x < 0 || x >= s.w) continue;
          add_run(src + (static_cast<size_t>(a) * s.kw + b) * s.c, s.c, dx + (static_cast<size_t>(y) * s.w + x) * s.c);
        }
      }
    }
}

template <typename T>
void col2im_add(const T* dcols, const Col2imShape& s, T* dx) {
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c, per_image = static_cast<size_t>(s.oh) * s.ow * taps;
  const size_t bytes = static_cast<size_t>(s.n) * (per_image + image) * sizeof(T);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n) col2im_add_image(dcols + n * per_image, s, dx + n * image);
  });
}

// Copies n elements by a plain loop: the runs here are short (1-channel images: one
// element per tap), and a memcpy call per run cost more than the whole product.
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void copy_run(const T* src, size_t n, T* dst) {
  for (size_t t = 0; t < n; ++t) dst[t] = src[t];
}

// One image's patches from its zero-padded copy `padded` ((h + 2 pad) x (w + 2 pad) x c,
// with kSlack bytes readable past its end): a tap row is then always kw * c contiguous
// elements, moved as one fixed-width copy of kWide bytes (a few vector moves, no bounds
// checks) when it fits; the bytes a wide copy writes past the row are written again by
// the next copy, so the image's last patch row, whose spill would reach the next image
// (another thread's), is copied exactly.
constexpr size_t kSlack = 64;

template <size_t kWide, typename T>
void patches_of_padded(const T* padded, const Col2imShape& s, T* cols) {
  const size_t run = static_cast<size_t>(s.kw) * s.c, taps = run * s.kh;
  const size_t pw = static_cast<size_t>(s.w + 2 * s.pad) * s.c;   // a padded row, in elements
  const bool wide = kWide > 0 && run * sizeof(T) <= kWide;
  T* dst = cols;
  for (int i = 0; i < s.oh; ++i)
    for (int j = 0; j < s.ow; ++j, dst += taps) {
      const T* src = padded + static_cast<size_t>(i) * s.stride * pw + static_cast<size_t>(j) * s.stride * s.c;
      const bool last = i == s.oh - 1 && j == s.ow - 1;
      for (int a = 0; a < s.kh; ++a) {
        if constexpr (kWide > 0) {
          if (wide && !(last && a == s.kh - 1)) {
            std::memcpy(dst + a * run, src + a * pw, kWide);
            continue;
          }
        }
        copy_run(src + a * pw, run, dst + a * run);
      }
    }
}

template <typename T>
void im2col_image(const T* x, const Col2imShape& s, T* cols, std::vector<T>& padded) {
  const size_t row = static_cast<size_t>(s.w) * s.c, pw = static_cast<size_t>(s.w + 2 * s.pad) * s.c;
  const size_t size = pw * (s.h + 2 * s.pad) + kSlack / sizeof(T);
  if (padded.size() != size) padded.assign(size, T{0});   // the border and the slack stay zero
  for (int y = 0; y < s.h; ++y)
    std::memcpy(padded.data() + (y + s.pad) * pw + static_cast<size_t>(s.pad) * s.c, x + y * row, row * sizeof(T));
  const size_t run_bytes = static_cast<size_t>(s.kw) * s.c * sizeof(T);
  if (run_bytes <= 16) patches_of_padded<16>(padded.data(), s, cols);
  else if (run_bytes <= 32) patches_of_padded<32>(padded.data(), s, cols);
  else if (run_bytes <= 64) patches_of_padded<64>(padded.data(), s, cols);
  else patches_of_padded<0>(padded.data(), s, cols);
}

template <typename T>
void im2col_copy(const T* x, const Col2imShape& s, T* cols) {
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c, per_image = static_cast<size_t>(s.oh) * s.ow * taps;
  const size_t bytes = static_cast<size_t>(s.n) * (per_image + image) * sizeof(T);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    std::vector<T> padded;
    for (int n = n0; n < n1; ++n) im2col_image(x + n * image, s, cols + n * per_image, padded);
  });
}

template void im2col_copy<int16_t>(const int16_t*, const Col2imShape&, int16_t*);
template void im2col_image<int16_t>(const int16_t*, const Col2imShape&, int16_t*, std::vector<int16_t>&);
template void im2col_copy<float>(const float*, const Col2imShape&, float*);
template void col2im_add<int64_t>(const int64_t*, const Col2imShape&, int64_t*);
template void col2im_add_image<int64_t>(const int64_t*, const Col2imShape&, int64_t*);
template void col2im_add<double>(const double*, const Col2imShape&, double*);

}  // namespace dsptrain
