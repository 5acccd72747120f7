// The backward of NITI's fused batch norm (bn_cast.h): from the int8 error and input and
// the forward's statistics, x-hat and the activation's gate recomputed per element, the
// gamma and beta gradients summed in bn_bwd_f32's order, and dx cast to int8 as quantize_f
// casts it: the bits of the unfused chain (bn_cast.cpp's header says how).
#include "bn_cast.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "bn_cast_rows.h"
#include "cpu_features.h"
#include "target_clones.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// The smallest q in [-128, 127] where `pred` (false, then true as q grows) holds; 128: nowhere
template <typename Pred>
int first_true(Pred pred) {
  int a = -128, b = 128;
  while (a < b) {
    const int m = a + (b - a) / 2;
    if (pred(m)) b = m;
    else a = m + 1;
  }
  return a;
}

// Each channel's open inputs (Channels::open_lo, open_hi): where the activation passes its
// error on, act_bwd_f32's clip slope (lo < y < hi, y as a double) or relu_bwd_f32's y > 0. The
// batch norm's output y is monotone in the int8 input (rounded affine maps), so that is an
// interval of inputs, whose ends bisection finds with those same comparisons: the backward's
// gate is then two integer compares an element.
template <BnAct A>
void gate_intervals(Channels& k, size_t channels) {
  k.open_lo.assign(channels, -128);
  k.open_hi.assign(channels, 127);
  if constexpr (A == BnAct::kNone) return;
  for (size_t c = 0; c < channels; ++c) {
    auto y = [&](int q) {
      const double h = (static_cast<double>(q) * k.sx - k.mu[c]) * k.inv[c];
      return static_cast<float>(k.gamma[c] * h + k.beta[c]);
    };
    const double lo = A == BnAct::kRelu ? 0.0 : k.lo, hi = A == BnAct::kRelu ? HUGE_VAL : k.hi;
    auto above = [&](int q) { return static_cast<double>(y(q)) > lo; };
    auto below = [&](int q) { return static_cast<double>(y(q)) < hi; };
    if (y(127) >= y(-128)) {  // non-decreasing: above holds on a suffix, below on a prefix
      k.open_lo[c] = first_true(above);
      k.open_hi[c] = first_true([&](int q) { return !below(q); }) - 1;
    } else {  // decreasing: the other way round
      k.open_lo[c] = first_true(below);
      k.open_hi[c] = first_true([&](int q) { return !above(q); }) - 1;
    }
  }
}

// The backward's per-channel constants beyond the forward's: the error's scale, the
// gradient sums and bn_bwd_f32's k = gamma * float32(1/std) / rows.
struct Grads {
  double se = 1.0, count = 1.0;
  std::vector<double> db, dg, k;
};

// The error the activation passes on (err2: the error, or 0 where the gate is shut) and
// x-hat (float32) at channel c of a row, recomputed from the int8 input
template <BnAct A>
inline void gated(const int8_t* xr, const int8_t* er, size_t c, const Channels& k, double se, double& e2, double& xh) {
  const double h = (static_cast<double>(xr[c]) * k.sx - k.mu[c]) * k.inv[c];
  xh = static_cast<float>(h);
  const bool open = (xr[c] >= k.open_lo[c]) & (xr[c] <= k.open_hi[c]);  // the gate (gate_intervals)
  // the error times 0 or 1, no branch (a shut gate's sign of zero changes no sum and no result)
  e2 = static_cast<double>(er[c]) * se * static_cast<double>(open);
}

// Pass 1, one row, channels [c, c1): bn_bwd_f32's sums of err2 and err2 * x-hat, added in row order
template <BnAct A>
void grad_sums_row(const int8_t* xr, const int8_t* er, size_t c, size_t c1, const Channels& k, Grads& s) {
  for (; c < c1; ++c) {
    double e2, xh;
    gated<A>(xr, er, c, k, s.se, e2, xh);
    s.db[c] += e2;
    s.dg[c] += e2 * xh;
  }
}

// Passes 2 and 3, one row, channels [c, n): the input error as bn_bwd_f32 writes it (float32)
template <BnAct A>
void dx_row(const int8_t* xr, const int8_t* er, size_t c, size_t n, const Channels& k, const Grads& s, float* dx) {
  for (; c < n; ++c) {
    double e2, xh;
    gated<A>(xr, er, c, k, s.se, e2, xh);
    dx[c] = static_cast<float>(s.k[c] * (s.count * e2 - s.db[c] - xh * s.dg[c]));
  }
}

