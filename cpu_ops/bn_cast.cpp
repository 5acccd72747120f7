// NITI's batch norm between int8 tensors with its casts fused (bn_cast.h). Every value is
// computed as the unfused float ops compute it (layers_f32.cpp's bn_fwd_f32 / bn_bwd_f32,
// act_f32's clip, relu_f32, quant.cpp's quantize_f): the same double expressions in the
// same order, the channel sums in row order, so the int8 results and the gradients are the
// same bits. What changes is the memory: int8 in, int8 out, a row of float32 at a time.
#include "bn_cast.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bn_cast_rows.h"
#include "target_clones.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr size_t kTableRows = 1024;  // from this many rows a channel's 256-entry tables cost a small part of its elements

// act_f32's clip (double, one rounding), relu_f32 (x where x >= 0 or NaN, else +0.0), or none
template <BnAct A>
inline float activate(float y, double lo, double hi) {
  if constexpr (A == BnAct::kClip) return static_cast<float>(std::min(std::max(static_cast<double>(y), lo), hi));
  else if constexpr (A == BnAct::kRelu) return (y >= 0.0f || y != y) ? y : 0.0f;
  else return y;
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

}  // namespace dsptrain
