// Quantizers and the scale epilogue of the emulated recipes. Element loops are compiled
// for AVX-512, AVX2 and baseline x86 (target_clones); work is cut into fixed chunks so
// that nothing a result depends on changes with the thread count.
#include "quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_features.h"
#include "quant_chunks.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

#include "target_clones.h"

namespace dsptrain {
namespace {

// `word` is the element's random word (read in kSto mode only)
template <FloatRound M>
inline double round_as(double v, uint32_t word) {
  if constexpr (M == FloatRound::kRound) return std::copysign(std::floor(std::fabs(v) + 0.5), v);
  else if constexpr (M == FloatRound::kNearestEven) return std::nearbyint(v);
  else return std::floor(v + static_cast<double>(static_cast<int32_t>(word >> 8)) * (1.0 / 16777216.0));
}

inline double round_value(double v, FloatRound mode, const RngKey& key, size_t i) {
  if (mode == FloatRound::kRound) return round_as<FloatRound::kRound>(v, 0);
  if (mode == FloatRound::kNearestEven) return round_as<FloatRound::kNearestEven>(v, 0);
  return round_as<FloatRound::kSto>(v, random_u32(key, i));
}

// The random words of elements [begin, end) (sto mode), drawn in their own loop so that
// the Threefry rounds run vector-wide (fill_random_u32); nullptr in the other modes.
template <FloatRound M>
const uint32_t* random_words(const RngKey& key, size_t begin, size_t end) {
  if constexpr (M != FloatRound::kSto) {
    return nullptr;
  } else {
    thread_local std::vector<uint32_t> words;
    if (words.size() < end - begin) words.resize(end - begin);
    fill_random_u32(key, begin, end - begin, words.data());
    return words.data();
  }
}

template <FloatRound M>
inline uint32_t word_at(const uint32_t* words, size_t j) {
  if constexpr (M == FloatRound::kSto) return words[j];
  else return 0;
}

// 2**e for e in [-1022, 1023], built from the exponent field (ldexp is a library call)
inline double pow2(int e) {
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// calls body.template operator()<M>() with the mode as a compile-time constant, so each
// element loop is compiled (and vectorised) once per rounding mode
template <typename Body>
void with_mode(FloatRound mode, Body body) {
  if (mode == FloatRound::kRound) body(std::integral_constant<FloatRound, FloatRound::kRound>{});
  else if (mode == FloatRound::kNearestEven) body(std::integral_constant<FloatRound, FloatRound::kNearestEven>{});
  else body(std::integral_constant<FloatRound, FloatRound::kSto>{});
}

// |x| ordered as unsigned integers of its bits (sign bit cleared): an integer max
// reduction, which vectorises where a float one (NaN and -0.0 rules) does not.
template <typename F>
DSPTRAIN_CLONES double absmax_loop(const F* x, size_t begin, size_t end) {
  using U = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  constexpr U kMagnitude = ~(U{1} << (8 * sizeof(U) - 1));
  U m = 0;
  for (size_t i = begin; i < end; ++i) {
    U bits;
    std::memcpy(&bits, x + i, sizeof(U));
    m = std::max(m, static_cast<U>(bits & kMagnitude));
  }
  F out;
  std::memcpy(&out, &m, sizeof(F));
  return static_cast<double>(out);
}

template <FloatRound M, typename F, typename Q>
DSPTRAIN_CLONES void quantize_loop(const F* x, size_t begin, size_t end, double step, double qmax,
                                   const uint32_t* words, Q* q) {
  for (size_t i = begin; i < end; ++i) {
    const double r = round_as<M>(static_cast<double>(x[i]) / step, word_at<M>(words, i - begin));
    q[i] = static_cast<Q>(static_cast<int>(std::min(std::max(r, -qmax), qmax)));
  }
}

#ifdef DSPTRAIN_X86
// quantize_loop 16 elements at a time on AVX-512 (GCC leaves that loop scalar): the
// same double arithmetic per element -- the division, floor/nearest rounding, the
// random word's fraction, the clamp -- so the same integers; the tail runs the scalar loop.
// (Masked forms with every lane on: GCC 12 warns inside its unmasked ones.)
template <typename F>
__attribute__((target("avx512f"))) inline __m512d load8_pd(const F* x) {
  if constexpr (std::is_same_v<F, float>) return _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x));
  else return _mm512_loadu_pd(x);
}

template <FloatRound M>
__attribute__((target("avx512f"))) inline __m512d round8(__m512d v, const uint32_t* words) {
  constexpr int kFloor = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
  if constexpr (M == FloatRound::kRound) {   // copysign(floor(|v| + 0.5), v)
    const __m512i sign = _mm512_set1_epi64(static_cast<long long>(0x8000000000000000ULL));
    const __m512i bits = _mm512_castpd_si512(v);
    const __m512d mag = _mm512_castsi512_pd(_mm512_and_si512(_mm512_set1_epi64(0x7FFFFFFFFFFFFFFFLL), bits));
    const __m512d r = _mm512_maskz_roundscale_pd(0xFF, _mm512_add_pd(mag, _mm512_set1_pd(0.5)), kFloor);
    return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(r), _mm512_and_si512(sign, bits)));
  } else if constexpr (M == FloatRound::kNearestEven) {
    return _mm512_maskz_roundscale_pd(0xFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {   // floor(v + (word >> 8) * 2**-24): the product is exact, the sum rounds as in C++
    const __m256i w = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words)), 8);
    const __m512d frac = _mm512_mul_pd(_mm512_maskz_cvtepi32_pd(0xFF, w), _mm512_set1_pd(1.0 / 16777216.0));
    return _mm512_maskz_roundscale_pd(0xFF, _mm512_add_pd(v, frac), kFloor);
  }
}

