// 256-bit x86 microkernels: AVX-VNNI (vpdpbusd on ymm, VEX encoded, the same offset
// trick as gemm_avx512.cpp) and plain AVX2. AVX2's vpmaddubsw saturates its int16 pair
// sums (255*127*2 > 32767 with the offset trick's a + 128), so the AVX2 path widens to
// int16 and uses vpmaddwd, which is exact: A is packed as int16, B widened in registers.
// Where an A block holds no negative value (a ReLU's output: the forward's activations),
// A is packed as bytes and vpmaddubsw runs on it directly: a in [0, 127] times b in
// [-128, 127] gives pair sums in [-32512, 32258], exact in int16 (docs/depthwise.md);
// where B's panels hold none (the weight gradient's activations), the same with B unsigned.
#include "gemm_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define DSPTRAIN_AVXVNNI __attribute__((target("avx2,avxvnni")))
#define DSPTRAIN_AVX2 __attribute__((target("avx2")))

namespace dsptrain {
namespace {

// ---------------------------------------------------------------- AVX-VNNI: 6 x 16
constexpr int kVnniMR = 6, kVnniNV = 2, kVnniNR = 8 * kVnniNV;

void pack_a_u8(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kVnniMR>(a, rows, kc, static_cast<uint8_t*>(dst),
                        [](int8_t v) { return static_cast<uint8_t>(v ^ 0x80); });
}

DSPTRAIN_AVXVNNI void micro_vnni(const void* a_tile, const int8_t* b, int kgroups, int32_t* c,
                                 ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                                 const int32_t* col_offset) {
  __m256i acc[kVnniMR][kVnniNV];
#pragma GCC unroll 8
  for (int r = 0; r < kVnniMR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kVnniNV; ++v) acc[r][v] = _mm256_setzero_si256();
  const int32_t* a = static_cast<const int32_t*>(a_tile);
  for (int g = 0; g < kgroups; ++g, a += kVnniMR, b += kVnniNR * 4) {
    __m256i bv[kVnniNV];
#pragma GCC unroll 2
    for (int v = 0; v < kVnniNV; ++v)
      bv[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + v * 32));
#pragma GCC unroll 8
    for (int r = 0; r < kVnniMR; ++r) {
      const __m256i av = _mm256_set1_epi32(a[r]);
#pragma GCC unroll 2
      for (int v = 0; v < kVnniNV; ++v) acc[r][v] = _mm256_dpbusd_avx_epi32(acc[r][v], av, bv[v]);
    }
  }
  const bool full = mr_valid == kVnniMR && nr_valid == kVnniNR;
  alignas(32) int32_t tmp[kVnniMR * kVnniNR];
#pragma GCC unroll 8
  for (int r = 0; r < kVnniMR; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kVnniNV; ++v) {
      __m256i x = acc[r][v];
      if (!accumulate)
        x = _mm256_add_epi32(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col_offset + v * 8)));
      __m256i* out = reinterpret_cast<__m256i*>(full ? c + r * ldc + v * 8 : tmp + r * kVnniNR + v * 8);
      if (full && accumulate) x = _mm256_add_epi32(x, _mm256_loadu_si256(out));
      _mm256_storeu_si256(out, x);
    }
  }
  if (!full) store_partial(tmp, kVnniNR, c, ldc, mr_valid, nr_valid, accumulate);
}

// ---------------------------------------------------------------- AVX2: 6 x 8, vpmaddwd
// Per group of 4 k, a ymm of B widened to int16 holds 4 columns x 4 k; vpmaddwd against
// the row's 4 int16 A values (broadcast as one qword) leaves two partial sums per column,
// folded with vphaddd at the end.
constexpr int kAvx2MR = 6, kAvx2NR = 8;  // the assembly below is written for 6 rows
static_assert(kAvx2MR == 6, "micro_avx2's assembly names six rows");

void pack_a_s16(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kAvx2MR>(a, rows, kc, static_cast<int16_t*>(dst),
                        [](int8_t v) { return static_cast<int16_t>(v); });
}

