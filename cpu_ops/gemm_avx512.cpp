// AVX-512 VNNI microkernel: 6 rows x 64 columns of int32 accumulators (24 zmm), one
// vpdpbusd per (row, 16 columns, 4 k). vpdpbusd multiplies u8 by s8, so A is packed as
// a + 128 (u8) and the product corrected by -128 * colsum(b) -- the zero-point trick
// fbgemm and oneDNN use for signed activations; the sums wrap mod 2^32, so the
// corrected result is exact whenever the true one fits int32.
#include "gemm_kernels.h"

#include <algorithm>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "round_lanes.h"

#define DSPTRAIN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace dsptrain {
namespace {

constexpr int kMR = 6, kNV = 4, kNR = 16 * kNV;

void pack_a_u8(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kMR>(a, rows, kc, static_cast<uint8_t*>(dst),
                    [](int8_t v) { return static_cast<uint8_t>(v ^ 0x80); });
}

// One group of 4 k: B's 64 columns x 4 bytes times the broadcast dword of each row.
template <typename RowWord>
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void dot_group(__m512i (&acc)[kMR][kNV], const int8_t* b,
                                                                    RowWord word) {
  __m512i bv[kNV];
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) bv[v] = _mm512_loadu_si512(b + v * 64);
  _mm_prefetch(reinterpret_cast<const char*>(b + 8 * kNR * 4), _MM_HINT_T0);
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    const __m512i av = _mm512_set1_epi32(word(r));
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
  }
}

// Adds B's column offsets (a first K block) or the C already there (later ones), and
// stores; a partial tile through a full-size temporary.
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void store_tile(__m512i (&acc)[kMR][kNV], int32_t* c,
                                                                     ptrdiff_t ldc, int mr_valid, int nr_valid,
                                                                     bool accumulate, const int32_t* col_offset) {
  const bool full = mr_valid == kMR && nr_valid == kNR;
  alignas(64) int32_t tmp[kMR * kNR];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      __m512i x = acc[r][v];
      if (!accumulate) x = _mm512_add_epi32(x, _mm512_loadu_si512(col_offset + v * 16));
      if (!full) {
        _mm512_store_si512(tmp + r * kNR + v * 16, x);
        continue;
      }
      int32_t* out = c + r * ldc + v * 16;
      if (accumulate) x = _mm512_add_epi32(x, _mm512_loadu_si512(out));
      _mm512_storeu_si512(out, x);
    }
  }
  if (!full) store_partial(tmp, kNR, c, ldc, mr_valid, nr_valid, accumulate);
}

DSPTRAIN_AVX512 void micro(const void* a_tile, const int8_t* b, int kgroups, int32_t* c,
                           ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                           const int32_t* col_offset) {
  __m512i acc[kMR][kNV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_setzero_si512();
  const int32_t* a = static_cast<const int32_t*>(a_tile);
  for (int g = 0; g < kgroups; ++g, a += kMR, b += kNR * 4) dot_group(acc, b, [a](int r) { return a[r]; });
  store_tile(acc, c, ldc, mr_valid, nr_valid, accumulate, col_offset);
}

// The products of a tile whose rows' bytes are read where they lie (no packed A): the
// broadcast dword of row r is at rows[r] + piece offset + 4 g. Shared by micro_rows and
// micro_rows_round, which differ only in how the tile leaves the registers.
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void rows_products(__m512i (&acc)[kMR][kNV],
                                                                         const uint8_t* const* rows,
                                                                         const APiece* pieces, int npieces,
                                                                         const int8_t* b) {
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_setzero_si512();
  for (int p = 0; p < npieces; ++p) {
    const uint8_t* a[kMR];
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) a[r] = rows[r] + pieces[p].off;
    const int groups = pieces[p].groups;
    b += static_cast<ptrdiff_t>(pieces[p].b_skip) * kNR * 4;
    for (int g = 0; g < groups; ++g, b += kNR * 4)
      dot_group(acc, b, [&a, g](int r) {
        int32_t w;
        std::memcpy(&w, a[r] + 4 * g, 4);
        return w;
      });
  }
}

