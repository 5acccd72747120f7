// Both kernels split over rows of the output, each element computed by one thread in a
// fixed order: the result is the same at any thread count.
#include "gemm_exact.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "conv_s16_planar.h"
#include "conv_s16_taps.h"
#include "gemm.h"
#include "scratch.h"
#include "target_clones.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#define DSPTRAIN_AVX2 __attribute__((target("avx2")))
#define DSPTRAIN_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif

#include "gemm_s16_packed.h"

namespace dsptrain {
namespace s16 {

inline int32_t a_word(const PackedS16& p, int i, int q) {
  int32_t w;
  std::memcpy(&w, p.a_words + 2 * (i * p.stride_i + q * p.stride_p), sizeof w);
  return w;
}

// a scan of both whole operands per call: written so that it vectorises (it cost more
// than the AVX-512 products on LeNet's narrow shapes when it did not)
DSPTRAIN_CLONES int max_abs16(const int16_t* x, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = x[i] < 0 ? -static_cast<int>(x[i]) : static_cast<int>(x[i]);
    m = v > m ? v : m;
  }
  return m;
}

#ifdef DSPTRAIN_X86
// one full panel of a pair of rows: s0[0..16) and s1[0..16) interleaved into dst[0..32)
__attribute__((target("avx512f,avx512bw"))) inline void interleave_panel(const int16_t* s0, const int16_t* s1,
                                                                          int16_t* dst) {
  const __m512i both = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1)), 1);
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(order, both));
}

#endif

// A: rows of even length are read in place (a pair is one 32-bit word); odd ones are
// copied with a zero at the end; a transposed a[K, M] is interleaved two rows at a time
// into pair-major words. B: per pair of rows and panel, the two rows interleaved.
DSPTRAIN_CLONES void pack_a(const int16_t* a, bool a_t, int m, int k, PackedS16* p) {
  p->pairs = (k + 1) / 2;
  const int pairs = p->pairs;
  if (!a_t && k % 2 == 0) {
    p->a_words = a;
    p->stride_i = pairs;
    p->stride_p = 1;
  } else if (!a_t) {
    p->a.assign(static_cast<size_t>(m) * pairs, 0);
    int16_t* dst = reinterpret_cast<int16_t*>(p->a.data());
    for (int i = 0; i < m; ++i) std::memcpy(dst + static_cast<size_t>(i) * 2 * pairs, a + static_cast<size_t>(i) * k, k * 2);
    p->a_words = dst;
    p->stride_i = pairs;
    p->stride_p = 1;
  } else {
    p->a.resize(static_cast<size_t>(m) * pairs);
    for (int q = 0; q < pairs; ++q) {
      const int16_t* r0 = a + static_cast<size_t>(2 * q) * m;
      const int16_t* r1 = 2 * q + 1 < k ? r0 + m : nullptr;
      int32_t* dst = p->a.data() + static_cast<size_t>(q) * m;
      if (r1)
        for (int i = 0; i < m; ++i) dst[i] = pair_word(r0[i], r1[i]);
      else
        for (int i = 0; i < m; ++i) dst[i] = pair_word(r0[i], 0);
    }
    p->a_words = reinterpret_cast<const int16_t*>(p->a.data());
    p->stride_i = 1;
    p->stride_p = m;
  }
}

DSPTRAIN_CLONES void pack_b(const int16_t* b, int n, int k, PackedS16* p) {
  p->pairs = (k + 1) / 2;
  p->panels = (n + kPanel - 1) / kPanel;
  const int pairs = p->pairs;
  p->b.assign(static_cast<size_t>(p->panels) * pairs * kPanel * 2, 0);
#ifdef DSPTRAIN_X86
  const bool wide = has_avx512bw();
#endif
  for (int q = 0; q < pairs; ++q) {
    const int16_t* r0 = b + static_cast<size_t>(2 * q) * n;
    const int16_t* r1 = 2 * q + 1 < k ? r0 + n : nullptr;
    for (int panel = 0; panel < p->panels; ++panel) {
      int16_t* dst = p->b.data() + (static_cast<size_t>(panel) * pairs + q) * kPanel * 2;
      const int cols = std::min(kPanel, n - panel * kPanel);
      const int16_t* s0 = r0 + panel * kPanel;
      const int16_t* s1 = r1 ? r1 + panel * kPanel : nullptr;
#ifdef DSPTRAIN_X86
      if (s1 && cols == kPanel && wide) {
        interleave_panel(s0, s1, dst);
        continue;
      }
#endif
      if (s1)
        for (int j = 0; j < cols; ++j) {
          dst[2 * j] = s0[j];
          dst[2 * j + 1] = s1[j];
        }
      else
        for (int j = 0; j < cols; ++j) dst[2 * j] = s0[j];
    }
  }
}

