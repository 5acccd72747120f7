// Internal to the GEMM: what each instruction set provides (tile sizes, the A packing,
// the register-blocked microkernel). The driver (gemm_driver.cpp) does the rest.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "gemm.h"
#include "rounding.h"

namespace dsptrain {

// Packs rows [0, rows) and k [0, kc) of `a` into tiles of `mr` rows: per tile, for each
// group of 4 k, mr x 4 elements (zero padded), the ISA's element type and offset.
using PackAFn = void (*)(MatrixS8 a, int rows, int kc, void* dst);

// c[mr_valid, nr_valid] (+)= tile of packed A x panel of packed B over `kgroups` groups
// of 4 k. accumulate=false overwrites c with the product plus `col_offset[0..nr)`.
using MicroFn = void (*)(const void* a_tile, const int8_t* b_panel, int kgroups, int32_t* c,
                         ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                         const int32_t* col_offset);

// MicroFn over two B panels at once, b0's and b1's groups side by side: c[mr_valid,
// nr_valid <= 2 nr] (+)= the tile of A x (panel b0 | panel b1). No col_offset: the byte
// kernels' corrections are in A's packing (pack_a_small's tails) or not needed.
using MicroPairFn = void (*)(const void* a_tile, const int8_t* b0, const int8_t* b1, int kgroups, int32_t* c,
                             ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate);

// A read in place, with no packing pass (gemm_rows.cpp): row r of a tile is the biased
// bytes (a + 128) at rows[r] + piece.off + 4 g for the `groups` groups of each piece in
// turn, B's panel advancing through them (first past `b_skip` groups it does not meet:
// the border taps conv_trimmed.cpp leaves out); otherwise as MicroFn. Rows past mr_valid
// may repeat a valid row (their results are dropped).
struct APiece {
  ptrdiff_t off;
  int groups;
  int b_skip = 0;
};
using MicroRowsFn = void (*)(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b_panel,
                             int32_t* c, ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                             const int32_t* col_offset);

// micro_rows over the whole depth with the tile also rounded to int8 from the registers
// (a given shift's fused requantize, round or psto, shift 0..30; gemm_rows.cpp): c gets
// the int32 tile as micro_rows stores it (kept for a given shift that proves too small:
// it is rounded again from them, and running the product again would cost it twice), q
// (rows ldq apart) its valid mr_valid x nr_valid part rounded, *most the largest |acc| of
// it if larger.
using MicroRowsRoundFn = void (*)(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b_panel,
                                  int32_t* c, ptrdiff_t ldc, int8_t* q, ptrdiff_t ldq, int mr_valid, int nr_valid,
                                  const int32_t* col_offset, int shift, RoundMode mode, uint32_t* most);

// micro_rows_round with row r's int32 results at c_rows[r] and its int8 at q_rows[r] (no
// int8 where q_rows is null), each row's valid columns contiguous: the rows of the trimmed
// convolution's classes (conv_trimmed.cpp), pixels scattered over the output.
using MicroRowsAtFn = void (*)(const uint8_t* const* rows, const APiece* pieces, int npieces, const int8_t* b_panel,
                               int32_t* const* c_rows, int8_t* const* q_rows, int mr_valid, int nr_valid,
                               const int32_t* col_offset, int shift, RoundMode mode, uint32_t* most);

// sums[j] = sum of the kgroups * 4 bytes of column j of a packed B panel (nr columns).
using ColSumFn = void (*)(const int8_t* b_panel, int kgroups, int32_t* sums);

// One value of a pack_a_small block beyond [-64, 64] in a pair over vpmaddubsw's budget
// (|a| + |its partner's| > 128; the partner at depth k ^ 1): at row `row` and depth k of the
// block, a = clamp(a, -64, 64) + rest (rest in [-64, 63]), held as the dword `rest4`: the
// rest at byte k % 4, zero in the other three (vpmaddubsw's operand for k's group).
struct SmallAOutlier {
  uint16_t row;
  uint16_t k;
  int8_t rest4[4];
};

// One outlier as the pair kernel adds it: `offset`, the byte offset of its k's group in a
// packed B panel (k / 4 x nr x 4), and its rest4 as one dword. A slot is mr of them, one
// per row of a tile (row r's at r), where a row with fewer outliers than the tile's most
// has the padding {0, 0}: its product is zero.
struct SmallASlotEntry {
  int32_t offset;
  int32_t rest4;
};

// A pack_a_small block's outliers, row by row: `total` at `list`, those of tile t (rows
// [t * mr, t * mr + mr)) at list[tile_start[t], tile_start[t + 1]); and the same again as
// slots (as many as the tile's row with most), the tile's at slots + slot_start[t] * mr, up to
// slot_start[t + 1] (slots null where they would pass small_a_max_slot_entries). They point
// into pack_a_small's per-thread buffer, valid until its next call on the thread.
struct SmallAOutliers {
  const uint32_t* tile_start = nullptr;
  const SmallAOutlier* list = nullptr;
  int total = 0;
  const uint32_t* slot_start = nullptr;
  const SmallASlotEntry* slots = nullptr;
  int count(int tile) const { return static_cast<int>(tile_start[tile + 1] - tile_start[tile]); }
  const SmallAOutlier* of(int tile) const { return list + tile_start[tile]; }
  int slot_count(int tile) const { return static_cast<int>(slot_start[tile + 1] - slot_start[tile]); }
};

// The part of the product micro_small_a left out, for each of the `count` outliers e at
// `list`: c[e.row - row0, p * nr + j] += (b[k = e.k, column j of panel p] + 128) * e.rest
// (pack_a_small's row corrections count the 128 x rest), over `panels` packed B panels
// `panel_stride` bytes apart (group 0 of the first at b_panels), all nr columns of each
// but the last's first last_cols.
using AddOutliersFn = void (*)(const SmallAOutlier* list, int count, const int8_t* b_panels, size_t panel_stride,
                               int panels, int last_cols, int32_t* c, ptrdiff_t ldc, int row0);

struct GemmKernel {
  Isa isa;
  int mr, nr;        // register tile
  int kc, mc;        // cache blocks: k per A block (multiple of 4), rows per A block
  int a_elem_bytes;  // bytes per packed A element
  bool offset_trick; // A packed as a+128 (u8), so col_offset corrects the product
  PackAFn pack_a;
  MicroFn micro;
  ColSumFn colsum = nullptr;  // optional: B's column sums for the offset trick, cheaper than a ones row of A
  int k_align = 1;            // kgroups handed to micro (and packed K / 4) are multiples of this
  void (*task_begin)() = nullptr;  // optional: per-thread set-up before a task's micro calls (AMX tiles)
  void (*task_end)() = nullptr;    // optional: its undo, at the end of the task
  bool a_is_rows = false;          // packed A is a's rows, K zero padded (gemm_packed's a_padded)
  MicroRowsFn micro_rows = nullptr;  // optional: A's biased rows read in place (offset-trick kernels)
  MicroRowsRoundFn micro_rows_round = nullptr;  // optional: micro_rows rounding its tile to int8
  MicroRowsAtFn micro_rows_at = nullptr;        // optional: micro_rows_round with each row's own address
  // optional: pack_b's whole groups of one panel from row-major b (rows row_stride apart,
  // `cols` <= nr of them, the rest zero): groups [0, done) written, done returned.
  int (*pack_panel_rows)(const int8_t* src, ptrdiff_t row_stride, int cols, int groups, int8_t* dst) = nullptr;
  // optional: an A block with no negative value packed as bytes (pack_a_unsigned returns
  // false otherwise, dst then scratch) for micro_unsigned, whose u8 x s8 products are
  // exact there (AVX2's vpmaddubsw); the driver falls back to pack_a and micro.
  bool (*pack_a_unsigned)(MatrixS8 a, int rows, int kc, void* dst) = nullptr;
  MicroFn micro_unsigned = nullptr;
  // optional: a signed A block against B panels with no negative value (the weight
  // gradient's patches of a ReLU's output): A packed as signed bytes (pack_a_bytes) for
  // micro_b_unsigned, which multiplies B (u8) by A (s8), exact for the same reason.
  PackAFn pack_a_bytes = nullptr;
  MicroFn micro_b_unsigned = nullptr;
  // optional: a signed A block against any B (backward data's errors x weights) whose values
  // pair up within |a0| + |a1| <= 128 (depths 2i, 2i + 1; so wherever |a| <= 64) but for
  // at most one value in kSmallAOutlierShare: pack_a_small packs them as bytes (a value
  // beyond [-64, 64] in a pair over that budget clamped), each tile of mr rows followed by
  // kSmallATail bytes of its rows' offset corrections, for micro_small_a, which multiplies
  // b + 128 (u8) by a (s8) exactly there; the rest a - clamp(a) of the few clamped values
  // goes to *outliers, which add_outliers adds to C's tile after micro_small_a wrote it.
  // False (nothing packed) where the block holds more.
  bool (*pack_a_small)(MatrixS8 a, int rows, int kc, void* dst, SmallAOutliers* outliers) = nullptr;
  MicroFn micro_small_a = nullptr;
  AddOutliersFn add_outliers = nullptr;
  // optional: micro_unsigned, micro_b_unsigned and micro_small_a over two B panels at once
  // (b1 the second's group 0; C's tile mr x 2 nr, nr_valid up to 2 nr), the driver's choice
  // where a task has two panels left: A's tile is read once per pair.
  MicroPairFn micro_pair_unsigned = nullptr;
  MicroPairFn micro_pair_b_unsigned = nullptr;
  MicroPairFn micro_pair_small_a = nullptr;
  // optional: micro_pair_small_a that also adds the tile's outliers (`nslots` slots at
  // `slots`, SmallAOutliers') to its accumulators before they leave the registers, so a
  // block with outliers needs no second pass over C (add_outliers).
  void (*micro_pair_small_a_outliers)(const void* a_tile, const int8_t* b0, const int8_t* b1, int kgroups, int32_t* c,
                                      ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                                      const SmallASlotEntry* slots, int nslots) = nullptr;
  // optional: one group of a whole panel from 4 k-major rows (pack_b_k_rows): dst gets, for
  // columns j < nr, the dword (rows[0][j], rows[1][j], rows[2][j], rows[3][j]).
  void (*interleave_panel)(const int8_t* const* rows, int8_t* dst) = nullptr;
};

// How gemm_packed and gemm_rows split C over the pool: row blocks of at most kern->mc
// rows, a multiple of the thread count so the cores finish together; if that leaves too
// few tasks, the B panels split as well.
struct TaskSplit {
  int mc, m_blocks, n_splits, panels_per_split;
  int tasks() const { return m_blocks * n_splits; }
};
TaskSplit split_tasks(const GemmKernel* kern, int m, int n, int threads);

// The C tile one task computes: rows [row0, row0 + rows), B panels [p0, p1).
struct CTile {
  int row0, rows, p0, p1;
};

// The frame gemm_packed and gemm_rows share: C zeroed when k == 0, the tasks of
// split_tasks over the pool, and *absmax (if given) the largest |c| over the tasks' tiles.
// With `fused` (and absmax; C's rows n apart) each task rounds its tile into fused->out
// after computing it, the maximum taken in the same pass, and fused->applied is set.
// `tile` computes one task's tile of C; it gets the split for its block sizes.
void for_each_c_tile(const GemmKernel* kern, int m, int n, int k, int32_t* c, ptrdiff_t ldc, int64_t* absmax,
                     const std::function<void(const TaskSplit&, const CTile&)>& tile, FusedRequant* fused = nullptr);

// Groups of 4 k that `kern` computes for a K block of kc: padded to its k_align.
inline int padded_kgroups(const GemmKernel* kern, int kc) {
  return (kc + 4 * kern->k_align - 1) / (4 * kern->k_align) * kern->k_align;
}

// Bytes after each pack_a_small tile: its mr (<= 8) int32 row corrections.
constexpr int kSmallATail = 32;

// pack_a_small takes a block with at most one value in this many beyond [-64, 64]. Each
// outlier costs add_outliers 7 instructions per B panel where micro_small_a spends about
// 1 per value: measured (bench_gemm.py's errors, AVX2, 1 thread), 0.4 % outliers cost
// 5-9 % over the same block without, still 4-8 % faster than the int16 kernel; at this
// share's 0.8 % the two would be about even. NITI VGG-11's backward-data errors hold
// 0-0.4 % (docs/depthwise.md).
constexpr int kSmallAOutlierShare = 128;

// The most outliers pack_a_small keeps for a block of rows x kc.
inline size_t small_a_max_outliers(int rows, int kc) {
  return static_cast<size_t>(rows) * kc / kSmallAOutlierShare;
}

// The most slot entries pack_a_small builds for a block of rows x kc: twice the most
// outliers, four times what NITI-like errors (0.4 % of values, half of them over budget)
// fill with their padding; a block needing more gets none, and its outliers go to
// add_outliers.
inline size_t small_a_max_slot_entries(int rows, int kc) { return 2 * small_a_max_outliers(rows, kc); }

// Words of pack_a_small's outlier buffer for a block of rows x kc in tiles of mr rows: the
// tiles' starts (even, the lists' alignment), the list with a row's room past the most,
// the tiles' slot starts, and the slots (2 words an entry).
inline size_t small_a_outlier_words(int rows, int kc, int mr) {
  const size_t tiles = (static_cast<size_t>(rows) + mr - 1) / mr, starts = (tiles + 2) / 2 * 2;
  return 2 * starts + 2 * (small_a_max_outliers(rows, kc) + kc) + 2 * small_a_max_slot_entries(rows, kc);
}

// B panels (8 columns each) from which the small-A kernel pays for its extra pass over A
// (the range test and row sums): measured with bench_gemm.py on MobileNetV2's pointwise
// shapes (AVX2, 1 thread), it was 4-14 % slower than the int16 kernel at N = 16-32 (2-4
// panels) and 4-22 % faster from N = 64 (8 panels) up.
constexpr int kSmallAMinPanels = 8;

// The A blocks gemm_packed ran on micro_b_unsigned and on micro_small_a (gemm_block_counts
// has the others).
long long gemm_b_unsigned_blocks(bool reset);
long long gemm_small_a_blocks(bool reset);
// The A blocks (gemm_packed's, and the panel weight gradient's) that ran B's panels two at
// a time (a byte kernel's MicroPairFn), whichever byte kernel it was; count_pair_block()
// counts one.
long long gemm_pair_blocks(bool reset);
void count_pair_block();
// The small-A blocks with outliers whose pairs added their tiles' outliers themselves
// (micro_pair_small_a_outliers), counted once a block.
long long gemm_outlier_pair_blocks(bool reset);
void count_outlier_pair_block();

// Which microkernel an A block ran on, counted for gemm_block_counts by gemm_packed and by
// the panel convolutions (conv_panels.cpp), which pick among the same kernels.
enum class BlockKernel { kSigned, kUnsigned, kBUnsigned, kSmallA };
void count_block(BlockKernel kernel);

// Sets kernel's micro_pair_* to AVX2's pair kernels (gemm_avx2_pair.cpp; x86-64 only).
void set_avx2_pair_kernels(GemmKernel* kernel);

const GemmKernel* kernel_scalar();
const GemmKernel* kernel_avx2();
const GemmKernel* kernel_avx_vnni();
const GemmKernel* kernel_avx512_vnni();
const GemmKernel* kernel_neon_dot();  // nullptr where not compiled (not aarch64)
const GemmKernel* kernel_amx();       // nullptr where not compiled (not x86-64 Linux)

// The kernel of `isa` (the scalar one for an ISA not compiled in).
const GemmKernel* gemm_kernel(Isa isa);

// The kernel the panel convolutions (conv_panels.cpp) run: the active one, except that
// AMX hands them to AVX-512 VNNI (their gathers build K in runs of 4 bytes, not the 64
// a tile steps by, and with few channels a 32 x 32 tile would be mostly padding).
const GemmKernel* panel_kernel();

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Generic A packing, shared by the ISAs: `convert` maps an int8 to the packed element.
template <int MR, typename T, typename Convert>
inline void pack_a_tiles(MatrixS8 a, int rows, int kc, T* dst, Convert convert) {
  const int kgroups = (kc + 3) / 4;
  for (int r0 = 0; r0 < rows; r0 += MR) {
    T* tile = dst + static_cast<ptrdiff_t>(r0 / MR) * kgroups * MR * 4;
    for (int r = 0; r < MR; ++r) {
      const int row = r0 + r;
      T* out = tile + r * 4;
      if (row >= rows) {
        for (int g = 0; g < kgroups; ++g)
          for (int q = 0; q < 4; ++q) out[g * MR * 4 + q] = convert(0);
        continue;
      }
      const int8_t* src = a.row(row);
      int k = 0;
      if (a.k_stride == 1) {
        for (; k + 4 <= kc; k += 4, out += MR * 4)
          for (int q = 0; q < 4; ++q) out[q] = convert(src[k + q]);
      } else {  // strided (a transposed view): whole groups without the bounds test
        const ptrdiff_t ks = a.k_stride;
        for (; k + 4 <= kc; k += 4, out += MR * 4)
          for (int q = 0; q < 4; ++q) out[q] = convert(src[(k + q) * ks]);
      }
      for (; k < kc; k += 4, out += MR * 4)
        for (int q = 0; q < 4; ++q)
          out[q] = convert(k + q < kc ? src[static_cast<ptrdiff_t>(k + q) * a.k_stride] : 0);
    }
  }
}

// Partial tiles go through a full-size temporary, so kernels only know full tiles.
inline void store_partial(const int32_t* tmp, int nr, int32_t* c, ptrdiff_t ldc, int mr_valid,
                          int nr_valid, bool accumulate) {
  for (int r = 0; r < mr_valid; ++r)
    for (int j = 0; j < nr_valid; ++j)
      c[r * ldc + j] = accumulate ? c[r * ldc + j] + tmp[r * nr + j] : tmp[r * nr + j];
}

}  // namespace dsptrain
