// Both kernels split over rows of the output, each element computed by one thread in a
// fixed order: the result is the same at any thread count.
#include "gemm_exact.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#define DSPTRAIN_AVX2 __attribute__((target("avx2")))
#define DSPTRAIN_F16C __attribute__((target("avx2,f16c")))
#endif

namespace dsptrain {
namespace {

constexpr int kKStep = 16;  // int16 elements per AVX2 vector

int max_abs16(const int16_t* x, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<int>(x[i])));
  return m;
}

// rows of `src` [rows, k] copied into [rows, kp] with zero padding
std::vector<int16_t> padded(const int16_t* src, int rows, int k, int kp) {
  std::vector<int16_t> out(static_cast<size_t>(rows) * kp, 0);
  for (int r = 0; r < rows; ++r) std::memcpy(out.data() + static_cast<size_t>(r) * kp, src + static_cast<size_t>(r) * k, k * 2);
  return out;
}

void dot_rows_scalar(const int16_t* a, const int16_t* b, int m0, int m1, int n, int kp, int64_t* c) {
  for (int i = m0; i < m1; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int q = 0; q < kp; ++q) s += static_cast<int64_t>(a[static_cast<size_t>(i) * kp + q]) * b[static_cast<size_t>(j) * kp + q];
      c[static_cast<size_t>(i) * n + j] = s;
    }
}

#ifdef DSPTRAIN_X86
DSPTRAIN_AVX2 inline int64_t hsum64(__m256i v) {
  const __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
  const __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
  const __m256i s = _mm256_add_epi64(lo, hi);
  alignas(32) int64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), s);
  return t[0] + t[1] + t[2] + t[3];
}

// 2 rows of a x 2 rows of b per step; int32 lanes flushed to int64 every `block` steps
DSPTRAIN_AVX2 void dot_rows_avx2(const int16_t* a, const int16_t* b, int m0, int m1, int n, int kp, int block,
                                 int64_t* c) {
  const int steps = kp / kKStep;
  for (int i = m0; i < m1; i += 2) {
    const int ri = std::min(2, m1 - i);
    for (int j = 0; j < n; j += 2) {
      const int rj = std::min(2, n - j);
      const int16_t* a0 = a + static_cast<size_t>(i) * kp;
      const int16_t* a1 = a + static_cast<size_t>(i + ri - 1) * kp;
      const int16_t* b0 = b + static_cast<size_t>(j) * kp;
      const int16_t* b1 = b + static_cast<size_t>(j + rj - 1) * kp;
      int64_t s00 = 0, s01 = 0, s10 = 0, s11 = 0;
      for (int s0 = 0; s0 < steps; s0 += block) {
        __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
        const int s1 = std::min(steps, s0 + block);
        for (int s = s0; s < s1; ++s) {
          const __m256i va0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a0 + s * kKStep));
          const __m256i va1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a1 + s * kKStep));
          const __m256i vb0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + s * kKStep));
          const __m256i vb1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + s * kKStep));
          c00 = _mm256_add_epi32(c00, _mm256_madd_epi16(va0, vb0));
          c01 = _mm256_add_epi32(c01, _mm256_madd_epi16(va0, vb1));
          c10 = _mm256_add_epi32(c10, _mm256_madd_epi16(va1, vb0));
          c11 = _mm256_add_epi32(c11, _mm256_madd_epi16(va1, vb1));
        }
        s00 += hsum64(c00);
        s01 += hsum64(c01);
        s10 += hsum64(c10);
        s11 += hsum64(c11);
      }
      int64_t* ci = c + static_cast<size_t>(i) * n + j;
      ci[0] = s00;
      if (rj > 1) ci[1] = s01;
      if (ri > 1) {
        ci[n] = s10;
        if (rj > 1) ci[n + 1] = s11;
      }
    }
  }
}

DSPTRAIN_F16C inline __m256 round_fp16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 8 columns of c per vector; bp is b packed as [n/8][kp][8]
DSPTRAIN_F16C void fp16_rows_f16c(const float* a, const float* bp, int m0, int m1, int n, int k, int kp, int chunk,
                                  bool fp16_adds, float* c) {
  const int blocks = (n + 7) / 8, chunks = kp / chunk;
  for (int i = m0; i < m1; ++i) {
    const float* ar = a + static_cast<size_t>(i) * k;
    for (int nb = 0; nb < blocks; ++nb) {
      const float* bb = bp + static_cast<size_t>(nb) * kp * 8;
      __m256 total = _mm256_setzero_ps();
      for (int ch = 0; ch < chunks; ++ch) {
        __m256 acc = _mm256_setzero_ps();
        for (int q = ch * chunk; q < (ch + 1) * chunk; ++q) {
          const __m256 p = _mm256_mul_ps(_mm256_set1_ps(q < k ? ar[q] : 0.0f), _mm256_loadu_ps(bb + static_cast<size_t>(q) * 8));
          acc = fp16_adds ? round_fp16(_mm256_add_ps(acc, round_fp16(p))) : _mm256_add_ps(acc, p);
        }
        acc = round_fp16(acc);
        total = ch == 0 ? acc : round_fp16(_mm256_add_ps(total, acc));
      }
      alignas(32) float t[8];
      _mm256_store_ps(t, total);
      const int cols = std::min(8, n - nb * 8);
      std::memcpy(c + static_cast<size_t>(i) * n + nb * 8, t, cols * sizeof(float));
    }
  }
}
#endif