void pack(const int16_t* a, bool a_t, const int16_t* b, int m, int n, int k, PackedS16* p) {
  pack_a(a, a_t, m, k, p);
  pack_b(b, n, k, p);
}

// row i of the result is written at c + (i - c_row0) * n
void rows_scalar(const PackedS16& p, int m0, int m1, int n, int64_t* c, int c_row0 = 0) {
  for (int i = m0; i < m1; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t s = 0;
      const int16_t* bp = p.b.data() + static_cast<size_t>(j / kPanel) * p.pairs * kPanel * 2 + (j % kPanel) * 2;
      for (int q = 0; q < p.pairs; ++q) {
        const uint32_t w = static_cast<uint32_t>(a_word(p, i, q));
        const int16_t a0 = static_cast<int16_t>(w & 0xffff), a1 = static_cast<int16_t>(w >> 16);
        s += static_cast<int64_t>(a0) * bp[q * kPanel * 2] + static_cast<int64_t>(a1) * bp[q * kPanel * 2 + 1];
      }
      c[static_cast<size_t>(i - c_row0) * n + j] = s;
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
DSPTRAIN_AVX2 void rows_avx2(const PackedS16& p, int m0, int m1, int n, int block, int64_t* c, int c_row0 = 0) {
  for (int i0 = m0; i0 < m1; i0 += kRows) {
    const int rows = std::min(kRows, m1 - i0);
    int rr[kRows];
    for (int r = 0; r < kRows; ++r) rr[r] = i0 + std::min(r, rows - 1);
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
            const __m256i av = _mm256_set1_epi32(a_word(p, rr[r], q));
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
        std::memcpy(c + static_cast<size_t>(i0 + r - c_row0) * n + panel * kPanel, sum[r], cols * sizeof(int64_t));
    }
  }
}

// The same walk on AVX-512 VNNI: one zmm holds a panel's 16 columns as int32 lanes, and
// vpdpwssd adds a pair's two int16 products into them in one instruction (AVX2 needs
// pmaddwd + paddd per half-panel). Lanes wrap mod 2**32 exactly as pmaddwd + paddd do,
// and `block` keeps every true partial sum inside int32, so the int64 sums are equal.
DSPTRAIN_AVX512VNNI void rows_avx512vnni(const PackedS16& p, int m0, int m1, int n, int block, int64_t* c,
                                         int c_row0 = 0) {
  constexpr int kR = 8;   // rows per pass: one load of b serves eight rows
  for (int i0 = m0; i0 < m1; i0 += kR) {
    const int rows = std::min(kR, m1 - i0);
    int rr[kR];
    for (int r = 0; r < kR; ++r) rr[r] = i0 + std::min(r, rows - 1);
    for (int panel = 0; panel < p.panels; ++panel) {
      const int16_t* bp = p.b.data() + static_cast<size_t>(panel) * p.pairs * kPanel * 2;
      __m512i sum_lo[kR], sum_hi[kR];
      for (int r = 0; r < kR; ++r) sum_lo[r] = sum_hi[r] = _mm512_setzero_si512();
      for (int q0 = 0; q0 < p.pairs; q0 += block) {
        const int q1 = std::min(p.pairs, q0 + block);
        __m512i acc[kR];
        for (int r = 0; r < kR; ++r) acc[r] = _mm512_setzero_si512();
        for (int q = q0; q < q1; ++q) {
          const __m512i bv = _mm512_loadu_si512(bp + static_cast<size_t>(q) * kPanel * 2);
#pragma GCC unroll 8
          for (int r = 0; r < kR; ++r) acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_set1_epi32(a_word(p, rr[r], q)), bv);
        }
        for (int r = 0; r < kR; ++r) {
          sum_lo[r] = _mm512_add_epi64(sum_lo[r], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[r])));
          sum_hi[r] = _mm512_add_epi64(sum_hi[r], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[r], 1)));
        }
      }
      const int cols = std::min(kPanel, n - panel * kPanel);
      const __mmask8 lo = static_cast<__mmask8>((1u << std::min(cols, 8)) - 1);
      const __mmask8 hi = static_cast<__mmask8>((1u << std::max(cols - 8, 0)) - 1);
      for (int r = 0; r < rows; ++r) {
        int64_t* dst = c + static_cast<size_t>(i0 + r - c_row0) * n + panel * kPanel;
        _mm512_mask_storeu_epi64(dst, lo, sum_lo[r]);
        if (hi) _mm512_mask_storeu_epi64(dst + 8, hi, sum_hi[r]);
      }
    }
  }
}