DSPTRAIN_AVX2 void micro_avx2(const void* a_tile, const int8_t* b, int kgroups, int32_t* c,
                              ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                              const int32_t* /*col_offset: no offset trick here*/) {
  __m256i lo[kAvx2MR], hi[kAvx2MR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
  const int64_t* a = static_cast<const int64_t*>(a_tile);
  // The group's step in assembly: written with intrinsics, GCC hoists the six broadcasts,
  // runs out of the 16 ymm registers and keeps a third of the accumulators on the stack
  // (a store and a reload per group, half the kernel's speed). Here the 12 accumulators,
  // B's two widened vectors, the broadcast and one product fill the 16 exactly.
  __m256i b_lo, b_hi, av, prod;
  for (int g = 0; g < kgroups; ++g, a += kAvx2MR, b += kAvx2NR * 4) {
#define DSPTRAIN_AVX2_ROW(r)                                   \
  "vpbroadcastq " #r "*8(%[a]), %[av]\n\t"                     \
  "vpmaddwd %[av], %[b_lo], %[prod]\n\t"                       \
  "vpaddd %[prod], %[lo" #r "], %[lo" #r "]\n\t"               \
  "vpmaddwd %[av], %[b_hi], %[prod]\n\t"                       \
  "vpaddd %[prod], %[hi" #r "], %[hi" #r "]\n\t"
    asm("vpmovsxbw (%[b]), %[b_lo]\n\t"
        "vpmovsxbw 16(%[b]), %[b_hi]\n\t"
        DSPTRAIN_AVX2_ROW(0) DSPTRAIN_AVX2_ROW(1) DSPTRAIN_AVX2_ROW(2)
        DSPTRAIN_AVX2_ROW(3) DSPTRAIN_AVX2_ROW(4) DSPTRAIN_AVX2_ROW(5)
        : [lo0] "+x"(lo[0]), [lo1] "+x"(lo[1]), [lo2] "+x"(lo[2]), [lo3] "+x"(lo[3]), [lo4] "+x"(lo[4]),
          [lo5] "+x"(lo[5]), [hi0] "+x"(hi[0]), [hi1] "+x"(hi[1]), [hi2] "+x"(hi[2]), [hi3] "+x"(hi[3]),
          [hi4] "+x"(hi[4]), [hi5] "+x"(hi[5]), [b_lo] "=&x"(b_lo), [b_hi] "=&x"(b_hi), [av] "=&x"(av),
          [prod] "=&x"(prod)
        : [a] "r"(a), [b] "r"(b)
        : "memory");
#undef DSPTRAIN_AVX2_ROW
  }
  const bool full = mr_valid == kAvx2MR && nr_valid == kAvx2NR;
  alignas(32) int32_t tmp[kAvx2MR * kAvx2NR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) {
    // hadd gives columns [0 1 4 5 | 2 3 6 7]; the permute restores 0..7.
    __m256i x = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo[r], hi[r]), _MM_SHUFFLE(3, 1, 2, 0));
    __m256i* out = reinterpret_cast<__m256i*>(full ? c + r * ldc : tmp + r * kAvx2NR);
    if (full && accumulate) x = _mm256_add_epi32(x, _mm256_loadu_si256(out));
    _mm256_storeu_si256(out, x);
  }
  if (!full) store_partial(tmp, kAvx2NR, c, ldc, mr_valid, nr_valid, accumulate);
}

// ---------------------------------------------------------------- AVX2: 6 x 8, vpmaddubsw
// The same B panels; A's 4 bytes of a group broadcast as one dword. vpmaddubsw leaves, per
// column, the two pair sums of its 4 k in int16 (exact: a >= 0 is checked while packing);
// vpmaddwd by ones adds the pair into the column's int32 lane. Per 32 MACs that is
// vpmaddubsw + vpmaddwd + vpaddd, where the int16 kernel needs 2 x (vpmaddwd + vpaddd):
// the same multiplier-pipe work, a quarter fewer vector instructions, half of A's bytes.

// True (and A packed as bytes, 6-row tiles) when rows [0, rows) x k [0, kc) of `a` hold no
// negative value; false (dst untouched) otherwise.
DSPTRAIN_AVX2 bool pack_a_unsigned(MatrixS8 a, int rows, int kc, void* dst) {
  uint8_t negative = 0;  // OR of every byte: its top bit is set by any negative one
  for (int r = 0; r < rows; ++r) {
    const int8_t* src = a.row(r);
    if (a.k_stride == 1) {
      for (int kk = 0; kk < kc; ++kk) negative |= static_cast<uint8_t>(src[kk]);
    } else {
      for (int kk = 0; kk < kc; ++kk) negative |= static_cast<uint8_t>(src[static_cast<ptrdiff_t>(kk) * a.k_stride]);
    }
    if (negative & 0x80) return false;
  }
  pack_a_tiles<kAvx2MR>(a, rows, kc, static_cast<uint8_t*>(dst), [](int8_t v) { return static_cast<uint8_t>(v); });
  return true;
}

void pack_a_bytes(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kAvx2MR>(a, rows, kc, static_cast<int8_t*>(dst), [](int8_t v) { return v; });
}

