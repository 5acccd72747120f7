// 256-bit x86 microkernels: AVX-VNNI (vpdpbusd on ymm, VEX encoded, the same offset
// trick as gemm_avx512.cpp) and plain AVX2. AVX2's vpmaddubsw saturates its int16 pair
// sums (255*127*2 > 32767 with the offset trick's a + 128), so the AVX2 path widens to
// int16 and uses vpmaddwd, which is exact: A is packed as int16, B widened in registers.
// Where an A block holds no negative value (a ReLU's output: the forward's activations),
// A is packed as bytes and vpmaddubsw runs on it directly: a in [0, 127] times b in
// [-128, 127] gives pair sums in [-32512, 32258], exact in int16 (docs/depthwise.md);
// where B's panels hold none (the weight gradient's activations), the same with B unsigned.
#include "gemm_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "scratch.h"

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
static_assert(kAvx2MR * 4 <= kSmallATail, "pack_a_small's row corrections fit a tile's tail");

void pack_a_s16(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kAvx2MR>(a, rows, kc, static_cast<int16_t*>(dst),
                        [](int8_t v) { return static_cast<int16_t>(v); });
}

DSPTRAIN_AVX2 void micro_avx2(const void* a_tile, const int8_t* b, int kgroups, int32_t* c,
                              ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                              const int32_t* /*col_offset: no offset trick here*/) {
  // The K loop in assembly: written with intrinsics, GCC hoists the six broadcasts, runs
  // out of the 16 ymm registers and keeps a third of the accumulators on the stack (a store
  // and a reload per group, half the kernel's speed). Here the 12 accumulators (ymm0-11),
  // B's two widened vectors, the broadcast and one product fill the 16 exactly; they leave
  // through `sums` once per call. The loop's head is aligned to 64 bytes: left to the
  // compiler, where the 26-instruction body fell decided 10-15 % of its speed
  // (bench/gemm_avx2_loops.cpp: 71 vs 81 GMAC/s for the same body).
  alignas(32) __m256i sums[2 * kAvx2MR];  // lo rows 0-5, then hi rows 0-5
  const int16_t* a = static_cast<const int16_t*>(a_tile);
#define DSPTRAIN_AVX2_ROW(r, lo, hi)                    \
  "vpbroadcastq " #r "*8(%[a]), %%ymm14\n\t"            \
  "vpmaddwd %%ymm14, %%ymm12, %%ymm15\n\t"              \
  "vpaddd %%ymm15, %%ymm" #lo ", %%ymm" #lo "\n\t"      \
  "vpmaddwd %%ymm14, %%ymm13, %%ymm15\n\t"              \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
  asm volatile(
      "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"
      "vmovdqa %%ymm0, %%ymm1\n\t vmovdqa %%ymm0, %%ymm2\n\t vmovdqa %%ymm0, %%ymm3\n\t"
      "vmovdqa %%ymm0, %%ymm4\n\t vmovdqa %%ymm0, %%ymm5\n\t vmovdqa %%ymm0, %%ymm6\n\t"
      "vmovdqa %%ymm0, %%ymm7\n\t vmovdqa %%ymm0, %%ymm8\n\t vmovdqa %%ymm0, %%ymm9\n\t"
      "vmovdqa %%ymm0, %%ymm10\n\t vmovdqa %%ymm0, %%ymm11\n\t"
      "test %[g], %[g]\n\t"
      "jle 2f\n\t"
      ".p2align 6\n\t"
      "1:\n\t"
      "vpmovsxbw (%[b]), %%ymm12\n\t"
      "vpmovsxbw 16(%[b]), %%ymm13\n\t"
      DSPTRAIN_AVX2_ROW(0, 0, 6) DSPTRAIN_AVX2_ROW(1, 1, 7) DSPTRAIN_AVX2_ROW(2, 2, 8)
      DSPTRAIN_AVX2_ROW(3, 3, 9) DSPTRAIN_AVX2_ROW(4, 4, 10) DSPTRAIN_AVX2_ROW(5, 5, 11)
      "add $48, %[a]\n\t"  // kAvx2MR rows x 4 int16
      "add $32, %[b]\n\t"  // kAvx2NR columns x 4 bytes
      "dec %[g]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "vmovdqa %%ymm0, 0(%[sums])\n\t vmovdqa %%ymm1, 32(%[sums])\n\t vmovdqa %%ymm2, 64(%[sums])\n\t"
      "vmovdqa %%ymm3, 96(%[sums])\n\t vmovdqa %%ymm4, 128(%[sums])\n\t vmovdqa %%ymm5, 160(%[sums])\n\t"
      "vmovdqa %%ymm6, 192(%[sums])\n\t vmovdqa %%ymm7, 224(%[sums])\n\t vmovdqa %%ymm8, 256(%[sums])\n\t"
      "vmovdqa %%ymm9, 288(%[sums])\n\t vmovdqa %%ymm10, 320(%[sums])\n\t vmovdqa %%ymm11, 352(%[sums])\n\t"
      : [a] "+r"(a), [b] "+r"(b), [g] "+r"(kgroups)
      : [sums] "r"(sums)
      : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#undef DSPTRAIN_AVX2_ROW
  const bool full = mr_valid == kAvx2MR && nr_valid == kAvx2NR;
  alignas(32) int32_t tmp[kAvx2MR * kAvx2NR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) {
    // hadd gives columns [0 1 4 5 | 2 3 6 7]; the permute restores 0..7.
    __m256i x = _mm256_permute4x64_epi64(_mm256_hadd_epi32(sums[r], sums[kAvx2MR + r]), _MM_SHUFFLE(3, 1, 2, 0));
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
// negative value; false otherwise, dst then holding part of a packing (the driver packs
// the block again for another kernel). The test rides on the packing, a tile at a time,
// so a signed block costs about one tile: a separate scan first was a quarter of the
// GEMM's time at K = 27 (VGG-11's first layer: perf, 16 % of the samples beside 45 % in
// the kernel).
DSPTRAIN_AVX2 bool pack_a_unsigned(MatrixS8 a, int rows, int kc, void* dst) {
  const size_t tile_bytes = static_cast<size_t>((kc + 3) / 4) * kAvx2MR * 4;
  for (int r0 = 0; r0 < rows; r0 += kAvx2MR) {
    uint8_t any = 0;  // OR of the tile's bytes: its top bit is set by any negative one
    pack_a_tiles<kAvx2MR>(a.from(r0, 0), std::min(kAvx2MR, rows - r0), kc,
                          static_cast<uint8_t*>(dst) + static_cast<size_t>(r0 / kAvx2MR) * tile_bytes,
                          [&any](int8_t v) {
                            any |= static_cast<uint8_t>(v);
                            return static_cast<uint8_t>(v);
                          });
    if (any & 0x80) return false;
  }
  return true;
}

void pack_a_bytes(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kAvx2MR>(a, rows, kc, static_cast<int8_t*>(dst), [](int8_t v) { return v; });
}

// Signed A blocks with their values in [-64, 64] (a signed x signed product, e.g. backward
// data's errors, which mostly stay within half the range): B is offset to u = b + 128 in
// [0, 255] in the register (one vpxor per group, shared by the six rows) and vpmaddubsw
// multiplies u (unsigned) by a (signed): pair sums within 255 x 64 x 2 = 32640, exact in
// int16. The offset adds 128 x (the row's sum of a) to each result, which the packing
// computes: each tile of 6 rows is followed by kSmallATail bytes holding the rows'
// -128 x rowsum(a) over the block, added to the tile at the end.
//
// What vpmaddubsw needs is less than |a| <= 64: each pair sum u0 x0 + u1 x1 (x0, x1 the
// bytes at depths 2i, 2i + 1) is within 255 x (|x0| + |x1|), exact wherever the pair's
// |x0| + |x1| <= 128. So a value beyond [-64, 64] whose pair partner leaves room (127
// beside a 1, -128 beside a 0: half of the bench's uniform outliers, most of
// heavy-tailed errors, whose partners lie near 0) is packed as it is. In a pair over that
// budget, each value beyond [-64, 64] (NITI's errors: a few in a thousand reach +-127) is
// packed clamped, which brings the pair within it, and its rest a - clamp(a) listed as an
// outlier: add_outliers adds rest x (B's row k + 128) to C afterwards, so the block stays
// on vpmaddubsw. The row corrections are -128 x the sum of a itself, packed values and
// rests. The row sums and the outlier list come from one pass over the block (32 bytes at
// a time where rows are contiguous), before the packing, which copies the block and then
// clamps the listed values in place.
//
// True (A packed so, *outliers set) when rows [0, rows) x k [0, kc) of `a` hold at most
// small_a_max_outliers values to list, else false.
DSPTRAIN_AVX2 bool pack_a_small(MatrixS8 a, int rows, int kc, void* dst, SmallAOutliers* outliers) {
  thread_local Kept<std::vector<int32_t>> sums_buf;      // the rows' sums
  thread_local Kept<std::vector<uint32_t>> outlier_buf;  // the tiles' starts, then the outliers
  const int kgroups = (kc + 3) / 4, tiles = (rows + kAvx2MR - 1) / kAvx2MR;
  const size_t most = small_a_max_outliers(rows, kc);
  static_assert(sizeof(SmallAOutlier) == 2 * sizeof(uint32_t), "outliers share the tile starts' buffer");
  const size_t starts = (tiles + 2) / 2 * 2;           // words of tile starts, even: the outliers' alignment
  const size_t words = small_a_outlier_words(rows, kc, kAvx2MR);  // the list: a row's room past `most`
  if (sums_buf.size() < static_cast<size_t>(rows)) sums_buf.resize(rows);
  if (outlier_buf.size() < words) outlier_buf.resize(words);
  int32_t* sums = sums_buf.data();
  uint32_t* tile_start = outlier_buf.data();
  SmallAOutlier* list = reinterpret_cast<SmallAOutlier*>(outlier_buf.data() + starts);
  uint32_t listed = 0;
  const auto append = [&](int row, int kk, int8_t v) {
    SmallAOutlier& e = list[listed++];
    e = SmallAOutlier{static_cast<uint16_t>(row), static_cast<uint16_t>(kk), {0, 0, 0, 0}};
    e.rest4[kk % 4] = static_cast<int8_t>(v < 0 ? v + 64 : v - 64);
  };
  const auto beyond = [](int v) { return v < -64 || v > 64; };
  const __m256i lo = _mm256_set1_epi8(-64), hi = _mm256_set1_epi8(64);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1), budget = _mm256_set1_epi16(128);
  for (int r = 0; r < rows; ++r) {
    if (r % kAvx2MR == 0) tile_start[r / kAvx2MR] = listed;
    const int8_t* src = a.row(r);
    int kk = 0;
    int32_t sum = 0;
    if (a.k_stride == 1) {
      __m256i sum32 = _mm256_setzero_si256();
      for (; kk + 32 <= kc; kk += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + kk));
        const __m256i clamped = _mm256_min_epi8(_mm256_max_epi8(v, lo), hi);
        // pairs of bytes (|sum| <= 256) into int16, then int32 lanes
        sum32 = _mm256_add_epi32(sum32, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16));
        // those beyond [-64, 64] in pairs over budget, |x0| + |x1| > 128 (|-128| read
        // unsigned): tested every time, the branch below is taken half as often as on
        // values beyond alone (perf: its mispredictions were a fifth of this pass)
        const __m256i pair_abs = _mm256_maddubs_epi16(_mm256_abs_epi8(v), ones8);
        uint32_t listing = ~static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(clamped, v))) &
                           static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpgt_epi16(pair_abs, budget)));
        for (; listing; listing &= listing - 1) {
          const int at = kk + __builtin_ctz(listing);
          append(r, at, src[at]);
        }
      }
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum32);
      for (int i = 0; i < 8; ++i) sum += lanes[i];
    }
    for (; kk < kc; kk += 2) {  // whole pairs (kk is even here), the partner past kc a zero
      const int x0 = src[static_cast<ptrdiff_t>(kk) * a.k_stride];
      const int x1 = kk + 1 < kc ? src[static_cast<ptrdiff_t>(kk + 1) * a.k_stride] : 0;
      sum += x0 + x1;
      if ((beyond(x0) || beyond(x1)) && std::abs(x0) + std::abs(x1) > 128) {
        if (beyond(x0)) append(r, kk, static_cast<int8_t>(x0));
        if (beyond(x1)) append(r, kk + 1, static_cast<int8_t>(x1));
      }
    }
    if (listed > most) return false;
    sums[r] = sum;
  }
  tile_start[tiles] = listed;
  const size_t tile_bytes = static_cast<size_t>(kgroups) * kAvx2MR * 4 + kSmallATail;
  for (int r0 = 0; r0 < rows; r0 += kAvx2MR) {
    int8_t* tile = static_cast<int8_t*>(dst) + static_cast<size_t>(r0 / kAvx2MR) * tile_bytes;
    const int valid = std::min(kAvx2MR, rows - r0);
    pack_a_tiles<kAvx2MR>(a.from(r0, 0), valid, kc, tile, [](int8_t v) { return v; });
    int32_t correction[kAvx2MR] = {};
    for (int r = 0; r < valid; ++r) correction[r] = -128 * sums[r0 + r];
    std::memcpy(tile + static_cast<size_t>(kgroups) * kAvx2MR * 4, correction, sizeof(correction));
  }
  for (uint32_t i = 0; i < listed; ++i) {  // the listed values clamped in place: a - rest
    const SmallAOutlier& e = list[i];
    const int byte = e.k % 4;
    static_cast<int8_t*>(dst)[static_cast<size_t>(e.row / kAvx2MR) * tile_bytes +
                              static_cast<size_t>(e.k / 4) * kAvx2MR * 4 + (e.row % kAvx2MR) * 4 + byte] =
        static_cast<int8_t>(e.rest4[byte] < 0 ? -64 : 64);
  }
  // The slots of the pair kernel (micro_pair_small_a_outliers): slot s of a tile holds the
  // s-th outlier of each of its rows, so each is added to its row's accumulators in
  // registers, with no index (the list is row by row, so a row's run is consecutive).
  uint32_t* slot_start = outlier_buf.data() + starts + 2 * (most + kc);
  SmallASlotEntry* slots = reinterpret_cast<SmallASlotEntry*>(slot_start + starts);
  const size_t room = small_a_max_slot_entries(rows, kc);
  uint32_t used = 0;  // slots so far
  for (int t = 0; t < tiles && listed > 0; ++t) {
    slot_start[t] = used;
    uint32_t first[kAvx2MR + 1];  // the tile's rows' runs in the list
    uint32_t most_in_row = 0;
    uint32_t at = tile_start[t];
    for (int r = 0; r < kAvx2MR; ++r) {
      first[r] = at;
      while (at < tile_start[t + 1] && list[at].row == t * kAvx2MR + r) ++at;
      most_in_row = std::max(most_in_row, at - first[r]);
    }
    first[kAvx2MR] = at;
    if ((used + most_in_row) * static_cast<size_t>(kAvx2MR) > room) {  // too uneven: add_outliers
      slot_start = nullptr;
      slots = nullptr;
      break;
    }
    for (uint32_t s = 0; s < most_in_row; ++s)
      for (int r = 0; r < kAvx2MR; ++r) {
        SmallASlotEntry& e = slots[static_cast<size_t>(used + s) * kAvx2MR + r];
        if (first[r] + s < first[r + 1]) {
          const SmallAOutlier& o = list[first[r] + s];
          e.offset = o.k / 4 * kAvx2NR * 4;
          std::memcpy(&e.rest4, o.rest4, 4);
        } else {
          e = SmallASlotEntry{0, 0};
        }
      }
    used += most_in_row;
  }
  if (slot_start) {
    if (listed == 0)
      for (int t = 0; t < tiles; ++t) slot_start[t] = 0;
    slot_start[tiles] = used;
  }
  *outliers = SmallAOutliers{tile_start, list, static_cast<int>(listed), slot_start, slots};
  return true;
}