// Sixteen int32 codes stored as Q (int8 or int16).
template <typename Q>
__attribute__((target("avx512f"))) inline void store_codes16(__m512i codes, Q* q) {
  if constexpr (sizeof(Q) == 1)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_mask_cvtepi32_epi8(_mm_setzero_si128(), 0xFFFF, codes));
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_mask_cvtepi32_epi16(_mm256_setzero_si256(), 0xFFFF, codes));
}

// A float32 quotient v rounded to a whole number as the double loop rounds it (when v is
// the quotient, or far enough from a half): nearest, halves away from zero, is
// trunc(|v|) + (|v| - trunc(|v|) >= 0.5), both exact, without the double path's inexact
// |v| + 0.5; nearest_even is the rounding instruction itself.
template <FloatRound M>
__attribute__((target("avx512f"))) inline __m512 round16(__m512 v) {
  if constexpr (M == FloatRound::kRound) {
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    const __m512i bits = _mm512_castps_si512(v);
    const __m512 mag = _mm512_castsi512_ps(_mm512_andnot_si512(sign, bits));
    const __m512 whole = _mm512_maskz_roundscale_ps(0xFFFF, mag, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(mag, whole), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 r = _mm512_mask_add_ps(whole, up, whole, _mm512_set1_ps(1.0f));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(sign, bits)));
  } else {
    return _mm512_maskz_roundscale_ps(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}

// x / step, without the division when step is a power of two: then x * (1 / step) is the
// quotient exactly (both are the correctly rounded value of the same real number).
// (A reciprocal for other steps, checked for values near a rounding boundary, measured
// slower than the division: the loop is bound by its other double operations.)
template <FloatRound M>
__attribute__((target("avx512f"))) inline __m512d quotient8(__m512d xv, __m512d st, __m512d inv, bool exact) {
  return exact ? _mm512_mul_pd(xv, inv) : _mm512_div_pd(xv, st);
}

// quantize_loop for float32 x and a power-of-two step whose inverse 2**-k is a float32,
// round and nearest_even, sixteen elements a vector in float32: v = x * 2**-k is then the
// double quotient exactly (or, below float32's normal range, a value that rounds to 0 as
// it does), rounded by round16. The same integers.
template <FloatRound M, typename Q>
__attribute__((target("avx512f"))) void quantize_pow2_f32_avx512(const float* x, size_t begin, size_t end, double step,
                                                                  float inverse, double qmax, Q* q) {
  static_assert(M != FloatRound::kSto, "stochastic rounding stays in double");
  const __m512 inv = _mm512_set1_ps(inverse), hi = _mm512_set1_ps(static_cast<float>(qmax)),
               lo = _mm512_set1_ps(static_cast<float>(-qmax));
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
    const __m512 r = round16<M>(v);
    store_codes16(_mm512_maskz_cvttps_epi32(0xFFFF, _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, r, lo), hi)),
                  q + i);
  }
  quantize_loop<M>(x, i, end, step, qmax, nullptr, q);
}

