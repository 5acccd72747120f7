// The AVX2 depthwise loops (dwconv_rows.h). int8 products with no int8 dot-product
// instruction to spare: each 8 channels of two taps (forward, backward data) or two
// positions (weight gradient) are interleaved byte by byte, widened to int16 and multiplied
// by vpmaddwd, which sums the pair exactly into int32 (|-128 * -128| * 2 fits): 16 MACs per
// multiply, the sums kept in registers across the taps instead of in memory.
#include "dwconv_rows.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define DSPTRAIN_AVX2 __attribute__((target("avx2")))

namespace dsptrain {
namespace {

// 8 channels of a and of b, interleaved (a0 b0 a1 b1 ...) and widened to 16 int16
DSPTRAIN_AVX2 inline __m256i pair16(const int8_t* a, const int8_t* b) {
  const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
  const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb));
}

DSPTRAIN_AVX2 inline __m256i load8(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Up to this many taps' sums stay in registers in the weight gradient (16 ymm in all).
constexpr int kWgradTaps = 10;

}  // namespace

bool dw_madd_compiled() { return true; }

DSPTRAIN_AVX2 void dw_rows_s8_madd(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* pair_off, int pairs,
                                   const int16_t* wpairs, ptrdiff_t wstride, int cw, int count, int32_t* y,
                                   ptrdiff_t ystride) {
  for (int c = 0; c < cw; c += 8) {
    int o = 0;
    for (; o + 2 <= count; o += 2) {   // two outputs at once: two independent chains
      const int8_t* x0 = src + o * xstep + c;
      const int8_t* x1 = x0 + xstep;
      __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
      for (int p = 0; p < pairs; ++p) {
        const __m256i w = load8(wpairs + p * wstride + 2 * c);
        const ptrdiff_t a = pair_off[2 * p], b = pair_off[2 * p + 1];
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(pair16(x0 + a, x0 + b), w));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(pair16(x1 + a, x1 + b), w));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + o * ystride + c), s0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + (o + 1) * ystride + c), s1);
    }
    if (o < count) {
      const int8_t* x0 = src + o * xstep + c;
      __m256i s0 = _mm256_setzero_si256();
      for (int p = 0; p < pairs; ++p)
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(pair16(x0 + pair_off[2 * p], x0 + pair_off[2 * p + 1]),
                                                    load8(wpairs + p * wstride + 2 * c)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + o * ystride + c), s0);
    }
  }
}

DSPTRAIN_AVX2 void dw_wgrad_rows_s8_madd(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                         const int8_t* e, ptrdiff_t estride, int cw, int count, int32_t* acc,
                                         ptrdiff_t astride) {
  alignas(8) static const int8_t zeros[8] = {};
  for (int c = 0; c < cw; c += 8) {
    for (int t0 = 0; t0 < taps; t0 += kWgradTaps) {
      const int group = taps - t0 < kWgradTaps ? taps - t0 : kWgradTaps;
      __m256i s[kWgradTaps];
      for (int g = 0; g < kWgradTaps; ++g) s[g] = _mm256_setzero_si256();
      for (int o = 0; o < count; o += 2) {
        const bool two = o + 1 < count;   // an odd last position pairs with a zero error
        const int8_t* e0 = e + o * estride + c;
        const __m256i ev = pair16(e0, two ? e0 + estride : zeros);
        const int8_t* x0 = src + o * xstep + c;
        const int8_t* x1 = two ? x0 + xstep : x0;
#pragma GCC unroll 10
        for (int g = 0; g < kWgradTaps; ++g)
          if (g < group) {
            const ptrdiff_t a = off[t0 + g];
            s[g] = _mm256_add_epi32(s[g], _mm256_madd_epi16(ev, pair16(x0 + a, x1 + a)));
          }
      }
      for (int g = 0; g < group; ++g) {
        int32_t* a = acc + (t0 + g) * astride + c;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(a),
                            _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)), s[g]));
      }
    }
  }
}

}  // namespace dsptrain

#else  // not x86-64: the portable loops run everything

namespace dsptrain {
bool dw_madd_compiled() { return false; }
void dw_rows_s8_madd(const int8_t*, ptrdiff_t, const ptrdiff_t*, int, const int16_t*, ptrdiff_t, int, int, int32_t*,
                     ptrdiff_t) {}
void dw_wgrad_rows_s8_madd(const int8_t*, ptrdiff_t, const ptrdiff_t*, int, const int8_t*, ptrdiff_t, int, int,
                           int32_t*, ptrdiff_t) {}
}  // namespace dsptrain

#endif
