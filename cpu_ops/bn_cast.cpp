// NITI's batch norm between int8 tensors with its casts fused (bn_cast.h). Every value is
// computed as the unfused float ops compute it (layers_f32.cpp's bn_fwd_f32 / bn_bwd_f32,
// act_f32's clip, relu_f32, quant.cpp's quantize_f): the same double expressions in the
// same order, the channel sums in row order, so the int8 results and the gradients are the
// same bits. What changes is the memory: int8 in, int8 out, a row of float32 at a time.
#include "bn_cast.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

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
constexpr size_t kTableRows = 1024;  // from this many rows a channel's 256-entry tables cost a small part of its elements

// NITI's exponent for a range (numerics.float_exponent): ceil(log2 m) - 7, 0 for m == 0
int niti_exponent(double m) {
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

__attribute__((target("avx2"))) size_t quantize_round_avx2(const float* a, size_t n, double inv_step, int8_t* q) {
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

// act_f32's clip (double, one rounding), relu_f32 (x where x >= 0 or NaN, else +0.0), or none
template <BnAct A>
inline float activate(float y, double lo, double hi) {
  if constexpr (A == BnAct::kClip) return static_cast<float>(std::min(std::max(static_cast<double>(y), lo), hi));
  else if constexpr (A == BnAct::kRelu) return (y >= 0.0f || y != y) ? y : 0.0f;
  else return y;
}

// Per-channel constants of a layer, in double, as the float ops hold them.
struct Channels {
  std::vector<double> mu, inv, gamma, beta;
  double sx = 1.0;  // the input's 2**ex
  double lo = 0.0, hi = 0.0;
  // the backward's: the int8 inputs whose activation passes the error on, [open_lo, open_hi]
  std::vector<int32_t> open_lo, open_hi;
};

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

// A row of activations: a[c] for c in [0, n) of int8 inputs xr
template <BnAct A>
DSPTRAIN_CLONES void activations_row(const int8_t* xr, size_t n, const Channels& k, float* a) {
  const double *mu = k.mu.data(), *inv = k.inv.data(), *g = k.gamma.data(), *b = k.beta.data();
  for (size_t c = 0; c < n; ++c) {
    const double h = (static_cast<double>(xr[c]) * k.sx - mu[c]) * inv[c];
    a[c] = activate<A>(static_cast<float>(g[c] * h + b[c]), k.lo, k.hi);
  }
}

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

// Pass 1 of the forward over channels [c0, c1): the sum of each channel's int8 inputs and
// the smallest and largest one.
DSPTRAIN_CLONES void sum_range(const int8_t* x, size_t rows, size_t channels, size_t c0, size_t c1, int64_t* sum,
                               int* lo, int* hi) {
  const size_t w = c1 - c0;
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* xr = x + r * channels + c0;
    for (size_t j = 0; j < w; ++j) {
      sum[j] += xr[j];
      lo[j] = std::min(lo[j], int(xr[j]));
      hi[j] = std::max(hi[j], int(xr[j]));
    }
  }
}

// Pass 2: sum((x - mu)**2) in row order (bn_fwd_f32's order), channels [c0, c1)
DSPTRAIN_CLONES void squares_range(const int8_t* x, size_t rows, size_t channels, size_t c0, size_t c1, double sx,
                                   const double* mu, double* sq) {
  const size_t w = c1 - c0;
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* xr = x + r * channels + c0;
    for (size_t j = 0; j < w; ++j) {
      const double d = static_cast<double>(xr[j]) * sx - mu[j];
      sq[j] += d * d;
    }
  }
}

}  // namespace