// Is step a power of two (a normal double with an all-zero mantissa)? Then 1 / step is exact.
inline bool is_pow2(double step) {
  uint64_t bits;
  std::memcpy(&bits, &step, sizeof bits);
  return std::isnormal(step) && (bits & 0xFFFFFFFFFFFFFULL) == 0;
}

// 2**-k as a float32 when step = 2**k and that is a normal float32, else 0
inline float float_inverse_of_pow2(double step) {
  if (!is_pow2(step)) return 0.0f;
  const double inverse = 1.0 / step;
  return inverse >= 0x1p-126 && inverse <= 0x1p127 ? static_cast<float>(inverse) : 0.0f;
}

template <FloatRound M, typename F, typename Q>
__attribute__((target("avx512f"))) void quantize_loop_avx512(const F* x, size_t begin, size_t end, double step,
                                                              double qmax, const uint32_t* words, Q* q) {
  const __m512d st = _mm512_set1_pd(step), hi = _mm512_set1_pd(qmax), lo = _mm512_set1_pd(-qmax);
  const bool exact = is_pow2(step);
  const __m512d inv = _mm512_set1_pd(1.0 / step);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m256i half[2];
    for (int h = 0; h < 2; ++h) {
      const uint32_t* w = M == FloatRound::kSto ? words + (i - begin) + 8 * h : nullptr;
      const __m512d v = quotient8<M>(load8_pd(x + i + 8 * h), st, inv, exact);
      const __m512d r = round8<M>(v, w);
      half[h] = _mm512_maskz_cvttpd_epi32(0xFF, _mm512_maskz_min_pd(0xFF, _mm512_maskz_max_pd(0xFF, r, lo), hi));
    }
    const __m512i all = _mm512_mask_inserti64x4(_mm512_castsi256_si512(half[0]), 0xF0, _mm512_setzero_si512(), half[1], 1);
    store_codes16(all, q + i);
  }
  quantize_loop<M>(x, i, end, step, qmax, M == FloatRound::kSto ? words + (i - begin) : nullptr, q);
}

// quantize_loop for float32 x and a step that is not a power of two (Octo's max|x| / 127),
// round and nearest_even, sixteen elements a vector in float32 without a division:
// v = x * float(1 / step) is within a relative 2**-22 of the quotient x / step (two float32
// roundings and one of the reciprocal), so it rounds to the same integer as the double
// quotient does unless |v| lies that close to a half-integer, where the rounding decides.
// A vector with such a lane (about one element in 10**5; or a lane that is not finite) is
// redone by the double loop, division and all: the same integers, every one. The window
// is |v| * 2**-20, four times the bound; the double path's own |q| + 0.5 rounds only inside it.
template <FloatRound M, typename Q>
__attribute__((target("avx512f"))) void quantize_recip_f32_avx512(const float* x, size_t begin, size_t end,
                                                                   double step, double qmax, Q* q) {
  static_assert(M != FloatRound::kSto, "stochastic rounding stays in double");
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / step)), hi = _mm512_set1_ps(static_cast<float>(qmax)),
               lo = _mm512_set1_ps(static_cast<float>(-qmax)), half = _mm512_set1_ps(0.5f),
               window = _mm512_set1_ps(0x1p-20f), inf = _mm512_set1_ps(__builtin_inff());
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  constexpr int kRedo = 64;
  size_t redo[kRedo];
  int redone = 0;
  auto redo_double = [&](int& count) {
    for (int r = 0; r < count; ++r) quantize_loop_avx512<M>(x, redo[r], redo[r] + 16, step, qmax, nullptr, q);
    count = 0;
  };
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
    const __m512i bits = _mm512_castps_si512(v);
    const __m512 mag = _mm512_castsi512_ps(_mm512_andnot_si512(sign, bits));
    const __m512 whole = _mm512_maskz_roundscale_ps(0xFFFF, mag, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_sub_ps(mag, whole);   // exact
    const __m512 off = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(_mm512_sub_ps(frac, half))));
    const __mmask16 unsure = _mm512_cmp_ps_mask(off, _mm512_mul_ps(mag, window), _CMP_LE_OQ) |
                             _mm512_cmp_ps_mask(mag, inf, _CMP_NLT_UQ);   // near a half, inf or NaN
    const __m512 r = round16<M>(v);   // its |v|, trunc and fraction are the ones above
    store_codes16(_mm512_maskz_cvttps_epi32(0xFFFF, _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, r, lo), hi)),
                  q + i);
    if (unsure) {   // redone after the stores (a call in the loop would cost it its registers)
      redo[redone++] = i;
      if (redone == kRedo) redo_double(redone);
    }
  }
  redo_double(redone);
  quantize_loop<M>(x, i, end, step, qmax, nullptr, q);
}
#endif

