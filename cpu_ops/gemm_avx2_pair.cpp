// AVX2's byte kernels over two B panels at once (6 x 16 of C): the pair form of
// gemm_avx2.cpp's micro_avx2_bytes, which has the three modes' exactness arguments.
#include "gemm_kernels.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#define DSPTRAIN_AVX2 __attribute__((target("avx2")))

namespace dsptrain {
namespace {

constexpr int kAvx2MR = 6, kAvx2NR = 8;  // gemm_avx2.cpp's tile: the assembly names six rows

// Which side vpmaddubsw reads as unsigned bytes (gemm_avx2.cpp's BytesMode): A (a >= 0), B
// (b >= 0), or B offset by 128 (|a| <= 64, with pack_a_small's row corrections).
enum class PairMode { kAUnsigned, kBUnsigned, kBOffset };

// micro_avx2_bytes over two B panels at once (6 x 16 of C): each broadcast of A feeds two
// vpmaddubsw, so A's tile is read once per two panels and the driver makes half the calls.
// The 12 accumulators and the two B vectors, the broadcast and one product fill the 16
// registers; the ones (and kBOffset's flip) come from memory, a load each, which Zen 3's
// three load ports absorb. In L1 it runs as the 6 x 8 loop (bench/gemm_avx2_loops.cpp: 96-98
// GMAC/s both); on VGG-11's deep shapes, where A streams from L2, it is faster (docs).
alignas(32) const int16_t kOnes16[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
alignas(32) const uint8_t kFlip8[32] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                        0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                        0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

// With OUTLIERS (kBOffset only), the tile's `nslots` outlier slots at `slots`
// (SmallAOutliers'): after the K loop, while the 12 accumulators are still in registers,
// each slot adds to every row r's two accumulators rest x (B's group of its k + 128) of
// both panels, as add_outliers_avx2 does to C (gemm_avx2.cpp: exact, |rest| <= 64): the
// same 12 multiplies as a group of the K loop, the padding of rows with fewer outliers
// included. Added after the asm instead, into the sums in memory through the row-by-row
// list, each outlier waited on the last's store (about 5 cycles an outlier and panel,
// docs/depthwise.md).
// (always inlined into micro_pair's three kernels: a call more cost MobileNetV2's shallow
// products, 4-8 groups a call, 2-5 %)
template <PairMode MODE, bool OUTLIERS>
DSPTRAIN_AVX2 __attribute__((always_inline)) inline void micro_avx2_bytes_pair(
    const void* a_tile, const int8_t* b0, const int8_t* b1, int kgroups, int32_t* c, ptrdiff_t ldc, int mr_valid,
    int nr_valid, bool accumulate, const SmallASlotEntry* slots, int nslots) {
  static_assert(!OUTLIERS || MODE == PairMode::kBOffset, "outliers are small A's");
  constexpr int kNR = 2 * kAvx2NR;
  const int8_t* const b0_group0 = b0;  // the asm advances b0 and b1
  const int8_t* const b1_group0 = b1;
  const int32_t* row_correction =
      reinterpret_cast<const int32_t*>(static_cast<const int8_t*>(a_tile) + static_cast<size_t>(kgroups) * kAvx2MR * 4);
  // As micro_avx2's, the whole call in one asm block with the accumulators in named
  // registers (ymm0-5 panel b0's rows, ymm6-11 b1's; 12 "+x" operands would pass GCC's
  // 30): they leave through `sums`.
  alignas(32) __m256i sums[2 * kAvx2MR];
  const int32_t* a = static_cast<const int32_t*>(a_tile);
// AT&T order: vpmaddubsw signed, unsigned, dst; B's vectors are ymm12 (b0) and ymm13 (b1),
// A's broadcast ymm14, the product ymm15
#define DSPTRAIN_AVX2_PAIR_HALF(s8, u8, acc)      \
  "vpmaddubsw %%" s8 ", %%" u8 ", %%ymm15\n\t"    \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"        \
  "vpaddd %%ymm15, %%ymm" #acc ", %%ymm" #acc "\n\t"
#define DSPTRAIN_AVX2_PAIR_ROW(r, lo, hi, s0, u0, s1, u1) \
  "vpbroadcastd " #r "*4(%[a]), %%ymm14\n\t"              \
  DSPTRAIN_AVX2_PAIR_HALF(s0, u0, lo) DSPTRAIN_AVX2_PAIR_HALF(s1, u1, hi)
// row r's entry of a slot: B's groups at its offset in both panels, offset by 128, times its rest4
#define DSPTRAIN_AVX2_SLOT_ROW(r, lo, hi)                \
  "movslq " #r "*8(%[sl]), %%rax\n\t"                    \
  "vmovdqu (%[b0s],%%rax), %%ymm12\n\t"                  \
  "vpxor %[flip], %%ymm12, %%ymm12\n\t"                  \
  "vmovdqu (%[b1s],%%rax), %%ymm13\n\t"                  \
  "vpxor %[flip], %%ymm13, %%ymm13\n\t"                  \
  "vpbroadcastd " #r "*8+4(%[sl]), %%ymm14\n\t"          \
  DSPTRAIN_AVX2_PAIR_HALF("ymm14", "ymm12", lo) DSPTRAIN_AVX2_PAIR_HALF("ymm14", "ymm13", hi)
#define DSPTRAIN_AVX2_SLOTS                                                                       \
  "test %[ns], %[ns]\n\t"                                                                         \
  "jle 4f\n\t"                                                                                    \
  "3:\n\t"                                                                                        \
  DSPTRAIN_AVX2_SLOT_ROW(0, 0, 6) DSPTRAIN_AVX2_SLOT_ROW(1, 1, 7) DSPTRAIN_AVX2_SLOT_ROW(2, 2, 8)  \
  DSPTRAIN_AVX2_SLOT_ROW(3, 3, 9) DSPTRAIN_AVX2_SLOT_ROW(4, 4, 10) DSPTRAIN_AVX2_SLOT_ROW(5, 5, 11) \
  "add $48, %[sl]\n\t" /* kAvx2MR entries of 8 bytes */                                          \
  "dec %[ns]\n\t"                                                                                 \
  "jnz 3b\n\t"                                                                                    \
  "4:\n\t"
#define DSPTRAIN_AVX2_PAIR_LOOP(s0, u0, s1, u1, b_offset, slots)                                               \
  "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"                                                                           \
  "vmovdqa %%ymm0, %%ymm1\n\t vmovdqa %%ymm0, %%ymm2\n\t vmovdqa %%ymm0, %%ymm3\n\t"                           \
  "vmovdqa %%ymm0, %%ymm4\n\t vmovdqa %%ymm0, %%ymm5\n\t vmovdqa %%ymm0, %%ymm6\n\t"                           \
  "vmovdqa %%ymm0, %%ymm7\n\t vmovdqa %%ymm0, %%ymm8\n\t vmovdqa %%ymm0, %%ymm9\n\t"                           \
  "vmovdqa %%ymm0, %%ymm10\n\t vmovdqa %%ymm0, %%ymm11\n\t"                                                    \
  "test %[g], %[g]\n\t"                                                                                        \
  "jle 2f\n\t"                                                                                                 \
  ".p2align 6\n\t"                                                                                             \
  "1:\n\t"                                                                                                     \
  "vmovdqu (%[b0]), %%ymm12\n\t"                                                                               \
  "vmovdqu (%[b1]), %%ymm13\n\t"                                                                               \
  b_offset                                                                                                     \
  DSPTRAIN_AVX2_PAIR_ROW(0, 0, 6, s0, u0, s1, u1) DSPTRAIN_AVX2_PAIR_ROW(1, 1, 7, s0, u0, s1, u1)              \
  DSPTRAIN_AVX2_PAIR_ROW(2, 2, 8, s0, u0, s1, u1) DSPTRAIN_AVX2_PAIR_ROW(3, 3, 9, s0, u0, s1, u1)              \
  DSPTRAIN_AVX2_PAIR_ROW(4, 4, 10, s0, u0, s1, u1) DSPTRAIN_AVX2_PAIR_ROW(5, 5, 11, s0, u0, s1, u1)            \
  "add $24, %[a]\n\t"  /* kAvx2MR rows x 4 bytes */                                                            \
  "add $32, %[b0]\n\t" /* kAvx2NR columns x 4 bytes */                                                         \
  "add $32, %[b1]\n\t"                                                                                         \
  "dec %[g]\n\t"                                                                                               \
  "jnz 1b\n\t"                                                                                                 \
  "2:\n\t"                                                                                                     \
  slots                                                                                                        \
  "vmovdqa %%ymm0, 0(%[sums])\n\t vmovdqa %%ymm1, 32(%[sums])\n\t vmovdqa %%ymm2, 64(%[sums])\n\t"             \
  "vmovdqa %%ymm3, 96(%[sums])\n\t vmovdqa %%ymm4, 128(%[sums])\n\t vmovdqa %%ymm5, 160(%[sums])\n\t"          \
  "vmovdqa %%ymm6, 192(%[sums])\n\t vmovdqa %%ymm7, 224(%[sums])\n\t vmovdqa %%ymm8, 256(%[sums])\n\t"         \
  "vmovdqa %%ymm9, 288(%[sums])\n\t vmovdqa %%ymm10, 320(%[sums])\n\t vmovdqa %%ymm11, 352(%[sums])\n\t"
#define DSPTRAIN_AVX2_PAIR_OPERANDS                                                                          \
  : [a] "+r"(a), [b0] "+r"(b0), [b1] "+r"(b1), [g] "+r"(kgroups)                                              \
  : [sums] "r"(sums), [ones] "m"(kOnes16), [flip] "m"(kFlip8)                                                 \
  : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
    "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
  if constexpr (MODE == PairMode::kAUnsigned) {
    asm volatile(DSPTRAIN_AVX2_PAIR_LOOP("ymm12", "ymm14", "ymm13", "ymm14", "", "") DSPTRAIN_AVX2_PAIR_OPERANDS);
  } else if constexpr (MODE == PairMode::kBUnsigned) {
    asm volatile(DSPTRAIN_AVX2_PAIR_LOOP("ymm14", "ymm12", "ymm14", "ymm13", "", "") DSPTRAIN_AVX2_PAIR_OPERANDS);
  } else if constexpr (!OUTLIERS) {
    asm volatile(DSPTRAIN_AVX2_PAIR_LOOP("ymm14", "ymm12", "ymm14", "ymm13",
                                         "vpxor %[flip], %%ymm12, %%ymm12\n\t"
                                         "vpxor %[flip], %%ymm13, %%ymm13\n\t", "") DSPTRAIN_AVX2_PAIR_OPERANDS);
  } else {
    asm volatile(DSPTRAIN_AVX2_PAIR_LOOP("ymm14", "ymm12", "ymm14", "ymm13",
                                         "vpxor %[flip], %%ymm12, %%ymm12\n\t"
                                         "vpxor %[flip], %%ymm13, %%ymm13\n\t", DSPTRAIN_AVX2_SLOTS)
                 // early clobbers: b0_group0 equals b0 on entry, and may not share its register
                 : [a] "+&r"(a), [b0] "+&r"(b0), [b1] "+&r"(b1), [g] "+&r"(kgroups), [sl] "+&r"(slots),
                   [ns] "+&r"(nslots)
                 : [sums] "r"(sums), [ones] "m"(kOnes16), [flip] "m"(kFlip8), [b0s] "r"(b0_group0),
                   [b1s] "r"(b1_group0)
                 : "rax", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                   "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  }
#undef DSPTRAIN_AVX2_PAIR_OPERANDS
#undef DSPTRAIN_AVX2_PAIR_LOOP
#undef DSPTRAIN_AVX2_SLOTS
#undef DSPTRAIN_AVX2_SLOT_ROW
#undef DSPTRAIN_AVX2_PAIR_ROW
#undef DSPTRAIN_AVX2_PAIR_HALF
  const bool full = mr_valid == kAvx2MR && nr_valid == kNR;
  alignas(32) int32_t tmp[kAvx2MR * kNR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i x = sums[h * kAvx2MR + r];
      if constexpr (MODE == PairMode::kBOffset) x = _mm256_add_epi32(x, _mm256_set1_epi32(row_correction[r]));
      __m256i* out = reinterpret_cast<__m256i*>(full ? c + r * ldc + h * kAvx2NR : tmp + r * kNR + h * kAvx2NR);
      if (full && accumulate) x = _mm256_add_epi32(x, _mm256_loadu_si256(out));
      _mm256_storeu_si256(out, x);
    }
  }
  if (!full) store_partial(tmp, kNR, c, ldc, mr_valid, nr_valid, accumulate);
}

template <PairMode MODE>
DSPTRAIN_AVX2 void micro_pair(const void* a_tile, const int8_t* b0, const int8_t* b1, int kgroups, int32_t* c,
                              ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate) {
  micro_avx2_bytes_pair<MODE, false>(a_tile, b0, b1, kgroups, c, ldc, mr_valid, nr_valid, accumulate, nullptr, 0);
}

}  // namespace

void set_avx2_pair_kernels(GemmKernel* kernel) {
  kernel->micro_pair_unsigned = micro_pair<PairMode::kAUnsigned>;
  kernel->micro_pair_b_unsigned = micro_pair<PairMode::kBUnsigned>;
  kernel->micro_pair_small_a = micro_pair<PairMode::kBOffset>;
  kernel->micro_pair_small_a_outliers = micro_avx2_bytes_pair<PairMode::kBOffset, true>;
}

}  // namespace dsptrain
#endif