// add_outliers on AVX2: per outlier and panel, as micro_small_a does a group: B's group of
// k (32 bytes) offset to b + 128, vpmaddubsw by the outlier's rest4 broadcast (the rest
// at byte k % 4, zero in the others: an exact pair sum, |rest| <= 64), vpmaddwd by ones,
// added to C's 8 columns: 7 instructions. Extracting k's byte by two variable shifts
// instead (and the rest from a general register) cost about twice as much. The driver
// calls it for a few tiles' outliers at a time, along the task's panels
// (kOutlierChunkRows, gemm_driver.cpp).
DSPTRAIN_AVX2 void add_outliers_avx2(const SmallAOutlier* list, int count, const int8_t* b_panels,
                                     size_t panel_stride, int panels, int last_cols, int32_t* c, ptrdiff_t ldc,
                                     int row0) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  const int whole = last_cols == kAvx2NR ? panels : panels - 1;
  for (int i = 0; i < count; ++i) {
    const SmallAOutlier& e = list[i];
    const int8_t* group = b_panels + static_cast<size_t>(e.k / 4) * kAvx2NR * 4;
    const __m256i rest = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(e.rest4));
    int32_t* row = c + static_cast<ptrdiff_t>(e.row - row0) * ldc;
    for (int p = 0; p < whole; ++p) {
      const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + p * panel_stride)), flip);
      __m256i* out = reinterpret_cast<__m256i*>(row + p * kAvx2NR);
      _mm256_storeu_si256(out, _mm256_add_epi32(_mm256_loadu_si256(out),
                                                _mm256_madd_epi16(_mm256_maddubs_epi16(u, rest), ones)));
    }
    if (whole < panels) {  // a ragged last panel: its valid columns alone
      const int8_t* last = group + whole * panel_stride;
      const int byte = e.k % 4;
      for (int j = 0; j < last_cols; ++j) row[whole * kAvx2NR + j] += e.rest4[byte] * (last[j * 4 + byte] + 128);
    }
  }
}