template <typename T>
DSPTRAIN_CLONES void dequantize_loop(const T* acc, size_t begin, size_t end, double scale, float* out) {
  for (size_t i = begin; i < end; ++i) out[i] = static_cast<float>(static_cast<double>(acc[i]) * scale);
}

template <FloatRound M, typename F>
DSPTRAIN_CLONES void round_float_loop(const F* x, size_t begin, size_t end, int emin, int mbits, double largest,
                                      const uint32_t* words, float* out) {
  for (size_t i = begin; i < end; ++i) {
    const double v = static_cast<double>(x[i]);
    // floor(log2|v|) from the exponent field: exact for normal doubles; zero and double
    // subnormals get a value below emin, which gives the same ulp (and zero rounds to zero)
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    const double ulp = pow2(std::max(e, emin) - mbits);
    const double r = round_as<M>(v / ulp, word_at<M>(words, i - begin)) * ulp;
    out[i] = static_cast<float>(std::min(std::max(r, -largest), largest));
  }
}

}  // namespace

template <typename F>
void round_float_grid(const F* x, size_t n, int exponent_bits, int mantissa_bits, FloatRound mode, const RngKey& key,
                      float* out) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int emin = 1 - bias;
  const double largest = (2.0 - std::ldexp(1.0, -mantissa_bits)) * std::ldexp(1.0, (1 << exponent_bits) - 2 - bias);
  with_mode(mode, [&](auto m) {
    for_chunks(n, sizeof(F), [&](size_t, size_t b, size_t e) {
      constexpr FloatRound M = decltype(m)::value;
      round_float_loop<M>(x, b, e, emin, mantissa_bits, largest, random_words<M>(key, b, e), out);
    });
  });
}

template <typename F>
double absmax_float(const F* x, size_t n) {
  std::vector<double> part((n + kChunk - 1) / kChunk, 0.0);
  for_chunks(n, sizeof(F), [&](size_t t, size_t b, size_t e) { part[t] = absmax_loop(x, b, e); });
  double m = 0;
  for (double v : part) m = std::max(m, v);
  return m;
}

template <typename F, typename Q>
void quantize_float(const F* x, size_t n, double step, int qmax, FloatRound mode, const RngKey& key, Q* q) {
#ifdef DSPTRAIN_X86
  [[maybe_unused]] const float inverse32 = float_inverse_of_pow2(step);
  // 1 / step a normal float32 and a normal float32 the other way: the float path's error bound holds
  [[maybe_unused]] const bool recip32 = std::isnormal(static_cast<float>(1.0 / step)) && std::isnormal(static_cast<float>(step));
#endif
  with_mode(mode, [&](auto m) {
    for_chunks(n, sizeof(F), [&](size_t, size_t b, size_t e) {
      constexpr FloatRound M = decltype(m)::value;
#ifdef DSPTRAIN_X86
      const bool avx512 = cpu_features().avx512f;
      if constexpr (std::is_same_v<F, float> && M != FloatRound::kSto) {
        if (avx512 && inverse32 != 0.0f) return quantize_pow2_f32_avx512<M>(x, b, e, step, inverse32, double(qmax), q);
        if (avx512 && recip32) return quantize_recip_f32_avx512<M>(x, b, e, step, double(qmax), q);
      }
      if (avx512) return quantize_loop_avx512<M>(x, b, e, step, double(qmax), random_words<M>(key, b, e), q);
#endif
      quantize_loop<M>(x, b, e, step, double(qmax), random_words<M>(key, b, e), q);
    });
  });
}

template <typename T>
void dequantize(const T* acc, size_t n, double scale, float* out) {
  for_chunks(n, sizeof(T), [&](size_t, size_t b, size_t e) { dequantize_loop(acc, b, e, scale, out); });
}

