// What bn_cast.cpp (NITI's fused batch norm forward) and bn_cast_bwd.cpp (its backward)
// share: the layer's per-channel constants, the float-to-int8 cast of quant.cpp's
// quantize_f (mode by mode, four at a time on AVX2), and how a pass splits into tasks.
// Internal to those two files: an anonymous namespace, so each keeps its own copy (as when
// they were one file), target_clones' resolvers included.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "bn_cast.h"
#include "cpu_features.h"
#include "target_clones.h"
#include "thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_BN_AVX2 1
#endif

namespace dsptrain {
namespace {

constexpr size_t kBlock = 32;  // channels a task sums over every row (half a cache line of int8 per row)
// A pass over fewer int8 bytes than this runs on the caller: a few microseconds of work a
// task, where waking the pool and a second core's cold cache cost as much
constexpr size_t kParallelBytes = 4 * kTaskGrainBytes;

// NITI's exponent for a range (numerics.float_exponent): ceil(log2 m) - 7, 0 for m == 0
inline int niti_exponent(double m) {
  if (!(m > 0.0)) return 0;
  int e = 0;
  const double f = std::frexp(m, &e);
  return (f == 0.5 ? e - 1 : e) - 7;
}

template <FloatRound M>
inline double round_as(double v, uint32_t word) {  // quant.cpp's rounding, mode by mode
  if constexpr (M == FloatRound::kRound) return std::copysign(std::floor(std::fabs(v) + 0.5), v);
  else if constexpr (M == FloatRound::kNearestEven) return std::nearbyint(v);
  else return std::floor(v + static_cast<double>(static_cast<int32_t>(word >> 8)) * (1.0 / 16777216.0));
}

// a[0, n) / step rounded and clipped to +-127 (quantize_f); step a power of two, so the
// product with its inverse is the quotient exactly
template <FloatRound M>
DSPTRAIN_CLONES void quantize_row(const float* a, size_t n, double inv_step, const uint32_t* words, int8_t* q) {
  for (size_t i = 0; i < n; ++i) {
    const double r = round_as<M>(static_cast<double>(a[i]) * inv_step, M == FloatRound::kSto ? words[i] : 0u);
    q[i] = static_cast<int8_t>(static_cast<int>(std::min(std::max(r, -127.0), 127.0)));
  }
}

template <typename Body>
void with_mode(FloatRound mode, Body body) {
  if (mode == FloatRound::kRound) body(std::integral_constant<FloatRound, FloatRound::kRound>{});
  else if (mode == FloatRound::kNearestEven) body(std::integral_constant<FloatRound, FloatRound::kNearestEven>{});
  else body(std::integral_constant<FloatRound, FloatRound::kSto>{});
}

template <typename Body>
void with_act(BnAct fn, Body body) {
  if (fn == BnAct::kClip) body(std::integral_constant<BnAct, BnAct::kClip>{});
  else if (fn == BnAct::kRelu) body(std::integral_constant<BnAct, BnAct::kRelu>{});
  else body(std::integral_constant<BnAct, BnAct::kNone>{});
}

#ifdef DSPTRAIN_BN_AVX2
// Four doubles v (already divided by the step) rounded as round_as<kRound> -- copysign(floor(|v|
// + 0.5), v) -- clipped to +-127, as four int8 codes in an int32
__attribute__((target("avx2"))) inline int32_t round4_avx2(__m256d v) {
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d r = _mm256_round_pd(_mm256_add_pd(_mm256_andnot_pd(sign, v), _mm256_set1_pd(0.5)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256d clipped =
      _mm256_min_pd(_mm256_max_pd(_mm256_or_pd(r, _mm256_and_pd(sign, v)), _mm256_set1_pd(-127.0)), _mm256_set1_pd(127.0));
  const __m128i i32 = _mm256_cvttpd_epi32(clipped);
  return _mm_cvtsi128_si32(_mm_packs_epi16(_mm_packs_epi32(i32, i32), _mm_setzero_si128()));
}

__attribute__((target("avx2"))) inline size_t quantize_round_avx2(const float* a, size_t n, double inv_step, int8_t* q) {
  const __m256d inv = _mm256_set1_pd(inv_step);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const int32_t bytes = round4_avx2(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i)), inv));
    std::memcpy(q + i, &bytes, 4);
  }
  return i;
}
#endif

// quantize_row, four at a time on AVX2 in kRound
template <FloatRound M>
void quantize_floats(const float* a, size_t n, double inv_step, const uint32_t* words, int8_t* q) {
  size_t i = 0;
#ifdef DSPTRAIN_BN_AVX2
  if (M == FloatRound::kRound && cpu_features().avx2) i = quantize_round_avx2(a, n, inv_step, q);
#endif
  quantize_row<M>(a + i, n - i, inv_step, M == FloatRound::kSto ? words + i : nullptr, q + i);
}

// Per-channel constants of a layer, in double, as the float ops hold them.
struct Channels {
  std::vector<double> mu, inv, gamma, beta;
  double sx = 1.0;  // the input's 2**ex
  double lo = 0.0, hi = 0.0;
  // the backward's: the int8 inputs whose activation passes the error on, [open_lo, open_hi]
  std::vector<int32_t> open_lo, open_hi;
};

// body(r0, r1) over contiguous runs of rows, a task each
template <typename F>
void over_rows(size_t rows, size_t bytes_per_row, F body) {
  SerialScope serial(rows * bytes_per_row < kParallelBytes);
  parallel_ranges(static_cast<int>(rows), rows * bytes_per_row, [&](int b, int e) { body(size_t(b), size_t(e)); });
}

template <typename F>
void over_channel_blocks(size_t channels, size_t bytes, F body) {
  SerialScope serial(bytes < kParallelBytes);
  const int blocks = static_cast<int>((channels + kBlock - 1) / kBlock);
  parallel_ranges(blocks, bytes, [&](int b, int e) { body(size_t(b) * kBlock, std::min(channels, size_t(e) * kBlock)); });
}

}  // namespace
}  // namespace dsptrain
