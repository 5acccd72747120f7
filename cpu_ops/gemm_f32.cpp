// The float32 GEMM: an AVX-512 microkernel of R rows x NV vectors of 16 columns held in
// registers (Goto's register blocking, as in BLIS's sgemm microkernels), the ragged last
// vector of a row loaded and stored under a mask, so B and C need no padding; a portable
// loop (vectorised by the compiler for each ISA) elsewhere. Both sum k in ascending order.
#include "gemm_f32.h"

#include <algorithm>
#include <cstddef>

#include "cpu_features.h"
#include "gemm.h"
#include "gemm_f32_avx2.h"
#include "target_clones.h"
#include "thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_F32_AVX512 1
#endif

namespace dsptrain {
namespace {

constexpr int kRows = 8;     // rows of C per unit of work split over the pool
constexpr int kVecs = 4;     // 16-float vectors of C per row: 64 columns per panel

#ifdef DSPTRAIN_F32_AVX512
// (The loops over R and NV are unrolled by pragma, so that GCC keeps acc[][] in registers
// rather than in memory across the k loop.)
template <int R, int NV>
__attribute__((target("avx512f"))) void micro(const GemmF32& g, int i0, int j0, int cols) {
  const int k = g.k;
  const ptrdiff_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  __m512 acc[R][NV];
  __mmask16 mask[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int left = cols - 16 * v;
    mask[v] = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
  }
  float* c = g.c + (i0 * ldc + j0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = g.accumulate ? _mm512_maskz_loadu_ps(mask[v], c + r * ldc + 16 * v) : _mm512_setzero_ps();
  const float* arow = g.a + i0 * lda;
  const float* bcol = g.b + j0;
  for (int kk = 0; kk < k; ++kk, bcol += ldb) {
    __m512 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = _mm512_maskz_loadu_ps(mask[v], bcol + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(arow[r * lda + kk]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mask[v], acc[r][v]);
}

// The 16 lanes added pairwise in a fixed order (through memory: GCC 12's own reduction
// intrinsic warns about an uninitialised vector inside its header).
__attribute__((target("avx512f"))) inline float sum_lanes(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  return t[0];
}

// The dot kernel: R rows of A x NJ rows of B (columns of C), 16 k at a time, the ragged
// end of K under a mask; each of the R x NJ vector sums is added across at the end.
template <int R, int NJ>
__attribute__((target("avx512f"))) void micro_dot(const GemmF32& g, int i0, int j0) {
  const int k = g.k;
  const ptrdiff_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  const float* a0 = g.a + i0 * lda;
  const float* b0 = g.b + j0 * ldb;
  __m512 acc[R][NJ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int k0 = 0; k0 < k; k0 += 16) {
    const int left = k - k0;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
    __m512 b[NJ];
#pragma GCC unroll 8
    for (int q = 0; q < NJ; ++q) b[q] = _mm512_maskz_loadu_ps(mask, b0 + q * ldb + k0);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_maskz_loadu_ps(mask, a0 + r * lda + k0);
#pragma GCC unroll 8
      for (int q = 0; q < NJ; ++q) acc[r][q] = _mm512_fmadd_ps(a, b[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NJ; ++q) {
      float* c = g.c + (i0 + r) * ldc + j0 + q;
      const float sum = sum_lanes(acc[r][q]);
      *c = g.accumulate ? *c + sum : sum;
    }
}

constexpr int kDotRows = 3, kDotCols = 4;

template <int R>
void dot_row_block(const GemmF32& g, int i) {
  int j = 0;
  for (; j + kDotCols <= g.n; j += kDotCols) micro_dot<R, kDotCols>(g, i, j);
  switch (g.n - j) {
    case 1: micro_dot<R, 1>(g, i, j); break;
    case 2: micro_dot<R, 2>(g, i, j); break;
    case 3: micro_dot<R, 3>(g, i, j); break;
    default: break;
  }
}

void rows_dot_avx512(const GemmF32& g, int i0, int i1) {
  int i = i0;
  for (; i + kDotRows <= i1; i += kDotRows) dot_row_block<kDotRows>(g, i);
  if (i1 - i == 2) dot_row_block<2>(g, i);
  if (i1 - i == 1) dot_row_block<1>(g, i);
}

// Rows of C per call: enough independent accumulators (R x NV >= 8) to hide the
// multiply-add's latency on both FMA ports, so one vector of columns takes 8 rows.
template <int NV>
void row_panel(const GemmF32& g, int i0, int i1, int j0, int cols) {
  constexpr int kR = NV == 1 ? 8 : 4;
  int i = i0;
  for (; i + kR <= i1; i += kR) micro<kR, NV>(g, i, j0, cols);
  for (; i + 4 <= i1; i += 4) micro<4, NV>(g, i, j0, cols);
  switch (i1 - i) {
    case 1: micro<1, NV>(g, i, j0, cols); break;
    case 2: micro<2, NV>(g, i, j0, cols); break;
    case 3: micro<3, NV>(g, i, j0, cols); break;
    default: break;
  }
}

void rows_avx512(const GemmF32& g, int i0, int i1) {
  for (int j0 = 0; j0 < g.n; j0 += 16 * kVecs) {
    const int cols = std::min(16 * kVecs, g.n - j0);
    switch ((cols + 15) / 16) {
      case 1: row_panel<1>(g, i0, i1, j0, cols); break;
      case 2: row_panel<2>(g, i0, i1, j0, cols); break;
      case 3: row_panel<3>(g, i0, i1, j0, cols); break;
      default: row_panel<4>(g, i0, i1, j0, cols); break;
    }
  }
}

#endif

// Portable, B as [N,K]: one element at a time, k ascending.
DSPTRAIN_CLONES void rows_dot_portable(const GemmF32& g, int i0, int i1) {
  for (int i = i0; i < i1; ++i)
    for (int j = 0; j < g.n; ++j) {
      const float* a = g.a + static_cast<ptrdiff_t>(i) * g.lda;
      const float* b = g.b + static_cast<ptrdiff_t>(j) * g.ldb;
      float sum = 0.0f;
      for (int kk = 0; kk < g.k; ++kk) sum = __builtin_fmaf(a[kk], b[kk], sum);
      float* c = g.c + static_cast<ptrdiff_t>(i) * g.ldc + j;
      *c = g.accumulate ? *c + sum : sum;
    }
}

// Portable: one row of C at a time, k outer so the inner loop runs along contiguous
// rows of B and C (the compiler vectorises it); fmaf keeps the microkernel's rounding.
DSPTRAIN_CLONES void rows_portable(const GemmF32& g, int i0, int i1) {
  for (int i = i0; i < i1; ++i) {
    float* c = g.c + static_cast<ptrdiff_t>(i) * g.ldc;
    if (!g.accumulate) std::fill(c, c + g.n, 0.0f);
    const float* a = g.a + static_cast<ptrdiff_t>(i) * g.lda;
    for (int kk = 0; kk < g.k; ++kk) {
      const float av = a[kk];
      const float* b = g.b + static_cast<ptrdiff_t>(kk) * g.ldb;
      for (int j = 0; j < g.n; ++j) c[j] = __builtin_fmaf(av, b[j], c[j]);
    }
  }
}

void rows(const GemmF32& g, int i0, int i1) {
#ifdef DSPTRAIN_F32_AVX512
  if (f32_avx512()) return g.b_nk ? rows_dot_avx512(g, i0, i1) : rows_avx512(g, i0, i1);
#endif
  if (!g.b_nk && f32_avx2()) return gemm_f32_rows_avx2(g, i0, i1);
  g.b_nk ? rows_dot_portable(g, i0, i1) : rows_portable(g, i0, i1);
}

}  // namespace

// The float kernels follow the int8 ISA setting (set_isa) only where it is lowered below
// the CPU's best, so that tests reach every float kernel on one machine; a CPU with
// AVX-512F but no VNNI (best: AVX2) still runs the AVX-512 float kernel.
bool f32_avx512() {
#ifdef DSPTRAIN_F32_AVX512
  const Isa isa = active_isa();
  return cpu_features().avx512f && (isa == best_isa() || isa == Isa::kAvx512Vnni || isa == Isa::kAmx);
#else
  return false;
#endif
}

void gemm_f32_serial(const GemmF32& g) {
  if (g.m > 0 && g.n > 0) rows(g, 0, g.m);
}

void gemm_f32(const GemmF32& g) {
  if (g.m <= 0 || g.n <= 0) return;
  SerialScope serial(small_op(double(g.m) * g.n * g.k));
  const int blocks = (g.m + kRows - 1) / kRows;
  parallel_ranges(blocks, static_cast<size_t>(g.m) * (g.k + g.n) * sizeof(float), [&](int b0, int b1) {
    rows(g, b0 * kRows, std::min(g.m, b1 * kRows));
  });
}

}  // namespace dsptrain