#ifdef DSPTRAIN_BN_AVX2
// The backward's element work four channels a vector on AVX2: the scalar loops' double
// expressions one for one (conversions round to nearest as static_cast does; no FMA), with
// the activation's gate as a mask, where the scalar loops' select costs a mispredicted
// branch an element. Each returns the channels it did; the scalar loop takes the tail.
template <BnAct A>
__attribute__((target("avx2"))) inline void gated4(const int8_t* xr, const int8_t* er, size_t c, const Channels& k,
                                                   double se, __m256d& e2, __m256d& xh) {
  int32_t xb, eb;
  std::memcpy(&xb, xr + c, 4);
  std::memcpy(&eb, er + c, 4);
  const __m128i xi = _mm_cvtepi8_epi32(_mm_cvtsi32_si128(xb));
  const __m256d h = _mm256_mul_pd(
      _mm256_sub_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(xi), _mm256_set1_pd(k.sx)), _mm256_loadu_pd(&k.mu[c])),
      _mm256_loadu_pd(&k.inv[c]));
  xh = _mm256_cvtps_pd(_mm256_cvtpd_ps(h));
  const __m256d ev = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(eb))), _mm256_set1_pd(se));
  if constexpr (A == BnAct::kNone) {
    e2 = ev;
  } else {  // open_lo <= x <= open_hi: the gate (gate_intervals), widened to the doubles' lanes
    const __m128i shut = _mm_or_si128(_mm_cmpgt_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&k.open_lo[c])), xi),
                                      _mm_cmpgt_epi32(xi, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&k.open_hi[c]))));
    e2 = _mm256_andnot_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(shut)), ev);
  }
}

template <BnAct A>
__attribute__((target("avx2"))) size_t grad_sums_avx2(const int8_t* xr, const int8_t* er, size_t c0, size_t c1,
                                                       const Channels& k, double se, double* db, double* dg) {
  size_t c = c0;
  for (; c + 4 <= c1; c += 4) {
    __m256d e2, xh;
    gated4<A>(xr, er, c, k, se, e2, xh);
    _mm256_storeu_pd(db + (c - c0), _mm256_add_pd(_mm256_loadu_pd(db + (c - c0)), e2));
    _mm256_storeu_pd(dg + (c - c0), _mm256_add_pd(_mm256_loadu_pd(dg + (c - c0)), _mm256_mul_pd(e2, xh)));
  }
  return c;
}

template <BnAct A>
__attribute__((target("avx2"))) inline __m128 dx4(const int8_t* xr, const int8_t* er, size_t c, const Channels& k,
                                                  const Grads& s) {
  __m256d e2, xh;
  gated4<A>(xr, er, c, k, s.se, e2, xh);
  const __m256d inner = _mm256_sub_pd(_mm256_sub_pd(_mm256_mul_pd(_mm256_set1_pd(s.count), e2), _mm256_loadu_pd(&s.db[c])),
                                      _mm256_mul_pd(xh, _mm256_loadu_pd(&s.dg[c])));
  return _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_loadu_pd(&s.k[c]), inner));
}

// max |dx| over a row's channels [0, c), c the channels done (a multiple of 4)
template <BnAct A>
__attribute__((target("avx2"))) size_t dx_absmax_avx2(const int8_t* xr, const int8_t* er, size_t n, const Channels& k,
                                                       const Grads& s, float& top) {
  const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  __m128 m = _mm_setzero_ps();
  size_t c = 0;
  for (; c + 4 <= n; c += 4) m = _mm_max_ps(m, _mm_and_ps(dx4<A>(xr, er, c, k, s), magnitude));
  float lanes[4];
  _mm_storeu_ps(lanes, m);
  top = std::max(std::max(top, std::max(lanes[0], lanes[1])), std::max(lanes[2], lanes[3]));
  return c;
}

// dx rounded to int8 at a power-of-two step, nearest with halves away from zero (quantize_row's
// kRound: copysign(floor(|v| + 0.5), v), clipped to +-127), over a row's channels [0, c)
template <BnAct A>
__attribute__((target("avx2"))) size_t dx_round_avx2(const int8_t* xr, const int8_t* er, size_t n, const Channels& k,
                                                      const Grads& s, double inv_step, int8_t* q) {
  const __m256d inv = _mm256_set1_pd(inv_step);
  size_t c = 0;
  for (; c + 4 <= n; c += 4) {
    const int32_t bytes = round4_avx2(_mm256_mul_pd(_mm256_cvtps_pd(dx4<A>(xr, er, c, k, s)), inv));
    std::memcpy(q + c, &bytes, 4);
  }
  return c;
}
#endif

