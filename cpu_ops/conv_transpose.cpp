// Byte-matrix transposes for the convolutions' operands (conv.cpp, conv_panels.cpp): in
// cache-sized blocks, 16 x 16 in SSE2 registers where a block is whole, on the pool in bands.
#include "conv_transpose.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include <algorithm>

#include "thread_pool.h"

namespace dsptrain {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
// One 16 x 16 byte block transposed in registers: four rounds of SSE2 unpacks (bytes,
// words, dwords, qwords), each pairing rows twice as far apart.
void transpose16x16(const int8_t* src, ptrdiff_t src_ld, int8_t* dst, ptrdiff_t dst_ld, uint8_t bias) {
  __m128i a[16], t[16], u[16];
  const __m128i flip = _mm_set1_epi8(static_cast<char>(bias));
  for (int i = 0; i < 16; ++i)
    a[i] = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld)), flip);
  for (int i = 0; i < 8; ++i) {  // t[i]: rows 2i, 2i+1 x columns 0-7; t[i + 8]: columns 8-15
    t[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
    t[i + 8] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)  // u[4q + i]: rows 4i..4i+3 x columns 4q..4q+3
    for (int i = 0; i < 4; ++i) {
      u[8 * h + i] = _mm_unpacklo_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
      u[8 * h + 4 + i] = _mm_unpackhi_epi16(t[8 * h + 2 * i], t[8 * h + 2 * i + 1]);
    }
  for (int q = 0; q < 4; ++q) {
    const __m128i* v = u + 4 * q;
    const __m128i c01_lo = _mm_unpacklo_epi32(v[0], v[1]), c23_lo = _mm_unpackhi_epi32(v[0], v[1]);  // rows 0-7
    const __m128i c01_hi = _mm_unpacklo_epi32(v[2], v[3]), c23_hi = _mm_unpackhi_epi32(v[2], v[3]);  // rows 8-15
    int8_t* out = dst + 4 * q * dst_ld;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi64(c01_lo, c01_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + dst_ld), _mm_unpackhi_epi64(c01_lo, c01_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * dst_ld), _mm_unpacklo_epi64(c23_lo, c23_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * dst_ld), _mm_unpackhi_epi64(c23_lo, c23_hi));
  }
}
#endif

}  // namespace

// dst[c * dst_ld + r] = src[r * src_ld + c] ^ bias for r < rows, c < cols, in cache-sized
// blocks (the rows of a block each touch one cache line of src and of dst), 16 x 16 at a
// time in registers where the block is whole.
void transpose_block(const int8_t* __restrict src, ptrdiff_t src_ld, ptrdiff_t rows, ptrdiff_t cols,
                     int8_t* __restrict dst, ptrdiff_t dst_ld, uint8_t bias) {
  constexpr ptrdiff_t kBlock = 64;
  for (ptrdiff_t r0 = 0; r0 < rows; r0 += kBlock)
    for (ptrdiff_t c0 = 0; c0 < cols; c0 += kBlock) {
      const ptrdiff_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      ptrdiff_t r16 = r0, c16 = c0;  // [r0, r16) x [c0, c16): done in whole 16 x 16 blocks
#if defined(__x86_64__) || defined(_M_X64)
      r16 = r0 + (r1 - r0) / 16 * 16, c16 = c0 + (c1 - c0) / 16 * 16;
      for (ptrdiff_t r = r0; r < r16; r += 16)
        for (ptrdiff_t c = c0; c < c16; c += 16)
          transpose16x16(src + r * src_ld + c, src_ld, dst + c * dst_ld + r, dst_ld, bias);
#endif
      for (ptrdiff_t c = c0; c < c1; ++c)
        for (ptrdiff_t r = (c < c16 ? r16 : r0); r < r1; ++r)
          dst[c * dst_ld + r] = static_cast<int8_t>(src[r * src_ld + c] ^ bias);
    }
}

void transpose(const int8_t* src, ptrdiff_t rows, ptrdiff_t cols, int8_t* dst, uint8_t bias, ptrdiff_t dst_ld) {
  if (dst_ld == 0) dst_ld = rows;
  constexpr ptrdiff_t kBand = 64;
  const int bands = static_cast<int>((rows + kBand - 1) / kBand);
  parallel_ranges(bands, static_cast<size_t>(rows * cols), [&](int b0, int b1) {
    const ptrdiff_t r0 = b0 * kBand, r1 = std::min(rows, b1 * kBand);
    transpose_block(src + r0 * cols, cols, r1 - r0, cols, dst + r0, dst_ld, bias);
  });
}

// err[n, positions, o] -> dst[o, position * n + image] ^ bias (rows ld apart): err^T with
// its pixels position by position, as the trimmed stream reads it.
void transpose_by_position(const int8_t* err, int n, int positions, int o, int8_t* dst, ptrdiff_t ld, uint8_t bias) {
  constexpr int kBand = 64;
  const int bands = (o + kBand - 1) / kBand;
  parallel_ranges(positions * bands, static_cast<size_t>(n) * positions * o, [&](int u0, int u1) {
    for (int u = u0; u < u1; ++u) {
      const int pos = u / bands, o0 = u % bands * kBand;
      transpose_block(err + static_cast<ptrdiff_t>(pos) * o + o0, static_cast<ptrdiff_t>(positions) * o, n,
                      std::min(kBand, o - o0), dst + o0 * ld + static_cast<ptrdiff_t>(pos) * n, ld, bias);
    }
  });
}

}  // namespace dsptrain