// The same tile with each row's bytes read where they lie (rows_products).
DSPTRAIN_AVX512 void micro_rows(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b,
                                int32_t* c, ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                                const int32_t* col_offset) {
  __m512i acc[kMR][kNV];
  rows_products(acc, rows, pieces, npieces, b);
  store_tile(acc, c, ldc, mr_valid, nr_valid, accumulate, col_offset);
}

// A tile leaving the registers with its B column offsets: each valid row's 64 columns
// (masked to nr_valid) stored as int32 at c_at(r) and, where q_at(r) is not null, rounded
// to int8 there; their largest magnitude into *most.
template <typename RowC, typename RowQ>
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void round_out(__m512i (&acc)[kMR][kNV], RowC c_at, RowQ q_at,
                                                                    int mr_valid, int nr_valid,
                                                                    const int32_t* col_offset, int shift,
                                                                    RoundMode mode, uint32_t* most) {
  __mmask16 cols[kNV];
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) {
    const int left = nr_valid - 16 * v;
    cols[v] = left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
  __m512i top = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    if (r >= mr_valid) break;
    int32_t* c = c_at(r);
    int8_t* q = q_at(r);
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) {
      const __m512i x = _mm512_add_epi32(acc[r][v], _mm512_loadu_si512(col_offset + v * 16));
      _mm512_mask_storeu_epi32(c + v * 16, cols[v], x);
      top = _mm512_mask_max_epu32(top, cols[v], top, _mm512_abs_epi32(x));
      if (q != nullptr) _mm512_mask_cvtepi32_storeu_epi8(q + v * 16, cols[v], shift_round_lanes(x, shift, mode));
    }
  }
  *most = std::max(*most, _mm512_reduce_max_epu32(top));
}

// micro_rows with the tile also rounded from the registers (round_out).
DSPTRAIN_AVX512 void micro_rows_round(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b,
                                      int32_t* c, ptrdiff_t ldc, int8_t* q, ptrdiff_t ldq, int mr_valid, int nr_valid,
                                      const int32_t* col_offset, int shift, RoundMode mode, uint32_t* most) {
  __m512i acc[kMR][kNV];
  rows_products(acc, rows, pieces, npieces, b);
  round_out(acc, [c, ldc](int r) { return c + r * ldc; }, [q, ldq](int r) { return q + r * ldq; }, mr_valid, nr_valid,
            col_offset, shift, mode, most);
}

// The same with each row's results at its own address (the trimmed convolution's classes,
// whose rows are pixels scattered over the output); no int8 where q_rows is null.
DSPTRAIN_AVX512 void micro_rows_at(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b,
                                   int32_t* const* c_rows, int8_t* const* q_rows, int mr_valid, int nr_valid,
                                   const int32_t* col_offset, int shift, RoundMode mode, uint32_t* most) {
  __m512i acc[kMR][kNV];
  rows_products(acc, rows, pieces, npieces, b);
  round_out(acc, [c_rows](int r) { return c_rows[r]; },
            [q_rows](int r) { return q_rows != nullptr ? q_rows[r] : nullptr; }, mr_valid, nr_valid, col_offset, shift,
            mode, most);
}

// vpdpbusd with u8 ones: each dword lane adds its 4 signed bytes.
DSPTRAIN_AVX512 void colsum(const int8_t* b, int kgroups, int32_t* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc[kNV];
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) acc[v] = _mm512_setzero_si512();
  for (int g = 0; g < kgroups; ++g, b += kNR * 4)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[v] = _mm512_dpbusd_epi32(acc[v], ones, _mm512_loadu_si512(b + v * 64));
#pragma GCC unroll 4
  for (int v = 0; v < kNV; ++v) _mm512_storeu_si512(sums + v * 16, acc[v]);
}