// rows_avx512vnni when every partial sum of the whole reduction fits int32 (block >=
// pairs, LeNet's products): no int64 sums inside the loop, and two panels per pass so
// that each broadcast of a row's pair serves 32 columns; the int32 lanes go to int64
// once, at the store. Same integers as the general walk.
template <int kP>
DSPTRAIN_AVX512VNNI inline void panels_one_block(const PackedS16& p, const int* rr, int rows, int i0, int panel, int n,
                                                 int64_t* c, int c_row0) {
  constexpr int kR = 8;
  __m512i acc[kR][kP];
  for (int r = 0; r < kR; ++r)
    for (int h = 0; h < kP; ++h) acc[r][h] = _mm512_setzero_si512();
  const size_t panel_stride = static_cast<size_t>(p.pairs) * kPanel * 2;
  const int16_t* bp = p.b.data() + static_cast<size_t>(panel) * panel_stride;
  for (int q = 0; q < p.pairs; ++q) {
    __m512i bv[kP];
    for (int h = 0; h < kP; ++h) bv[h] = _mm512_loadu_si512(bp + h * panel_stride + static_cast<size_t>(q) * kPanel * 2);
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const __m512i av = _mm512_set1_epi32(a_word(p, rr[r], q));
      for (int h = 0; h < kP; ++h) acc[r][h] = _mm512_dpwssd_epi32(acc[r][h], av, bv[h]);
    }
  }
  for (int h = 0; h < kP; ++h) {
    const int cols = std::min(kPanel, n - (panel + h) * kPanel);
    const __mmask8 lo = static_cast<__mmask8>((1u << std::min(cols, 8)) - 1);
    const __mmask8 hi = static_cast<__mmask8>((1u << std::max(cols - 8, 0)) - 1);
    for (int r = 0; r < rows; ++r) {
      int64_t* dst = c + static_cast<size_t>(i0 + r - c_row0) * n + (panel + h) * kPanel;
      _mm512_mask_storeu_epi64(dst, lo, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[r][h])));
      if (hi) _mm512_mask_storeu_epi64(dst + 8, hi, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[r][h], 1)));
    }
  }
}

DSPTRAIN_AVX512VNNI void rows_avx512vnni_one_block(const PackedS16& p, int m0, int m1, int n, int64_t* c, int c_row0) {
  constexpr int kR = 8;
  for (int i0 = m0; i0 < m1; i0 += kR) {
    const int rows = std::min(kR, m1 - i0);
    int rr[kR];
    for (int r = 0; r < kR; ++r) rr[r] = i0 + std::min(r, rows - 1);
    int panel = 0;
    for (; panel + 2 <= p.panels; panel += 2) panels_one_block<2>(p, rr, rows, i0, panel, n, c, c_row0);
    if (panel < p.panels) panels_one_block<1>(p, rr, rows, i0, panel, n, c, c_row0);
  }
}

#endif

// a lane adds two products per pair: `block` pairs keep every partial sum inside int32
// (0 when even one pair could overflow: the scalar int64 path)
int block_of_max(int max_a, int max_b, int pairs) {
  const int64_t per_pair = 2LL * max_a * max_b;
  const int64_t block = per_pair == 0 ? pairs : ((1LL << 31) - 1) / per_pair;
  return static_cast<int>(std::min<int64_t>(block, 1 << 20));
}

int pairs_per_block(const PackedS16& p, const int16_t* a, const int16_t* b, int m, int n, int k) {
  return block_of_max(max_abs16(a, static_cast<size_t>(m) * k), max_abs16(b, static_cast<size_t>(n) * k), p.pairs);
}

// rows per microkernel pass: the ISA the int8 kernels use (set_isa can force a narrower
// one, which tests use to run the AVX2 and scalar paths here too)
int row_step_of(Isa isa) { return isa == Isa::kAvx512Vnni || isa == Isa::kAmx ? 8 : kRows; }

// rows [m0, m1) of the product on the widest kernel the ISA allows
void product_rows(const PackedS16& p, int m0, int m1, int n, int block, int64_t* c, int c_row0) {
#ifdef DSPTRAIN_X86
  const Isa isa = active_isa();
  if (block >= p.pairs && row_step_of(isa) == 8) return rows_avx512vnni_one_block(p, m0, m1, n, c, c_row0);
  if (block >= 1 && row_step_of(isa) == 8) return rows_avx512vnni(p, m0, m1, n, block, c, c_row0);
  if (block >= 1 && isa != Isa::kScalar && __builtin_cpu_supports("avx2")) return rows_avx2(p, m0, m1, n, block, c, c_row0);
#endif
  rows_scalar(p, m0, m1, n, c, c_row0);
}