namespace {
// one pointer, so the loop vectorises (dequantize_loop's two may alias: GCC would check
// for overlap at run time and, finding it, take its scalar copy)
DSPTRAIN_CLONES void dequantize_in_place_loop(int32_t* acc, size_t begin, size_t end, double scale) {
  for (size_t i = begin; i < end; ++i) {
    const float v = static_cast<float>(static_cast<double>(acc[i]) * scale);
    std::memcpy(acc + i, &v, sizeof v);
  }
}
}  // namespace

void dequantize_in_place(int32_t* acc, size_t n, double scale) {
  for_chunks(n, sizeof(int32_t), [&](size_t, size_t b, size_t e) { dequantize_in_place_loop(acc, b, e, scale); });
}

namespace {

// k per group: clip(floor(log2(top / max(group max, top * 2**-64))), 0, kmax). The ratio is
// in [1, 2**64], a normal double, so floor(log2) is its exponent field less the bias.
DSPTRAIN_CLONES void mls_shifts_of_max(const float* gmax, size_t groups, double top, int kmax, uint8_t* k) {
  const double floor_max = top * std::ldexp(1.0, -64);
  for (size_t g = 0; g < groups; ++g) {
    const double ratio = top / std::max(static_cast<double>(gmax[g]), floor_max);
    uint64_t bits;
    std::memcpy(&bits, &ratio, sizeof bits);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    k[g] = static_cast<uint8_t>(std::min(std::max(e, 0), kmax));
  }
}

// the groups' max |x| first (a loop per group size that vectorises), then their k in
// one loop over the groups
DSPTRAIN_CLONES void mls_group_shifts(const float* x, size_t groups, int group, double top, int kmax, uint8_t* k) {
  thread_local std::vector<float> kept;
  if (kept.size() < groups) kept.resize(groups);
  float* gmax = kept.data();
  auto fixed = [&](auto size) {   // a group size known at compile time: the inner loop unrolls
    constexpr int kG = decltype(size)::value;
    for (size_t g = 0; g < groups; ++g) {
      float m = 0;
      for (int i = 0; i < kG; ++i) m = std::max(m, std::fabs(x[g * kG + i]));
      gmax[g] = m;
    }
  };
  if (group == 1) fixed(std::integral_constant<int, 1>{});
  else if (group == 2) fixed(std::integral_constant<int, 2>{});
  else if (group == 4) fixed(std::integral_constant<int, 4>{});
  else if (group == 8) fixed(std::integral_constant<int, 8>{});
  else if (group == 16) fixed(std::integral_constant<int, 16>{});
  else {
    for (size_t g = 0; g < groups; ++g) {
      float m = 0;
      for (int i = 0; i < group; ++i) m = std::max(m, std::fabs(x[g * group + i]));
      gmax[g] = m;
    }
  }
  mls_shifts_of_max(gmax, groups, top, kmax, k);
}

// Elements [begin, end) with ks[i - begin] the shift k of element i's group.
template <FloatRound M>
DSPTRAIN_CLONES void mls_elements(const float* x, size_t begin, size_t end, const uint8_t* ks, const double* scale_of_k,
                                  int kmax, double qmax, const uint32_t* words, int16_t* out) {
  for (size_t i = begin; i < end; ++i) {
    const int kk = ks[i - begin];
    const double v = static_cast<double>(x[i]) / scale_of_k[kk];
    const double q = std::min(std::max(round_as<M>(v, word_at<M>(words, i - begin)), -qmax), qmax);
    out[i] = static_cast<int16_t>(static_cast<int>(q) * (1 << (kmax - kk)));
  }
}

#ifdef DSPTRAIN_X86
// mls_elements 8 at a time on AVX-512 (kmax < 8): each element's divisor picked from the
// first eight scale_of_k values by its k (vpermpd), then the same double division, rounding
// (round8, as quantize_f's) and clamp; the int32 result shifted left by kmax - k.
template <FloatRound M>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void mls_elements_avx512(
    const float* x, size_t begin, size_t end, const uint8_t* ks, const double* scale_of_k, int kmax, double qmax,
    const uint32_t* words, int16_t* out) {
  const __m512d table = _mm512_loadu_pd(scale_of_k), hi = _mm512_set1_pd(qmax), lo = _mm512_set1_pd(-qmax);
  const __m256i top = _mm256_set1_epi32(kmax);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m128i k8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ks + (i - begin)));
    const __m512d div = _mm512_permutexvar_pd(_mm512_cvtepu8_epi64(k8), table);
    const __m512d v = _mm512_div_pd(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x + i)), div);
    const __m512d r = round8<M>(v, M == FloatRound::kSto ? words + (i - begin) : nullptr);
    const __m256i q = _mm512_maskz_cvttpd_epi32(0xFF, _mm512_maskz_min_pd(0xFF, _mm512_maskz_max_pd(0xFF, r, lo), hi));
    const __m256i aligned = _mm256_sllv_epi32(q, _mm256_sub_epi32(top, _mm256_cvtepu8_epi32(k8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtepi32_epi16(aligned));
  }
  mls_elements<M>(x, i, end, ks + (i - begin), scale_of_k, kmax, qmax, M == FloatRound::kSto ? words + (i - begin) : nullptr,
                  out);
}
#endif

