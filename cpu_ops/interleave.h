// The 4-row byte interleave that builds the k-group layout of packed B (gemm.h) from
// k-major rows: the weight-gradient panels (conv_panels.cpp) and pack_b of a k-major
// (transposed) source (gemm_driver.cpp).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#ifndef DSPTRAIN_X86
#define DSPTRAIN_X86 1
#endif
#endif

namespace dsptrain {

// B of the weight gradient for 4 pixels: dst + tap_off[t] gets the dword
// (p0[t], p1[t], p2[t], p3[t]) for taps t in [first, n), both multiples of 4. The byte
// transpose of 4 rows is unpacklo/hi_epi8 then _epi16 (SSE2, every x86-64).
inline void interleave4(const int8_t* const* rows, int n, const int32_t* tap_off, int8_t* dst, int first = 0) {
  int t = first;
#ifdef DSPTRAIN_X86
  for (; t + 16 <= n; t += 16) {
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0] + t));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[1] + t));
    const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2] + t));
    const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[3] + t));
    const __m128i a = _mm_unpacklo_epi8(r0, r1), b = _mm_unpacklo_epi8(r2, r3);
    const __m128i c = _mm_unpackhi_epi8(r0, r1), d = _mm_unpackhi_epi8(r2, r3);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + tap_off[t]), _mm_unpacklo_epi16(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + tap_off[t + 4]), _mm_unpackhi_epi16(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + tap_off[t + 8]), _mm_unpacklo_epi16(c, d));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + tap_off[t + 12]), _mm_unpackhi_epi16(c, d));
  }
  for (; t + 4 <= n; t += 4) {  // few channels (runs of 4 or 8 bytes): a dword at a time
    int32_t w[4];
    for (int q = 0; q < 4; ++q) std::memcpy(&w[q], rows[q] + t, 4);
    const __m128i a = _mm_unpacklo_epi8(_mm_cvtsi32_si128(w[0]), _mm_cvtsi32_si128(w[1]));
    const __m128i b = _mm_unpacklo_epi8(_mm_cvtsi32_si128(w[2]), _mm_cvtsi32_si128(w[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + tap_off[t]), _mm_unpacklo_epi16(a, b));
  }
#endif
  for (; t < n; t += 4) {
    int8_t* o = dst + tap_off[t];
    for (int u = 0; u < 4; ++u)
      for (int q = 0; q < 4; ++q) o[u * 4 + q] = rows[q][t + u];
  }
}

}  // namespace dsptrain