template <BnAct A>
void grad_sums(const int8_t* xr, const int8_t* er, size_t c0, size_t c1, const Channels& k, Grads& s) {
  size_t c = c0;
#ifdef DSPTRAIN_BN_AVX2
  if (cpu_features().avx2) c = grad_sums_avx2<A>(xr, er, c0, c1, k, s.se, s.db.data() + c0, s.dg.data() + c0);
#endif
  grad_sums_row<A>(xr, er, c, c1, k, s);
}

DSPTRAIN_CLONES float absmax_row(const float* a, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

// The largest |dx| of a row, folded into `top`
template <BnAct A>
void dx_absmax(const int8_t* xr, const int8_t* er, size_t n, const Channels& k, const Grads& s, float* row, float& top) {
  size_t c = 0;
#ifdef DSPTRAIN_BN_AVX2
  if (cpu_features().avx2) c = dx_absmax_avx2<A>(xr, er, n, k, s, top);
#endif
  dx_row<A>(xr, er, c, n, k, s, row);
  top = std::max(top, absmax_row(row + c, n - c));
}

// A row's dx quantized (quantize_row's rounding, words: the row's random words in kSto)
template <BnAct A, FloatRound M>
void dx_quantized(const int8_t* xr, const int8_t* er, size_t n, const Channels& k, const Grads& s, double inv_step,
                  const uint32_t* words, float* row, int8_t* q) {
  size_t c = 0;
#ifdef DSPTRAIN_BN_AVX2
  if (M == FloatRound::kRound && cpu_features().avx2) c = dx_round_avx2<A>(xr, er, n, k, s, inv_step, q);
#endif
  dx_row<A>(xr, er, c, n, k, s, row);
  quantize_floats<M>(row + c, n - c, inv_step, M == FloatRound::kSto ? words + c : nullptr, q + c);
}

}  // namespace

void bn_act_bwd_s8(const int8_t* err, int ee, const int8_t* x, int ex, size_t rows, size_t channels,
                   const double* stats, const float* gamma, const float* beta, BnActFn act, FloatRound mode,
                   const RngKey& key, int8_t* dx, int* edx, float* d_gamma, float* d_beta) {
  const size_t C = channels;
  Channels k;
  k.sx = std::ldexp(1.0, ex);
  k.lo = act.lo;
  k.hi = act.hi;
  k.mu.assign(stats, stats + C);
  k.inv.assign(stats + C, stats + 2 * C);
  k.gamma.assign(gamma, gamma + C);
  k.beta.assign(beta, beta + C);
  Grads s;
  s.se = std::ldexp(1.0, ee);
  s.count = double(rows);
  s.db.assign(C, 0.0);
  s.dg.assign(C, 0.0);
  s.k.assign(C, 0.0);
  *edx = 0;
  with_act(act.fn, [&](auto a_tag) {
    constexpr BnAct A = decltype(a_tag)::value;
    gate_intervals<A>(k, C);
    over_channel_blocks(C, 2 * rows * C, [&](size_t c0, size_t c1) {
      for (size_t r = 0; r < rows; ++r) grad_sums<A>(x + r * C, err + r * C, c0, c1, k, s);
    });
    for (size_t c = 0; c < C; ++c) {
      s.k[c] = k.gamma[c] * static_cast<double>(static_cast<float>(k.inv[c])) / s.count;
      d_gamma[c] = static_cast<float>(s.dg[c]);
      d_beta[c] = static_cast<float>(s.db[c]);
    }
    if (dx == nullptr) return;  // no layer below wants the input error: the gradients alone
    // the range of the input error, recomputed row by row (never kept as float32)
    float top = 0.0f;
    std::mutex merge;
    over_rows(rows, 2 * C, [&](size_t r0, size_t r1) {
      std::vector<float> row(C);
      float m = 0.0f;
      for (size_t r = r0; r < r1; ++r) dx_absmax<A>(x + r * C, err + r * C, C, k, s, row.data(), m);
      std::lock_guard<std::mutex> hold(merge);
      top = std::max(top, m);
    });
    *edx = niti_exponent(top);
    const double inv_step = std::ldexp(1.0, -*edx);
    with_mode(mode, [&](auto m_tag) {
      constexpr FloatRound M = decltype(m_tag)::value;
      over_rows(rows, 2 * C, [&](size_t r0, size_t r1) {
        std::vector<float> row(C);
        std::vector<uint32_t> words(M == FloatRound::kSto ? C : 0);
        for (size_t r = r0; r < r1; ++r) {
          if constexpr (M == FloatRound::kSto) fill_random_u32(key, r * C, C, words.data());
          dx_quantized<A, M>(x + r * C, err + r * C, C, k, s, inv_step, words.data(), row.data(), dx + r * C);
        }
      });
    });
  });
}

}  // namespace dsptrain
