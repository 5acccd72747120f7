// Float element-wise loops; chunked over the thread pool only when a tensor is large
// enough to pay for waking it (kTaskGrainBytes).
#include "eltwise_f32.h"

#include <algorithm>
#include <vector>

#include "thread_pool.h"

#include "target_clones.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_ELTWISE_AVX512 1
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_ELTWISE_AVX512
bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return yes;
}

inline __mmask16 first_lanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// The compensation layer a row at a time, its channels in the vector lanes (masked past
// the last): a layer's few channels (6, 16) left the compiler's loop over them scalar.
// The same float32 multiply then add per element as comp_fwd_rows.
__attribute__((target("avx512f"))) void comp_fwd_rows_avx512(const float* z, const float* s1, const float* shift,
                                                              size_t r0, size_t r1, int c, float* y) {
  for (int j0 = 0; j0 < c; j0 += 16) {
    const __mmask16 m = first_lanes(c - j0);
    const __m512 a = _mm512_maskz_loadu_ps(m, s1 + j0), b = _mm512_maskz_loadu_ps(m, shift + j0);
    for (size_t r = r0; r < r1; ++r) {
      const size_t at = r * c + j0;
      _mm512_mask_storeu_ps(y + at, m, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, z + at), a), b));
    }
  }
}

// The backward likewise, eight channels of doubles per vector; each lane sums its
// channel over the rows in order, as the scalar loop: the same bits.
__attribute__((target("avx512f,avx512vl"))) void comp_bwd_avx512(const float* err, const float* z, const double* s1, size_t rows,
                                                         int c, float* dz, double* gs, double* gb) {
  for (int j0 = 0; j0 < c; j0 += 8) {
    const __mmask8 m = static_cast<__mmask8>(first_lanes(std::min(8, c - j0)));
    const __m512d a = _mm512_maskz_loadu_pd(m, s1 + j0);
    __m512d sum_s = _mm512_setzero_pd(), sum_b = _mm512_setzero_pd();
    for (size_t r = 0; r < rows; ++r) {
      const size_t at = r * c + j0;
      const __m512d e = _mm512_maskz_cvtps_pd(0xFF, _mm256_maskz_loadu_ps(m, err + at));
      const __m512d zv = _mm512_maskz_cvtps_pd(0xFF, _mm256_maskz_loadu_ps(m, z + at));
      _mm256_mask_storeu_ps(dz + at, m, _mm512_maskz_cvtpd_ps(0xFF, _mm512_mul_pd(e, a)));
      sum_s = _mm512_add_pd(sum_s, _mm512_mul_pd(e, zv));
      sum_b = _mm512_add_pd(sum_b, e);
    }
    _mm512_mask_storeu_pd(gs + j0, m, sum_s);
    _mm512_mask_storeu_pd(gb + j0, m, sum_b);
  }
}
#endif

DSPTRAIN_CLONES void relu_loop(const float* x, size_t b, size_t e, float* y) {
  // NumPy's maximum(x, 0) keeps x when x >= 0 (so -0.0 stays -0.0) and when x is NaN
  for (size_t i = b; i < e; ++i) y[i] = (x[i] >= 0.0f || x[i] != x[i]) ? x[i] : 0.0f;
}

DSPTRAIN_CLONES void relu_bwd_loop(const float* err, const float* y, size_t b, size_t e, float* dx) {
  for (size_t i = b; i < e; ++i) dx[i] = y[i] > 0.0f ? err[i] : 0.0f;
}

DSPTRAIN_CLONES void comp_fwd_rows(const float* z, const float* s1, const float* shift, size_t r0, size_t r1,
                                   int c, float* y) {
  for (size_t r = r0; r < r1; ++r)
    for (int j = 0; j < c; ++j) y[r * c + j] = z[r * c + j] * s1[j] + shift[j];
}

template <typename F>
void elementwise(size_t n, size_t bytes, F body) {
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(static_cast<int>((n + 4095) / 4096), bytes, [&](int b, int e) {
    body(static_cast<size_t>(b) * 4096, std::min(n, static_cast<size_t>(e) * 4096));
  });
}

}  // namespace

void relu_f32(const float* x, size_t n, float* y) {
  elementwise(n, 8 * n, [&](size_t b, size_t e) { relu_loop(x, b, e, y); });
}

void relu_bwd_f32(const float* err, const float* y, size_t n, float* dx) {
  elementwise(n, 12 * n, [&](size_t b, size_t e) { relu_bwd_loop(err, y, b, e, dx); });
}

void compensation_fwd(const float* z, const float* scale, const float* shift, size_t rows, int channels, float* y) {
  std::vector<float> s1(channels);
  for (int j = 0; j < channels; ++j) s1[j] = 1.0f + scale[j];
  const size_t bytes = 8 * rows * channels;
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(static_cast<int>(rows), bytes, [&](int b, int e) {
#ifdef DSPTRAIN_ELTWISE_AVX512
    if (has_avx512()) return comp_fwd_rows_avx512(z, s1.data(), shift, b, e, channels, y);
#endif
    comp_fwd_rows(z, s1.data(), shift, b, e, channels, y);
  });
}

void compensation_bwd(const float* err, const float* z, const float* scale, size_t rows, int channels, float* dz,
                      float* d_scale, float* d_shift) {
  std::vector<double> s1(channels), gs(channels, 0.0), gb(channels, 0.0);
  for (int j = 0; j < channels; ++j) s1[j] = static_cast<double>(1.0f + scale[j]);
  // one pass, rows in order: the sums are NumPy's row-by-row reduction over the leading axes
#ifdef DSPTRAIN_ELTWISE_AVX512
  if (has_avx512()) {
    comp_bwd_avx512(err, z, s1.data(), rows, channels, dz, gs.data(), gb.data());
    rows = 0;   // done: only the float32 results below remain
  }
#endif
  for (size_t r = 0; r < rows; ++r) {
    const float* e = err + r * channels;
    const float* zr = z + r * channels;
    float* d = dz + r * channels;
    for (int j = 0; j < channels; ++j) {
      const double ev = e[j];
      d[j] = static_cast<float>(ev * s1[j]);
      gs[j] += ev * static_cast<double>(zr[j]);
      gb[j] += ev;
    }
  }
  for (int j = 0; j < channels; ++j) {
    d_scale[j] = static_cast<float>(gs[j]);
    d_shift[j] = static_cast<float>(gb[j]);
  }
}

}  // namespace dsptrain