// ks[i - begin] = k[i / group] for the elements [begin, end) (k itself for groups of one)
const uint8_t* element_shifts(const uint8_t* k, size_t begin, size_t end, int group) {
  if (group == 1) return k + begin;
  thread_local std::vector<uint8_t> kept;
  if (kept.size() < end - begin) kept.resize(end - begin);
  uint8_t* ks = kept.data();
  size_t i = begin, g = begin / group;
  for (; i < end && i % group; ++i) ks[i - begin] = k[g];   // the rest of a group split by the chunk
  if (i % group == 0) g = i / group;
  if (group == 2) {
    for (; i + 2 <= end; i += 2, ++g) ks[i - begin] = ks[i - begin + 1] = k[g];
  } else {
    for (; i + group <= end; i += group, ++g) std::memset(ks + (i - begin), k[g], group);
  }
  for (; i < end; ++i) ks[i - begin] = k[g];
  return ks;
}

}  // namespace

void quantize_mls(const float* x, size_t rows, int channels, int group, double top, double tensor_scale,
                  int kmax, int qmax, FloatRound mode, const RngKey& key, int16_t* aligned) {
  const size_t n = rows * channels, groups = n / group;
  std::vector<uint8_t> k(groups);
  double scale_of_k[16] = {};   // kmax <= 14: aligned elements fit int16 (the binding checks)
  for (int i = 0; i <= kmax && i < 16; ++i) scale_of_k[i] = tensor_scale * std::ldexp(1.0, -i);
  for_chunks(groups, sizeof(float) * group, [&](size_t, size_t b, size_t e) {
    mls_group_shifts(x + b * group, e - b, group, top, kmax, k.data() + b);
  });
#ifdef DSPTRAIN_X86
  const bool avx512 = cpu_features().avx512bw && cpu_features().avx512vl;
#else
  [[maybe_unused]] constexpr bool avx512 = false;  // read only under DSPTRAIN_X86 below
#endif
  with_mode(mode, [&](auto m) {
    for_chunks(n, sizeof(float), [&](size_t, size_t b, size_t e) {
      constexpr FloatRound M = decltype(m)::value;
      const uint8_t* ks = element_shifts(k.data(), b, e, group);
      const uint32_t* words = random_words<M>(key, b, e);
#ifdef DSPTRAIN_X86
      if (avx512 && kmax < 8) return mls_elements_avx512<M>(x, b, e, ks, scale_of_k, kmax, qmax, words, aligned);
#endif
      mls_elements<M>(x, b, e, ks, scale_of_k, kmax, qmax, words, aligned);
    });
  });
}

template double absmax_float<float>(const float*, size_t);
template double absmax_float<double>(const double*, size_t);
template void quantize_float<float, int8_t>(const float*, size_t, double, int, FloatRound, const RngKey&, int8_t*);
template void quantize_float<float, int16_t>(const float*, size_t, double, int, FloatRound, const RngKey&, int16_t*);
template void quantize_float<double, int8_t>(const double*, size_t, double, int, FloatRound, const RngKey&, int8_t*);
template void quantize_float<double, int16_t>(const double*, size_t, double, int, FloatRound, const RngKey&, int16_t*);
template void round_float_grid<float>(const float*, size_t, int, int, FloatRound, const RngKey&, float*);
template void round_float_grid<double>(const double*, size_t, int, int, FloatRound, const RngKey&, float*);
template void dequantize<int8_t>(const int8_t*, size_t, double, float*);   // NITI's int8 tensors into a float op
template void dequantize<int32_t>(const int32_t*, size_t, double, float*);
template void dequantize<int64_t>(const int64_t*, size_t, double, float*);

}  // namespace dsptrain