// B_UNSIGNED: which side vpmaddubsw reads as unsigned bytes: A (false) or B (true).
template <bool B_UNSIGNED>
DSPTRAIN_AVX2 void micro_avx2_bytes(const void* a_tile, const int8_t* b, int kgroups, int32_t* c, ptrdiff_t ldc,
                                    int mr_valid, int nr_valid, bool accumulate,
                                    const int32_t* /*col_offset: no offset trick here*/) {
  __m256i acc[kAvx2MR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) acc[r] = _mm256_setzero_si256();
  const int32_t* a = static_cast<const int32_t*>(a_tile);
  const __m256i ones = _mm256_set1_epi16(1);
  // In assembly for the same reason as micro_avx2: the six accumulators, B, the ones, the
  // broadcast and one product stay in registers.
  __m256i bv, av, prod;
  for (int g = 0; g < kgroups; ++g, a += kAvx2MR, b += kAvx2NR * 4) {
// AT&T order: vpmaddubsw signed, unsigned, dst
#define DSPTRAIN_AVX2_U8_ROW(r, s8, u8)              \
  "vpbroadcastd " #r "*4(%[a]), %[av]\n\t"           \
  "vpmaddubsw %[" #s8 "], %[" #u8 "], %[prod]\n\t"   \
  "vpmaddwd %[ones], %[prod], %[prod]\n\t"           \
  "vpaddd %[prod], %[acc" #r "], %[acc" #r "]\n\t"
#define DSPTRAIN_AVX2_U8_ROWS(s8, u8)                                                           \
  DSPTRAIN_AVX2_U8_ROW(0, s8, u8) DSPTRAIN_AVX2_U8_ROW(1, s8, u8) DSPTRAIN_AVX2_U8_ROW(2, s8, u8) \
  DSPTRAIN_AVX2_U8_ROW(3, s8, u8) DSPTRAIN_AVX2_U8_ROW(4, s8, u8) DSPTRAIN_AVX2_U8_ROW(5, s8, u8)
#define DSPTRAIN_AVX2_U8_OPERANDS                                                                   \
  : [acc0] "+x"(acc[0]), [acc1] "+x"(acc[1]), [acc2] "+x"(acc[2]), [acc3] "+x"(acc[3]),             \
    [acc4] "+x"(acc[4]), [acc5] "+x"(acc[5]), [bv] "=&x"(bv), [av] "=&x"(av), [prod] "=&x"(prod)    \
  : [a] "r"(a), [b] "r"(b), [ones] "x"(ones)                                                        \
  : "memory"
    if constexpr (B_UNSIGNED) {
      asm("vmovdqu (%[b]), %[bv]\n\t" DSPTRAIN_AVX2_U8_ROWS(av, bv) DSPTRAIN_AVX2_U8_OPERANDS);
    } else {
      asm("vmovdqu (%[b]), %[bv]\n\t" DSPTRAIN_AVX2_U8_ROWS(bv, av) DSPTRAIN_AVX2_U8_OPERANDS);
    }
#undef DSPTRAIN_AVX2_U8_OPERANDS
#undef DSPTRAIN_AVX2_U8_ROWS
#undef DSPTRAIN_AVX2_U8_ROW
  }
  const bool full = mr_valid == kAvx2MR && nr_valid == kAvx2NR;
  alignas(32) int32_t tmp[kAvx2MR * kAvx2NR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) {
    __m256i x = acc[r];
    __m256i* out = reinterpret_cast<__m256i*>(full ? c + r * ldc : tmp + r * kAvx2NR);
    if (full && accumulate) x = _mm256_add_epi32(x, _mm256_loadu_si256(out));
    _mm256_storeu_si256(out, x);
  }
  if (!full) store_partial(tmp, kAvx2NR, c, ldc, mr_valid, nr_valid, accumulate);
}

// pack_b of row-major weights, 8 columns x 8 groups at a time: group g of column j is
// dword g of row j, so each block is one 8 x 8 dword transpose (unpack epi32, epi64, then
// the 128-bit halves), where the driver's loop moves 4 bytes per column and group (a
// third of gemm_s8's time on MobileNetV2's last 1x1 layer, M = 64, K = 320, N = 1280).
DSPTRAIN_AVX2 int pack_panel_rows_avx2(const int8_t* src, ptrdiff_t row_stride, int cols, int groups, int8_t* dst) {
  const int done = groups / 8 * 8;
  for (int g0 = 0; g0 < done; g0 += 8) {
    __m256i r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      r[i] = i < cols ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * row_stride + 4 * g0))
                      : _mm256_setzero_si256();
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);       // per lane: groups (0, 1) of rows i, i+1
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);   // groups (2, 3)
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {   // u[h + q]: group q (lane 0) and 4 + q (lane 1) of rows h .. h+3
      u[h + 0] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
      u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
      u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
      u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    int8_t* out = dst + static_cast<ptrdiff_t>(g0) * kAvx2NR * 4;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * 32), _mm256_permute2x128_si256(u[q], u[4 + q], 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (4 + q) * 32),
                          _mm256_permute2x128_si256(u[q], u[4 + q], 0x31));
    }
  }
  return done;
}

}  // namespace

const GemmKernel* kernel_avx_vnni() {
  static const GemmKernel k{Isa::kAvxVnni, kVnniMR, kVnniNR, 512, 192, 1, true, pack_a_u8, micro_vnni};
  return &k;
}

const GemmKernel* kernel_avx2() {
  static const GemmKernel k = [] {
    GemmKernel g{Isa::kAvx2, kAvx2MR, kAvx2NR, 512, 192, 2, false, pack_a_s16, micro_avx2};
    g.pack_panel_rows = pack_panel_rows_avx2;
    g.pack_a_unsigned = pack_a_unsigned;
    g.micro_unsigned = micro_avx2_bytes<false>;
    g.pack_a_bytes = pack_a_bytes;
    g.micro_b_unsigned = micro_avx2_bytes<true>;
    return g;
  }();
  return &k;
}

}  // namespace dsptrain

#else
namespace dsptrain {
const GemmKernel* kernel_avx_vnni() { return nullptr; }
const GemmKernel* kernel_avx2() { return nullptr; }
}  // namespace dsptrain
#endif