// A weight gradient's long reduction (a[K, M] transposed, K the batch's pixels, M and N
// a layer's channels and taps) in chunks of kChunkK rows of both operands: each chunk is
// packed into a small buffer that stays in the cache (packing all of b at once wrote
// megabytes), multiplied, and its sums added to the task's int64 partial; the chunks
// split over the threads (a product over few rows used one), and the partials add up
// in task order: integers, so the same at any thread count.

void k_chunked(const int16_t* a, const int16_t* b, int m, int n, int k, int64_t* c) {
  PackedS16 shape_only;
  shape_only.pairs = (k + 1) / 2;
  const int block = pairs_per_block(shape_only, a, b, m, n, k);
  const int chunks = (k + kChunkK - 1) / kChunkK;
  const int tasks = std::max(1, std::min(chunks, 4 * pool_threads()));
  const size_t mn = static_cast<size_t>(m) * n;
  std::vector<int64_t> partial(static_cast<size_t>(tasks) * mn, 0);
  parallel_for(tasks, [&](int t) {
    thread_local Kept<PackedS16> packed;
    thread_local Kept<std::vector<int64_t>> sums;
    sums.resize(mn);
    int64_t* mine = partial.data() + static_cast<size_t>(t) * mn;
    const int c0 = static_cast<int>(static_cast<long long>(chunks) * t / tasks);
    const int c1 = static_cast<int>(static_cast<long long>(chunks) * (t + 1) / tasks);
    for (int ch = c0; ch < c1; ++ch) {
      const int k0 = ch * kChunkK, kc = std::min(kChunkK, k - k0);
      pack(a + static_cast<size_t>(k0) * m, true, b + static_cast<size_t>(k0) * n, m, n, kc, &packed);
      product_rows(packed, 0, m, n, std::min(block, packed.pairs), sums.data(), 0);
      for (size_t i = 0; i < mn; ++i) mine[i] += sums[i];
    }
  });
  std::copy(partial.begin(), partial.begin() + mn, c);
  for (int t = 1; t < tasks; ++t)
    for (size_t i = 0; i < mn; ++i) c[i] += partial[static_cast<size_t>(t) * mn + i];
}


}  // namespace s16

using namespace s16;

void matmul_s16_s64(const int16_t* a, bool a_transposed, const int16_t* b, int m, int n, int k, int64_t* c) {
  if (k == 0) {
    std::fill(c, c + static_cast<size_t>(m) * n, 0);
    return;
  }
  const double macs = static_cast<double>(m) * n * k;
  SerialScope serial(small_op(macs));
  if (a_transposed && k >= 2 * kChunkK) return k_chunked(a, b, m, n, k, c);
  thread_local Kept<PackedS16> kept;   // the caller's; the workers read it through `packed`
  PackedS16& packed = kept;
  pack(a, a_transposed, b, m, n, k, &packed);
  const int block = pairs_per_block(packed, a, b, m, n, k);
  const int row_step = row_step_of(active_isa());
  const int tasks = std::max(1, std::min((m + row_step - 1) / row_step, 4 * pool_threads()));
  const int row_blocks = (m + row_step - 1) / row_step;
  parallel_for(tasks, [&](int t) {
    const int m0 = static_cast<int>(static_cast<long long>(row_blocks) * t / tasks) * row_step;
    const int m1 = std::min(m, static_cast<int>(static_cast<long long>(row_blocks) * (t + 1) / tasks) * row_step);
    product_rows(packed, m0, m1, n, block, c, 0);
  });
}
// The sizes pack() grows its kept buffers to.
ScratchList matmul_s16_scratch(int m, int n, int k, bool a_transposed) {
  if (k == 0) return {};
  if (a_transposed && k >= 2 * kChunkK) {   // k_chunked: a chunk's packed operands and sums, per pool thread
    const size_t pairs = kChunkK / 2, panels = (n + kPanel - 1) / kPanel, threads = pool_threads();
    return {{"matmul_s16.chunk_b (per thread)", threads * panels * pairs * kPanel * 2 * sizeof(int16_t)},
            {"matmul_s16.chunk_a_pairs (per thread)", threads * m * pairs * sizeof(int32_t)},
            {"matmul_s16.chunk_sums (per thread)", threads * static_cast<size_t>(m) * n * sizeof(int64_t)}};
  }
  const size_t pairs = (k + 1) / 2, panels = (n + kPanel - 1) / kPanel;
  ScratchList out{{"matmul_s16.packed_b", panels * pairs * kPanel * 2 * sizeof(int16_t)}};
  if (a_transposed || k % 2) out.emplace_back("matmul_s16.a_pairs", static_cast<size_t>(m) * pairs * sizeof(int32_t));
  return out;
}

}  // namespace dsptrain