void bn_act_s8(const int8_t* x, size_t rows, size_t channels, int ex, const float* gamma, const float* beta,
               const float* mean, const float* var, bool training, double momentum, double eps, BnActFn act,
               FloatRound mode, const RngKey& key, int8_t* y, int* ey, double* stats, float* new_mean,
               float* new_var) {
  const size_t C = channels;
  Channels k;
  k.sx = std::ldexp(1.0, ex);
  k.lo = act.lo;
  k.hi = act.hi;
  k.mu.assign(C, 0.0);
  k.inv.assign(C, 0.0);
  k.gamma.assign(gamma, gamma + C);
  k.beta.assign(beta, beta + C);
  std::vector<int> lo(C, 128), hi(C, -129);
  over_channel_blocks(C, 2 * rows * C, [&](size_t c0, size_t c1) {
    const size_t w = c1 - c0;
    std::vector<double> sq(w, 0.0);
    std::vector<int64_t> sum(w, 0);
    sum_range(x, rows, C, c0, c1, sum.data(), lo.data() + c0, hi.data() + c0);
    if (training) {
      // the float inputs' sum in double is exact (multiples of 2**ex far below 2**53 of them)
      for (size_t j = 0; j < w; ++j) k.mu[c0 + j] = static_cast<double>(sum[j]) * k.sx / double(rows);
      squares_range(x, rows, C, c0, c1, k.sx, k.mu.data() + c0, sq.data());
    }
    for (size_t j = 0; j < w; ++j) {
      const size_t c = c0 + j;
      double sigma2;
      if (training) {
        sigma2 = sq[j] / double(rows);
        const double unbiased = sigma2 * double(rows) / double(std::max<size_t>(rows - 1, 1));
        new_mean[c] = static_cast<float>((1 - momentum) * mean[c] + momentum * k.mu[c]);
        new_var[c] = static_cast<float>((1 - momentum) * var[c] + momentum * unbiased);
      } else {
        k.mu[c] = mean[c];
        sigma2 = var[c];
        new_mean[c] = mean[c];
        new_var[c] = var[c];
      }
      k.inv[c] = 1.0 / std::sqrt(sigma2 + eps);
      stats[c] = k.mu[c];
      stats[C + c] = k.inv[c];
    }
  });
  with_act(act.fn, [&](auto a_tag) {
    constexpr BnAct A = decltype(a_tag)::value;
    // the range: each channel's map from int8 input to activation is monotone (a rounded
    // affine map, then clip or ReLU), so its largest |a| is at its smallest or largest input
    double top = 0.0;
    for (size_t c = 0; c < C; ++c) {
      if (lo[c] > hi[c]) continue;
      for (int q : {lo[c], hi[c]}) {
        const double h = (static_cast<double>(q) * k.sx - k.mu[c]) * k.inv[c];
        const float a = activate<A>(static_cast<float>(k.gamma[c] * h + k.beta[c]), k.lo, k.hi);
        top = std::max(top, static_cast<double>(std::fabs(a)));
      }
    }
    *ey = niti_exponent(top);
    const double inv_step = std::ldexp(1.0, -*ey);
    const bool tables = rows >= kTableRows;
    std::vector<float> table;  // channel c's activation of input q at [c * 256 + q + 128]
    if (tables) {
      table.resize(C * 256);
      over_rows(256, 8 * C, [&](size_t q0, size_t q1) {  // "row" q + 128: every channel's input q
        std::vector<float> a(C);
        std::vector<int8_t> row(C);
        for (size_t at = q0; at < q1; ++at) {
          std::fill(row.begin(), row.end(), static_cast<int8_t>(int(at) - 128));
          activations_row<A>(row.data(), C, k, a.data());
          for (size_t c = 0; c < C; ++c) table[c * 256 + at] = a[c];
        }
      });
    }
    with_mode(mode, [&](auto m_tag) {
      constexpr FloatRound M = decltype(m_tag)::value;
      if (tables && M != FloatRound::kSto) {  // the int8 output is a function of the int8 input too
        std::vector<int8_t> codes(C * 256);
        for (size_t c = 0; c < C; ++c) quantize_row<M>(&table[c * 256], 256, inv_step, nullptr, &codes[c * 256]);
        over_rows(rows, 2 * C, [&](size_t r0, size_t r1) {
          for (size_t r = r0; r < r1; ++r) {
            const int8_t* xr = x + r * C;
            int8_t* yr = y + r * C;
            for (size_t c = 0; c < C; ++c) yr[c] = codes[c * 256 + size_t(int(xr[c]) + 128)];
          }
        });
        return;
      }
      over_rows(rows, 2 * C, [&](size_t r0, size_t r1) {
        std::vector<float> a(C);
        std::vector<uint32_t> words(M == FloatRound::kSto ? C : 0);
        for (size_t r = r0; r < r1; ++r) {
          const int8_t* xr = x + r * C;
          if (tables) {
            for (size_t c = 0; c < C; ++c) a[c] = table[c * 256 + size_t(int(xr[c]) + 128)];
          } else {
            activations_row<A>(xr, C, k, a.data());
          }
          if constexpr (M == FloatRound::kSto) fill_random_u32(key, r * C, C, words.data());
          quantize_floats<M>(a.data(), C, inv_step, words.data(), y + r * C);
        }
      });
    });
  });
}

namespace {

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
