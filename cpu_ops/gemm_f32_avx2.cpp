// The AVX2 microkernel: R rows x NV vectors of 8 columns of C held in registers across
// the whole k loop (Goto's register blocking; 6 x 16 is BLIS's Haswell sgemm shape: 12
// accumulators, two B vectors and one broadcast of A in the 16 ymm registers). The ragged
// last vector of a row is loaded and stored under a mask, so B and C need no padding.
#include "gemm_f32_avx2.h"

#include <algorithm>
#include <cstddef>

#include "cpu_features.h"
#include "gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_F32_AVX2 1
#endif

namespace dsptrain {

#ifdef DSPTRAIN_F32_AVX2
namespace {

constexpr int kVecs = 2;   // 8-float vectors of C per row: 16 columns per panel
constexpr int kRows = 6;

__attribute__((target("avx2"))) inline __m256i lanes_below(int left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int R, int NV>
__attribute__((target("avx2,fma"))) void micro(const GemmF32& g, int i0, int j0, int cols) {
  const ptrdiff_t lda = g.lda, ldb = g.ldb, ldc = g.ldc;
  __m256i mask[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) mask[v] = lanes_below(cols - 8 * v);
  __m256 acc[R][NV];
  float* c = g.c + (i0 * ldc + j0);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = g.accumulate ? _mm256_maskload_ps(c + r * ldc + 8 * v, mask[v]) : _mm256_setzero_ps();
  const float* arow = g.a + i0 * lda;
  const float* bcol = g.b + j0;
  for (int kk = 0; kk < g.k; ++kk, bcol += ldb) {
    __m256 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = _mm256_maskload_ps(bcol + 8 * v, mask[v]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(arow + r * lda + kk);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm256_maskstore_ps(c + r * ldc + 8 * v, mask[v], acc[r][v]);
}

template <int NV>
void row_panel(const GemmF32& g, int i0, int i1, int j0, int cols) {
  int i = i0;
  for (; i + kRows <= i1; i += kRows) micro<kRows, NV>(g, i, j0, cols);
  switch (i1 - i) {
    case 1: micro<1, NV>(g, i, j0, cols); break;
    case 2: micro<2, NV>(g, i, j0, cols); break;
    case 3: micro<3, NV>(g, i, j0, cols); break;
    case 4: micro<4, NV>(g, i, j0, cols); break;
    case 5: micro<5, NV>(g, i, j0, cols); break;
    default: break;
  }
}

}  // namespace

bool f32_avx2() {
  static const bool ok = cpu_features().avx2 && __builtin_cpu_supports("fma");
  return ok && active_isa() != Isa::kScalar;   // set_isa("scalar"): the portable loops
}

void gemm_f32_rows_avx2(const GemmF32& g, int i0, int i1) {
  for (int j0 = 0; j0 < g.n; j0 += 8 * kVecs) {
    const int cols = std::min(8 * kVecs, g.n - j0);
    if (cols > 8) row_panel<2>(g, i0, i1, j0, cols);
    else row_panel<1>(g, i0, i1, j0, cols);
  }
}

#else

bool f32_avx2() { return false; }
void gemm_f32_rows_avx2(const GemmF32&, int, int) {}

#endif

}  // namespace dsptrain
