// Patch gathers of the dilated convolution (dilated_gather.h): one task per image.
#include "dilated_gather.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr int kTile = 64;  // rows of a transpose task's band: its 8x8 blocks' lines stay in cache


// Output pixel (oy, ox)'s taps, KH*KW runs of C bytes, each copied or zeroed.
void pixel_patch(const int8_t* x, const GatherShape& s, int oy, int ox, int8_t* out) {
  const size_t c = size_t(s.c), row = size_t(s.w) * c;
  for (int i = 0; i < s.kh; ++i) {
    const int y = oy * s.stride - s.pad + i * s.dilation;
    for (int j = 0; j < s.kw; ++j, out += c) {
      const int xx = ox * s.stride - s.pad + j * s.dilation;
      if (y < 0 || y >= s.h || xx < 0 || xx >= s.w) std::memset(out, 0, c);
      else std::memcpy(out, x + y * row + size_t(xx) * c, c);
    }
  }
}

// One image's rows [OH*OW, KH*KW*C].
void image_patches(const int8_t* x, const GatherShape& s, int8_t* out) {
  const size_t depth = size_t(s.kh) * s.kw * s.c;
  for (int oy = 0; oy < s.oh; ++oy)
    for (int ox = 0; ox < s.ow; ++ox, out += depth) pixel_patch(x, s, oy, ox, out);
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


// An 8x8 byte block transposed in eight 64-bit words (three rounds of swapping halves, quarters,
// then single bytes across the diagonal: Warren, Hacker's Delight, 7-3, on bytes instead of bits);
// portable, so the aarch64 build has it too.
void transpose8x8(const int8_t* a, size_t lda, int8_t* b, size_t ldb) {
  uint64_t r[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], a + i * lda, 8);
  for (int i = 0; i < 4; ++i) {
    const uint64_t t = ((r[i] >> 32) ^ r[i + 4]) & 0x00000000FFFFFFFFull;
    r[i] ^= t << 32, r[i + 4] ^= t;
  }
  for (int i : {0, 1, 4, 5}) {
    const uint64_t t = ((r[i] >> 16) ^ r[i + 2]) & 0x0000FFFF0000FFFFull;
    r[i] ^= t << 16, r[i + 2] ^= t;
  }
  for (int i : {0, 2, 4, 6}) {
    const uint64_t t = ((r[i] >> 8) ^ r[i + 1]) & 0x00FF00FF00FF00FFull;
    r[i] ^= t << 8, r[i + 1] ^= t;
  }
  for (int i = 0; i < 8; ++i) std::memcpy(b + i * ldb, &r[i], 8);
}

// Rows [r0, r1) of a[M, N] into columns [r0, r1) of b[N, M]: 8x8 blocks, the ragged edges byte by byte.
void transpose_rows(const int8_t* a, int m, int n, int r0, int r1, int8_t* b) {
  for (int i0 = r0; i0 < r1; i0 += kTile) {
    const int i1 = std::min(r1, i0 + kTile), full_i = i0 + (i1 - i0) / 8 * 8, full_j = n / 8 * 8;
    for (int j = 0; j < full_j; j += 8)
      for (int i = i0; i < full_i; i += 8) transpose8x8(a + size_t(i) * n + j, size_t(n), b + size_t(j) * m + i, size_t(m));
    for (int i = full_i; i < i1; ++i)
      for (int j = 0; j < n; ++j) b[size_t(j) * m + i] = a[size_t(i) * n + j];
    for (int j = full_j; j < n; ++j)
      for (int i = i0; i < full_i; ++i) b[size_t(j) * m + i] = a[size_t(i) * n + j];
  }
}

}  // namespace

void dilated_patches_s8(const int8_t* x, const GatherShape& s, bool transposed, int8_t* cols) {
  const size_t image = size_t(s.h) * s.w * s.c, depth = size_t(s.kh) * s.kw * s.c;
  const size_t per_image = size_t(s.oh) * s.ow * depth, pixels = size_t(s.n) * s.oh * s.ow;
  SerialScope serial(size_t(s.n) * per_image < kTaskGrainBytes);
  if (!transposed) {
    parallel_ranges(s.n, size_t(s.n) * per_image, [&](int n0, int n1) {
      for (int n = n0; n < n1; ++n) image_patches(x + n * image, s, cols + n * per_image);
    });
    return;
  }
  // K-major: the rows, then transposed in 8x8 blocks (a copy the size of the patches)
  std::vector<int8_t> rows(pixels * depth);
  parallel_ranges(s.n, size_t(s.n) * per_image, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n) image_patches(x + n * image, s, rows.data() + n * per_image);
  });
  transpose_s8(rows.data(), int(pixels), int(depth), cols);
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
