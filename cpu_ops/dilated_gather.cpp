// Patch gathers of the dilated convolution (dilated_gather.h): one task per image.
#include "dilated_gather.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "thread_pool.h"

namespace dsptrain {
namespace {

// One image's rows [OH*OW, KH*KW*C]: each tap a run of C bytes copied or zeroed.
void image_patches(const int8_t* x, const GatherShape& s, int8_t* out) {
  const size_t c = size_t(s.c), row = size_t(s.w) * c;
  for (int oy = 0; oy < s.oh; ++oy)
    for (int ox = 0; ox < s.ow; ++ox)
      for (int i = 0; i < s.kh; ++i) {
        const int y = oy * s.stride - s.pad + i * s.dilation;
        for (int j = 0; j < s.kw; ++j, out += c) {
          const int xx = ox * s.stride - s.pad + j * s.dilation;
          if (y < 0 || y >= s.h || xx < 0 || xx >= s.w) std::memset(out, 0, c);
          else std::memcpy(out, x + y * row + size_t(xx) * c, c);
        }
      }
}

void image_transposed(const int8_t* err, const GatherShape& s, int8_t* out) {
  const size_t c = size_t(s.c), row = size_t(s.w) * c;
  const int top = (s.kh - 1) * s.dilation - s.pad, left = (s.kw - 1) * s.dilation - s.pad;
  for (int y = 0; y < s.oh; ++y)
    for (int x = 0; x < s.ow; ++x)
      for (int i = 0; i < s.kh; ++i) {
        const int fy = y + i * s.dilation - top;  // the frame row minus err's first row
        const int ey = fy >= 0 && fy % s.stride == 0 ? fy / s.stride : -1;
        for (int j = 0; j < s.kw; ++j, out += c) {
          const int fx = x + j * s.dilation - left;
          const int ex = fx >= 0 && fx % s.stride == 0 ? fx / s.stride : -1;
          if (ey < 0 || ey >= s.h || ex < 0 || ex >= s.w) std::memset(out, 0, c);
          else std::memcpy(out, err + ey * row + size_t(ex) * c, c);
        }
      }
}

constexpr int kTile = 64;  // 64 x 64 bytes a side: both tiles stay in L1

void transpose_rows(const int8_t* a, int m, int n, int r0, int r1, int8_t* b) {
  for (int i0 = r0; i0 < r1; i0 += kTile)
    for (int j0 = 0; j0 < n; j0 += kTile)
      for (int j = j0; j < std::min(n, j0 + kTile); ++j)
        for (int i = i0; i < std::min(r1, i0 + kTile); ++i) b[size_t(j) * m + i] = a[size_t(i) * n + j];
}

}  // namespace

void dilated_patches_s8(const int8_t* x, const GatherShape& s, bool transposed, int8_t* cols) {
  const size_t image = size_t(s.h) * s.w * s.c, depth = size_t(s.kh) * s.kw * s.c;
  const size_t per_image = size_t(s.oh) * s.ow * depth, rows = size_t(s.n) * s.oh * s.ow;
  std::vector<int8_t> gathered(transposed ? rows * depth : 0);
  int8_t* out = transposed ? gathered.data() : cols;
  {
    SerialScope serial(size_t(s.n) * per_image < kTaskGrainBytes);
    parallel_ranges(s.n, size_t(s.n) * per_image, [&](int n0, int n1) {
      for (int n = n0; n < n1; ++n) image_patches(x + n * image, s, out + n * per_image);
    });
  }
  if (transposed) transpose_s8(gathered.data(), int(rows), int(depth), cols);
}

void transposed_patches_s8(const int8_t* err, const GatherShape& s, int8_t* cols) {
  const size_t image = size_t(s.h) * s.w * s.c;
  const size_t per_image = size_t(s.oh) * s.ow * s.kh * s.kw * s.c;
  SerialScope serial(size_t(s.n) * per_image < kTaskGrainBytes);
  parallel_ranges(s.n, size_t(s.n) * per_image, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n) image_transposed(err + n * image, s, cols + n * per_image);
  });
}

void transpose_s8(const int8_t* a, int m, int n, int8_t* b) {
  const int blocks = (m + kTile - 1) / kTile;
  SerialScope serial(size_t(m) * n < kTaskGrainBytes);
  parallel_ranges(blocks, size_t(m) * n, [&](int b0, int b1) {
    transpose_rows(a, m, n, b0 * kTile, std::min(m, b1 * kTile), b);
  });
}

}  // namespace dsptrain
