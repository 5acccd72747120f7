// FP8's products: op(a) x b[K,N] with chunk-based accumulation on FP16 values (Wang et al.,
// NeurIPS 2018), rows of the output split over the threads, each element summed by one
// thread in a fixed order: the same result at any thread count. F16C converts eight
// lanes at a time where the CPU has it; the scalar loop rounds the same way.
#include "gemm_fp16_chunked.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "scratch.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#define DSPTRAIN_F16C __attribute__((target("avx2,f16c")))
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_X86
DSPTRAIN_F16C inline __m256 round_fp16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 8 columns of c per vector, 4 rows of a per pass (one load of b serves four rows); bp
// is b packed as [n/8][kp][8]. Products past k (the zero padding of the last chunk) are
// 0 * b, added as the reference adds them.
template <bool kFp16Adds>
DSPTRAIN_F16C void fp16_rows_f16c(const float* a, ptrdiff_t si, ptrdiff_t sq, const float* bp, int m0, int m1, int n,
                                  int k, int kp, int chunk, float* c) {
  constexpr int kR = 4;
  const int blocks = (n + 7) / 8, chunks = kp / chunk;
  for (int i0 = m0; i0 < m1; i0 += kR) {
    const int rows = std::min(kR, m1 - i0);
    const float* ar[kR];
    for (int r = 0; r < kR; ++r) ar[r] = a + static_cast<ptrdiff_t>(i0 + std::min(r, rows - 1)) * si;
    for (int nb = 0; nb < blocks; ++nb) {
      const float* bb = bp + static_cast<size_t>(nb) * kp * 8;
      __m256 total[kR];
      for (int ch = 0; ch < chunks; ++ch) {
        __m256 acc[kR];
        for (int r = 0; r < kR; ++r) acc[r] = _mm256_setzero_ps();
        const int q_end = (ch + 1) * chunk, q_real = std::min(q_end, k);
        for (int q = ch * chunk; q < q_end; ++q) {
          const __m256 bv = _mm256_loadu_ps(bb + static_cast<size_t>(q) * 8);
#pragma GCC unroll 4
          for (int r = 0; r < kR; ++r) {
            const __m256 p = _mm256_mul_ps(_mm256_set1_ps(q < q_real ? ar[r][q * sq] : 0.0f), bv);
            acc[r] = kFp16Adds ? round_fp16(_mm256_add_ps(acc[r], round_fp16(p))) : _mm256_add_ps(acc[r], p);
          }
        }
        for (int r = 0; r < kR; ++r) {
          acc[r] = round_fp16(acc[r]);
          total[r] = ch == 0 ? acc[r] : round_fp16(_mm256_add_ps(total[r], acc[r]));
        }
      }
      const int cols = std::min(8, n - nb * 8);
      for (int r = 0; r < rows; ++r) {
        alignas(32) float t[8];
        _mm256_store_ps(t, total[r]);
        std::memcpy(c + static_cast<size_t>(i0 + r) * n + nb * 8, t, cols * sizeof(float));
      }
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

void fp16_rows_scalar(const float* a, ptrdiff_t si, ptrdiff_t sq, const float* bp, int m0, int m1, int n, int k,
                      int kp, int chunk, bool fp16_adds, float* c) {
  const int chunks = kp / chunk;
  for (int i = m0; i < m1; ++i)
    for (int j = 0; j < n; ++j) {
      const float* bb = bp + static_cast<size_t>(j / 8) * kp * 8 + j % 8;
      float total = 0.0f;
      for (int ch = 0; ch < chunks; ++ch) {
        float acc = 0.0f;
        for (int q = ch * chunk; q < (ch + 1) * chunk; ++q) {
          const float p = (q < k ? a[i * si + q * sq] : 0.0f) * bb[static_cast<size_t>(q) * 8];
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

void matmul_fp16_chunked(const float* a, bool a_transposed, const float* b, int m, int n, int k, int chunk,
                         bool fp16_adds, float* c) {
  chunk = std::max(1, std::min(chunk, k));
  const int kp = (k + chunk - 1) / chunk * chunk, blocks = (n + 7) / 8;
  const ptrdiff_t si = a_transposed ? 1 : k, sq = a_transposed ? m : 1;
  thread_local Kept<std::vector<float>> kept;   // the caller's; the workers read it through bp
  std::vector<float>& bp = kept;
  bp.assign(static_cast<size_t>(blocks) * kp * 8, 0.0f);
  for (int q = 0; q < k; ++q) {   // b's rows are K-major already: [n/8][kp][8] takes 8 at a time
    const float* row = b + static_cast<size_t>(q) * n;
    for (int nb = 0; nb < blocks; ++nb)
      std::memcpy(bp.data() + (static_cast<size_t>(nb) * kp + q) * 8, row + nb * 8, std::min(8, n - nb * 8) * sizeof(float));
  }
  const double macs = static_cast<double>(m) * n * kp;
  SerialScope serial(small_op(macs));
  const int row_blocks = (m + 3) / 4;
  const int tasks = std::max(1, std::min(row_blocks, 4 * pool_threads()));
  [[maybe_unused]] const bool vector = has_f16c();
  parallel_for(tasks, [&](int t) {
    const int m0 = static_cast<int>(static_cast<long long>(row_blocks) * t / tasks) * 4;
    const int m1 = std::min(m, static_cast<int>(static_cast<long long>(row_blocks) * (t + 1) / tasks) * 4);
#ifdef DSPTRAIN_X86
    if (vector) {
      if (fp16_adds) fp16_rows_f16c<true>(a, si, sq, bp.data(), m0, m1, n, k, kp, chunk, c);
      else fp16_rows_f16c<false>(a, si, sq, bp.data(), m0, m1, n, k, kp, chunk, c);
      return;
    }
#endif
    fp16_rows_scalar(a, si, sq, bp.data(), m0, m1, n, k, kp, chunk, fp16_adds, c);
  });
}

ScratchList matmul_fp16_chunked_scratch(int n, int k, int chunk) {
  chunk = std::max(1, std::min(chunk, k));
  const size_t kp = (k + chunk - 1) / chunk * chunk, blocks = (n + 7) / 8;
  return {{"matmul_fp16.packed_b", blocks * kp * 8 * sizeof(float)}};
}

}  // namespace dsptrain