// float -> nearest FP16 value (ties to even, with subnormals, overflow to infinity), as float
float round_fp16_scalar(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  const float mag = std::fabs(x);
  int e;
  std::frexp(mag, &e);  // mag in [2**(e-1), 2**e)
  const int quantum = std::max(e - 1, -14) - 10;
  const float r = std::nearbyint(std::ldexp(mag, -quantum));
  const float v = std::ldexp(r, quantum);
  return std::copysign(v >= 65520.0f ? INFINITY : v, x);
}

void fp16_rows_scalar(const float* a, const float* bp, int m0, int m1, int n, int k, int kp, int chunk,
                      bool fp16_adds, float* c) {
  const int chunks = kp / chunk;
  for (int i = m0; i < m1; ++i)
    for (int j = 0; j < n; ++j) {
      const float* bb = bp + static_cast<size_t>(j / 8) * kp * 8 + j % 8;
      float total = 0.0f;
      for (int ch = 0; ch < chunks; ++ch) {
        float acc = 0.0f;
        for (int q = ch * chunk; q < (ch + 1) * chunk; ++q) {
          const float p = (q < k ? a[static_cast<size_t>(i) * k + q] : 0.0f) * bb[static_cast<size_t>(q) * 8];
          acc = fp16_adds ? round_fp16_scalar(acc + round_fp16_scalar(p)) : acc + p;
        }
        acc = round_fp16_scalar(acc);
        total = ch == 0 ? acc : round_fp16_scalar(total + acc);
      }
      c[static_cast<size_t>(i) * n + j] = total;
    }
}

bool has_f16c() {
#ifdef DSPTRAIN_X86
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

}  // namespace

void gemm_s16_s64(const int16_t* a, const int16_t* b, int m, int n, int k, int64_t* c) {
  const int kp = (k + kKStep - 1) / kKStep * kKStep;
  const std::vector<int16_t> ap = padded(a, m, k, kp), bp = padded(b, n, k, kp);
  // a lane adds two products per step: keep `block` steps inside int32
  const int64_t per_step = 2LL * max_abs16(a, static_cast<size_t>(m) * k) * max_abs16(b, static_cast<size_t>(n) * k);
  const int64_t block = per_step == 0 ? kp : ((1LL << 31) - 1) / per_step;
  const double macs = static_cast<double>(m) * n * k;
  SerialScope serial(small_op(macs));
  const int tasks = std::max(1, std::min((m + 1) / 2, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    const int m0 = static_cast<int>(static_cast<long long>(m) * t / tasks) / 2 * 2;
    const int m1 = t + 1 == tasks ? m : static_cast<int>(static_cast<long long>(m) * (t + 1) / tasks) / 2 * 2;
#ifdef DSPTRAIN_X86
    if (block >= 1 && __builtin_cpu_supports("avx2")) {
      dot_rows_avx2(ap.data(), bp.data(), m0, m1, n, kp, static_cast<int>(std::min<int64_t>(block, 1 << 20)), c);
      return;
    }
#endif
    dot_rows_scalar(ap.data(), bp.data(), m0, m1, n, kp, c);
  });
}

void gemm_fp16_chunked(const float* a, const float* b, int m, int n, int k, int chunk, bool fp16_adds, float* c) {
  chunk = std::max(1, std::min(chunk, k));
  const int kp = (k + chunk - 1) / chunk * chunk, blocks = (n + 7) / 8;
  std::vector<float> bp(static_cast<size_t>(blocks) * kp * 8, 0.0f);
  for (int j = 0; j < n; ++j)
    for (int q = 0; q < k; ++q) bp[(static_cast<size_t>(j / 8) * kp + q) * 8 + j % 8] = b[static_cast<size_t>(j) * k + q];
  const double macs = static_cast<double>(m) * n * kp;
  SerialScope serial(small_op(macs));
  const int tasks = std::max(1, std::min(m, 4 * pool_threads()));
  const bool vector = has_f16c();
  parallel_for(tasks, [&](int t) {
    const int m0 = static_cast<int>(static_cast<long long>(m) * t / tasks);
    const int m1 = static_cast<int>(static_cast<long long>(m) * (t + 1) / tasks);
#ifdef DSPTRAIN_X86
    if (vector) {
      fp16_rows_f16c(a, bp.data(), m0, m1, n, k, kp, chunk, fp16_adds, c);
      return;
    }
#endif
    fp16_rows_scalar(a, bp.data(), m0, m1, n, k, kp, chunk, fp16_adds, c);
  });
}

}  // namespace dsptrain