// lanes[L] = (a[L], b[L], c[L], d[L]): a 4 x 4 transpose of 128-bit lanes.
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void transpose_lanes4(__m512i a, __m512i b, __m512i c, __m512i d,
                                                                           __m512i (&lanes)[4]) {
  const __m512i ab_lo = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i ab_hi = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i cd_lo = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i cd_hi = _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2));
  lanes[0] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
  lanes[1] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
  lanes[2] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
  lanes[3] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
}

// 16 rows x 16 dwords transposed in registers: two rounds of in-lane unpacks (dwords, then
// qwords) leave lane L of u[4 i + m] holding rows 4i..4i+3 of dword 4L + m; a 4 x 4
// transpose of 128-bit lanes gathers each dword's 16 rows into one vector.
DSPTRAIN_AVX512 inline __attribute__((always_inline)) void transpose_dwords16(const __m512i (&r)[16], __m512i (&out)[16]) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    __m512i lanes[4];
    transpose_lanes4(u[m], u[4 + m], u[8 + m], u[12 + m], lanes);
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) out[4 * l + m] = lanes[l];
  }
}

// pack_b of row-major weights, 16 columns x 16 groups at a time: group g of column j is
// dword g of row j, so each block is one dword transpose (the plain loop moved 4 bytes per
// column and group: 3 ms of a VGG-11 step at one thread).
DSPTRAIN_AVX512 int pack_panel_rows(const int8_t* src, ptrdiff_t row_stride, int cols, int groups, int8_t* dst) {
  const int done = groups / 16 * 16;
  for (int j0 = 0; j0 < kNR; j0 += 16) {
    for (int g0 = 0; g0 < done; g0 += 16) {
      __m512i r[16], out[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < cols ? _mm512_loadu_si512(src + (j0 + i) * row_stride + 4 * g0) : _mm512_setzero_si512();
      transpose_dwords16(r, out);
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) _mm512_storeu_si512(dst + static_cast<ptrdiff_t>(g0 + q) * kNR * 4 + j0 * 4, out[q]);
    }
  }
  return done;
}

// The 4-row byte interleave of a whole panel (64 columns) in zmm registers: in-lane byte
// then word unpacks give lane L of o[q] columns 16 L + 4 q .. + 3; the lane transpose puts
// each run of 16 columns in one vector (interleave4's SSE2 steps, four lanes at once).
DSPTRAIN_AVX512 void interleave_panel(const int8_t* const* rows, int8_t* dst) {
  const __m512i r0 = _mm512_loadu_si512(rows[0]), r1 = _mm512_loadu_si512(rows[1]);
  const __m512i r2 = _mm512_loadu_si512(rows[2]), r3 = _mm512_loadu_si512(rows[3]);
  const __m512i a = _mm512_unpacklo_epi8(r0, r1), b = _mm512_unpacklo_epi8(r2, r3);
  const __m512i c = _mm512_unpackhi_epi8(r0, r1), d = _mm512_unpackhi_epi8(r2, r3);
  __m512i lanes[4];
  transpose_lanes4(_mm512_unpacklo_epi16(a, b), _mm512_unpackhi_epi16(a, b), _mm512_unpacklo_epi16(c, d),
                   _mm512_unpackhi_epi16(c, d), lanes);
#pragma GCC unroll 4
  for (int l = 0; l < 4; ++l) _mm512_storeu_si512(dst + 64 * l, lanes[l]);
}

}  // namespace

const GemmKernel* kernel_avx512_vnni() {
  static const GemmKernel k = [] {
    GemmKernel g{Isa::kAvx512Vnni, kMR, kNR, 512, 192, 1, true, pack_a_u8, micro, colsum};
    g.micro_rows = micro_rows;
    g.micro_rows_round = micro_rows_round;
    g.micro_rows_at = micro_rows_at;
    g.pack_panel_rows = pack_panel_rows;
    g.interleave_panel = interleave_panel;
    return g;
  }();
  return &k;
}

}  // namespace dsptrain

#else
namespace dsptrain {
const GemmKernel* kernel_avx512_vnni() { return nullptr; }
}  // namespace dsptrain
#endif
