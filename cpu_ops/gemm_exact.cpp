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

// B is packed in panels of kNv columns: per pair of k, the two rows' kNv elements
// interleaved (b[2p][j], b[2p+1][j]), which is what pmaddwd multiplies against a
// broadcast pair (a[m][2p], a[m][2p+1]); K and N are zero padded.
constexpr int kNv = 8;        // int32 lanes of an AVX2 vector: output columns per vector
constexpr int kPanel = 2 * kNv;  // columns per panel: two vectors
constexpr int kRows = 4;      // rows of A per microkernel call

struct PackedS16 {
  std::vector<int16_t> b;     // [panels][pairs][kPanel][2]
  std::vector<int32_t> a;     // [m][pairs]: a's k pairs as one 32-bit word each
  int pairs = 0, panels = 0;
};

int max_abs16(const int16_t* x, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<int>(x[i])));
  return m;
}

void pack(const int16_t* a, bool a_t, const int16_t* b, int m, int n, int k, PackedS16* p) {
  p->pairs = (k + 1) / 2;
  p->panels = (n + kPanel - 1) / kPanel;
  p->b.assign(static_cast<size_t>(p->panels) * p->pairs * kPanel * 2, 0);
  for (int q = 0; q < k; ++q) {
    const int16_t* row = b + static_cast<size_t>(q) * n;
    for (int j = 0; j < n; ++j)
      p->b[((static_cast<size_t>(j / kPanel) * p->pairs + q / 2) * kPanel + j % kPanel) * 2 + q % 2] = row[j];
  }
  p->a.assign(static_cast<size_t>(m) * p->pairs, 0);
  for (int i = 0; i < m; ++i)
    for (int q = 0; q < k; ++q) {
      const int16_t v = a_t ? a[static_cast<size_t>(q) * m + i] : a[static_cast<size_t>(i) * k + q];
      uint32_t& w = reinterpret_cast<uint32_t&>(p->a[static_cast<size_t>(i) * p->pairs + q / 2]);
      w |= static_cast<uint32_t>(static_cast<uint16_t>(v)) << (16 * (q % 2));
    }
}

void rows_scalar(const PackedS16& p, int m0, int m1, int n, int64_t* c) {
  for (int i = m0; i < m1; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t s = 0;
      const int16_t* bp = p.b.data() + static_cast<size_t>(j / kPanel) * p.pairs * kPanel * 2 + (j % kPanel) * 2;
      for (int q = 0; q < p.pairs; ++q) {
        const uint32_t w = static_cast<uint32_t>(p.a[static_cast<size_t>(i) * p.pairs + q]);
        const int16_t a0 = static_cast<int16_t>(w & 0xffff), a1 = static_cast<int16_t>(w >> 16);
        s += static_cast<int64_t>(a0) * bp[q * kPanel * 2] + static_cast<int64_t>(a1) * bp[q * kPanel * 2 + 1];
      }
      c[static_cast<size_t>(i) * n + j] = s;
    }
}

#ifdef DSPTRAIN_X86
DSPTRAIN_AVX2 inline void add_lanes64(__m256i v, int64_t* dst) {
  alignas(32) int64_t lo[4], hi[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lo), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(hi), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
  for (int q = 0; q < 4; ++q) {
    dst[q] += lo[q];
    dst[4 + q] += hi[q];
  }
}

// rows [m0, m1) x every panel; int32 lanes flushed into int64 every `block` pairs
DSPTRAIN_AVX2 void rows_avx2(const PackedS16& p, int m0, int m1, int n, int block, int64_t* c) {
  for (int i0 = m0; i0 < m1; i0 += kRows) {
    const int rows = std::min(kRows, m1 - i0);
    const int32_t* ar[kRows];
    for (int r = 0; r < kRows; ++r) ar[r] = p.a.data() + static_cast<size_t>(i0 + std::min(r, rows - 1)) * p.pairs;
    for (int panel = 0; panel < p.panels; ++panel) {
      const int16_t* bp = p.b.data() + static_cast<size_t>(panel) * p.pairs * kPanel * 2;
      alignas(32) int64_t sum[kRows][kPanel] = {};
      for (int q0 = 0; q0 < p.pairs; q0 += block) {
        const int q1 = std::min(p.pairs, q0 + block);
        __m256i acc[kRows][2];
        for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
        for (int q = q0; q < q1; ++q) {
          const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + static_cast<size_t>(q) * kPanel * 2));
          const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + static_cast<size_t>(q) * kPanel * 2 + 16));
#pragma GCC unroll 4
          for (int r = 0; r < kRows; ++r) {
            const __m256i av = _mm256_set1_epi32(ar[r][q]);
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
          }
        }
        for (int r = 0; r < kRows; ++r) {
          add_lanes64(acc[r][0], sum[r]);
          add_lanes64(acc[r][1], sum[r] + kNv);
        }
      }
      const int cols = std::min(kPanel, n - panel * kPanel);
      for (int r = 0; r < rows; ++r)
        std::memcpy(c + static_cast<size_t>(i0 + r) * n + panel * kPanel, sum[r], cols * sizeof(int64_t));
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

void matmul_s16_s64(const int16_t* a, bool a_transposed, const int16_t* b, int m, int n, int k, int64_t* c) {
  if (k == 0) {
    std::fill(c, c + static_cast<size_t>(m) * n, 0);
    return;
  }
  const double macs = static_cast<double>(m) * n * k;
  SerialScope serial(small_op(macs));
  thread_local PackedS16 kept;   // the caller's; the workers read it through `packed`
  PackedS16& packed = kept;
  pack(a, a_transposed, b, m, n, k, &packed);
  // a lane adds two products per pair: keep `block` pairs inside int32
  const int64_t per_pair = 2LL * max_abs16(a, static_cast<size_t>(m) * k) * max_abs16(b, static_cast<size_t>(n) * k);
  [[maybe_unused]] const int64_t block = per_pair == 0 ? packed.pairs : ((1LL << 31) - 1) / per_pair;
  const int tasks = std::max(1, std::min((m + kRows - 1) / kRows, 4 * pool_threads()));
  const int row_blocks = (m + kRows - 1) / kRows;
  parallel_for(tasks, [&](int t) {
    const int m0 = static_cast<int>(static_cast<long long>(row_blocks) * t / tasks) * kRows;
    const int m1 = std::min(m, static_cast<int>(static_cast<long long>(row_blocks) * (t + 1) / tasks) * kRows);
#ifdef DSPTRAIN_X86
    if (block >= 1 && __builtin_cpu_supports("avx2")) {
      rows_avx2(packed, m0, m1, n, static_cast<int>(std::min<int64_t>(block, 1 << 20)), c);
      return;
    }
#endif
    rows_scalar(packed, m0, m1, n, c);
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
  [[maybe_unused]] const bool vector = has_f16c();
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