// Which side vpmaddubsw reads as unsigned bytes: A (a >= 0), B (b >= 0), or B offset by
// 128 (|a| <= 64, with pack_a_small's row corrections).
enum class BytesMode { kAUnsigned, kBUnsigned, kBOffset };

template <BytesMode MODE>
DSPTRAIN_AVX2 void micro_avx2_bytes(const void* a_tile, const int8_t* b, int kgroups, int32_t* c, ptrdiff_t ldc,
                                    int mr_valid, int nr_valid, bool accumulate,
                                    const int32_t* /*col_offset: no offset trick here*/) {
  const int32_t* row_correction =
      reinterpret_cast<const int32_t*>(static_cast<const int8_t*>(a_tile) + static_cast<size_t>(kgroups) * kAvx2MR * 4);
  __m256i acc[kAvx2MR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) acc[r] = _mm256_setzero_si256();
  const int32_t* a = static_cast<const int32_t*>(a_tile);
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  // In assembly for the same reasons as micro_avx2: the six accumulators, B, the ones, the
  // broadcast and one product stay in registers, and the K loop's head is aligned.
  __m256i bv, av, prod;
  if (kgroups > 0) {
// AT&T order: vpmaddubsw signed, unsigned, dst
#define DSPTRAIN_AVX2_U8_ROW(r, s8, u8)              \
  "vpbroadcastd " #r "*4(%[a]), %[av]\n\t"           \
  "vpmaddubsw %[" #s8 "], %[" #u8 "], %[prod]\n\t"   \
  "vpmaddwd %[ones], %[prod], %[prod]\n\t"           \
  "vpaddd %[prod], %[acc" #r "], %[acc" #r "]\n\t"
#define DSPTRAIN_AVX2_U8_LOOP(s8, u8, b_offset)                                                       \
  ".p2align 6\n\t"                                                                                    \
  "1:\n\t"                                                                                            \
  "vmovdqu (%[b]), %[bv]\n\t"                                                                         \
  b_offset                                                                                            \
  DSPTRAIN_AVX2_U8_ROW(0, s8, u8) DSPTRAIN_AVX2_U8_ROW(1, s8, u8) DSPTRAIN_AVX2_U8_ROW(2, s8, u8)     \
  DSPTRAIN_AVX2_U8_ROW(3, s8, u8) DSPTRAIN_AVX2_U8_ROW(4, s8, u8) DSPTRAIN_AVX2_U8_ROW(5, s8, u8)     \
  "add $24, %[a]\n\t"  /* kAvx2MR rows x 4 bytes */                                                   \
  "add $32, %[b]\n\t"  /* kAvx2NR columns x 4 bytes */                                                \
  "dec %[g]\n\t"                                                                                      \
  "jnz 1b\n\t"
#define DSPTRAIN_AVX2_U8_OPERANDS                                                                   \
  : [acc0] "+x"(acc[0]), [acc1] "+x"(acc[1]), [acc2] "+x"(acc[2]), [acc3] "+x"(acc[3]),             \
    [acc4] "+x"(acc[4]), [acc5] "+x"(acc[5]), [bv] "=&x"(bv), [av] "=&x"(av), [prod] "=&x"(prod),   \
    [a] "+r"(a), [b] "+r"(b), [g] "+r"(kgroups)                                                     \
  : [ones] "x"(ones), [flip] "x"(flip)                                                              \
  : "memory", "cc"
    if constexpr (MODE == BytesMode::kAUnsigned) {
      asm(DSPTRAIN_AVX2_U8_LOOP(bv, av, "") DSPTRAIN_AVX2_U8_OPERANDS);
    } else if constexpr (MODE == BytesMode::kBUnsigned) {
      asm(DSPTRAIN_AVX2_U8_LOOP(av, bv, "") DSPTRAIN_AVX2_U8_OPERANDS);
    } else {
      asm(DSPTRAIN_AVX2_U8_LOOP(av, bv, "vpxor %[flip], %[bv], %[bv]\n\t") DSPTRAIN_AVX2_U8_OPERANDS);
    }
#undef DSPTRAIN_AVX2_U8_OPERANDS
#undef DSPTRAIN_AVX2_U8_LOOP
#undef DSPTRAIN_AVX2_U8_ROW
  }
  const bool full = mr_valid == kAvx2MR && nr_valid == kAvx2NR;
  alignas(32) int32_t tmp[kAvx2MR * kAvx2NR];
#pragma GCC unroll 8
  for (int r = 0; r < kAvx2MR; ++r) {
    __m256i x = acc[r];
    if constexpr (MODE == BytesMode::kBOffset) x = _mm256_add_epi32(x, _mm256_set1_epi32(row_correction[r]));
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
    // K blocks of 768: A's tile (4.6 KB as bytes) and B's pair of panels (12 KB) still share
    // L1, C's tile is read back a third less often than at 512, and VGG-11's K = 576 is one
    // block (no 64-deep tail): 1.5-3 % faster on its deep shapes (gemm13, in one process
    // alternated with 512 and 1152, load 8-10).
    GemmKernel g{Isa::kAvx2, kAvx2MR, kAvx2NR, 768, 192, 2, false, pack_a_s16, micro_avx2};
    g.pack_panel_rows = pack_panel_rows_avx2;
    g.pack_a_unsigned = pack_a_unsigned;
    g.micro_unsigned = micro_avx2_bytes<BytesMode::kAUnsigned>;
    g.pack_a_bytes = pack_a_bytes;
    g.micro_b_unsigned = micro_avx2_bytes<BytesMode::kBUnsigned>;
    g.pack_a_small = pack_a_small;
    g.micro_small_a = micro_avx2_bytes<BytesMode::kBOffset>;
    g.add_outliers = add_outliers_avx2;
    set_avx2_pair_kernels(&g);  // gemm_avx2_pair.cpp
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
