// The GEMM driver: picks the kernel, packs B, splits C into tasks for the thread pool,
// and runs the cache-blocked loop nest of Goto & van de Geijn ("Anatomy of
// high-performance matrix multiplication", TOMS 2008) around the microkernels:
//   per task (a block of rows x a range of B panels), per K block of kc:
//     pack the A block (mc x kc, lives in L2) once,
//     for each B panel (nr x kc, lives in L1 across the row tiles): for each row tile: micro.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "cpu_features.h"
#include "gemm_kernels.h"
#include "interleave.h"
#include "requant.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

const GemmKernel* kernel_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni: return kernel_avx512_vnni();
    case Isa::kAvxVnni: return kernel_avx_vnni();
    case Isa::kAvx2: return kernel_avx2();
    case Isa::kNeonDot: return kernel_neon_dot();
    case Isa::kAmx: return kernel_amx();
    case Isa::kScalar: return kernel_scalar();
  }
  return kernel_scalar();
}

Isa g_active = best_isa();

}  // namespace

const GemmKernel* gemm_kernel(Isa isa) {
  const GemmKernel* k = kernel_for(isa);
  return k ? k : kernel_scalar();
}

const GemmKernel* panel_kernel() {
  return gemm_kernel(active_isa() == Isa::kAmx ? Isa::kAvx512Vnni : active_isa());
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni: return "avx512vnni";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx2: return "avx2";
    case Isa::kNeonDot: return "neon";
    case Isa::kAmx: return "amx";
    case Isa::kScalar: return "scalar";
  }
  return "?";
}

bool isa_from_name(const std::string& name, Isa* out) {
  for (Isa isa : {Isa::kAmx, Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kAvx2, Isa::kNeonDot, Isa::kScalar}) {
    if (name == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_supported(Isa isa) {
  if (kernel_for(isa) == nullptr) return false;
  const CpuFeatures f = detect_cpu_features();
  switch (isa) {
    case Isa::kAvx512Vnni: return f.avx512_vnni;
    case Isa::kAvxVnni: return f.avx_vnni && f.avx2;
    case Isa::kAvx2: return f.avx2;
    case Isa::kNeonDot: return f.neon_dotprod;
    case Isa::kAmx: return f.amx_int8 && f.avx512_vnni && amx_permitted();  // panels fall back to VNNI
    case Isa::kScalar: return true;
  }
  return false;
}

Isa best_isa() {
  for (Isa isa : {Isa::kAmx, Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kNeonDot, Isa::kAvx2})
    if (isa_supported(isa)) return isa;
  return Isa::kScalar;
}

Isa active_isa() { return g_active; }
void set_active_isa(Isa isa) { g_active = isa; }

namespace {

// Sets out's shape fields and sizes its buffers for b[n, k] on `isa`'s kernel.
const GemmKernel* start_packing(int n, int k, Isa isa, PackedB* out) {
  const GemmKernel* kern = kernel_for(isa);
  const int nr = kern->nr, k_pad = 4 * padded_kgroups(kern, std::max(k, 1));
  const int panels = (n + nr - 1) / nr;
  out->isa = isa;
  out->n = n;
  out->k = k;
  out->nr = nr;
  out->k_pad = k_pad;
  out->data.resize(static_cast<size_t>(panels) * k_pad * nr + PackedB::kAlignSlack);
  out->col_offset.assign(static_cast<size_t>(panels) * nr, 0);
  return kern;
}

const int8_t* strided_k_row(const void* b, int kk, int /*seg*/) {
  const MatrixS8& m = *static_cast<const MatrixS8*>(b);
  return m.data + static_cast<ptrdiff_t>(kk) * m.k_stride;
}

// sum[j] += rows[q][j] for the non-null rows (locals, so the loop vectorises: through
// the packing lambda's captures GCC reloaded `width` every element).
void add_rows(const int8_t* const* rows, int width, int32_t* __restrict sum) {
  for (int q = 0; q < 4; ++q) {
    const int8_t* __restrict r = rows[q];
    if (r)
      for (int j = 0; j < width; ++j) sum[j] += r[j];
  }
}

}  // namespace

size_t packed_b_bytes(int n, int k, Isa isa) {
  const GemmKernel* kern = kernel_for(gemm_isa(isa, k));
  const size_t panels = (static_cast<size_t>(n) + kern->nr - 1) / kern->nr;
  return panels * 4 * padded_kgroups(kern, std::max(k, 1)) * kern->nr + PackedB::kAlignSlack + panels * kern->nr * 4;
}

bool pack_b_k_rows_fits(int n, int k, Isa isa) {
  const GemmKernel* kern = kernel_for(gemm_isa(isa, k));
  const long long panels = (n + kern->nr - 1) / kern->nr;
  return panels * 4 * padded_kgroups(kern, std::max(k, 1)) * kern->nr < (1LL << 31);
}

// Each group's 4 source rows are contiguous over the columns, so a group is one 4-row
// byte interleave across all panels (the rows read once, in order); the offset trick's
// column sums add up along the way.
void pack_b_k_rows(int n, int k, Isa isa, KRowFn row, const void* ctx, PackedB* out, int segments) {
  const GemmKernel* kern = start_packing(n, k, gemm_isa(isa, k), out);
  const int nr = kern->nr, k_pad = out->k_pad, groups = k_pad / 4, width = n / segments, w4 = width / 4 * 4;
  const size_t panel_bytes = static_cast<size_t>(k_pad) * nr;
  std::vector<int32_t> offsets(n);  // where column j's dword goes in a group (pack_b_k_rows_fits)
  for (int j = 0; j < n; ++j) offsets[j] = static_cast<int32_t>((j / nr) * panel_bytes + (j % nr) * 4);
  int8_t* panels = out->panels();
  const int panel_count = (n + nr - 1) / nr;
  for (int p = 0; p < panel_count; ++p)  // padding columns of the last panel
    if (n - p * nr < nr)
      for (int g = 0; g < groups; ++g)
        std::memset(panels + p * panel_bytes + (static_cast<size_t>(g) * nr + n - p * nr) * 4, 0, (nr - (n - p * nr)) * 4);
  const int tasks = tasks_for(panel_bytes * panel_count, groups);
  // Column sums for the offset trick: from the packed panels by the kernel's own colsum
  // (vpdpbusd with ones, 64 columns at once) where it has one, else added up per group.
  const bool sum_while_packing = kern->offset_trick && kern->colsum == nullptr;
  std::vector<int32_t> sums(sum_while_packing ? static_cast<size_t>(tasks) * n : 0, 0);
  parallel_for(tasks, [&](int t) {
    const int g0 = static_cast<int>(static_cast<long long>(groups) * t / tasks);
    const int g1 = static_cast<int>(static_cast<long long>(groups) * (t + 1) / tasks);
    int32_t* sum = sum_while_packing ? sums.data() + static_cast<size_t>(t) * n : nullptr;
    for (int g = g0; g < g1; ++g)
      for (int seg = 0; seg < segments; ++seg) {
        const int8_t* rows[4];
        for (int q = 0; q < 4; ++q) rows[q] = 4 * g + q < k ? row(ctx, 4 * g + q, seg) : nullptr;
        int8_t* dst = panels + static_cast<size_t>(g) * nr * 4;
        const int32_t* off = offsets.data() + seg * width;
        const bool whole = rows[3] != nullptr;  // else the last, partial group: byte by byte
        int j0 = 0;  // whole panels by the kernel's own interleave, where the piece holds them
        if (whole && kern->interleave_panel && seg * width % nr == 0)
          for (; j0 + nr <= width; j0 += nr) {
            const int8_t* at[4] = {rows[0] + j0, rows[1] + j0, rows[2] + j0, rows[3] + j0};
            kern->interleave_panel(at, dst + off[j0]);
          }
        if (whole && j0 < w4) interleave4(rows, w4, off, dst, j0);
        for (int j = whole ? std::max(w4, j0) : 0; j < width; ++j)
          for (int q = 0; q < 4; ++q) dst[off[j] + q] = rows[q] ? rows[q][j] : 0;
        if (sum) add_rows(rows, width, sum + seg * width);
      }
  });
  if (!kern->offset_trick) return;
  if (!sum_while_packing) {
    parallel_for(panel_count, [&](int p) {
      kern->colsum(panels + p * panel_bytes, groups, out->col_offset.data() + static_cast<size_t>(p) * nr);
      for (int j = 0; j < nr; ++j) out->col_offset[static_cast<size_t>(p) * nr + j] *= -128;
    });
    return;
  }
  for (int j = 0; j < n; ++j) {
    int32_t total = 0;
    for (int t = 0; t < tasks; ++t) total += sums[static_cast<size_t>(t) * n + j];
    out->col_offset[j] = -128 * total;
  }
}


Isa gemm_isa(Isa isa, int k) {
  constexpr int kAmxMinDepth = 33;  // measured: VNNI is faster at K = 27, AMX from K = 64 up
  return isa == Isa::kAmx && k < kAmxMinDepth ? Isa::kAvx512Vnni : isa;
}

void pack_b(MatrixS8 b, int n, int k, Isa isa, PackedB* out) {
  if (b.row_stride == 1 && b.k_stride != 1 && pack_b_k_rows_fits(n, k, isa)) {  // k-major (a transposed view)
    pack_b_k_rows(n, k, isa, strided_k_row, &b, out);
    return;
  }
  const GemmKernel* kern = start_packing(n, k, gemm_isa(isa, k), out);
  const int nr = kern->nr, k_pad = out->k_pad, panels = (n + nr - 1) / nr;
  const bool offset_trick = kern->offset_trick;
  // Per panel: walk k in groups of 4 with the nr columns innermost, so the writes are
  // sequential and the nr source rows stream in parallel; whole groups of contiguous
  // rows move as one 4-byte word.
  parallel_for(panels, [&](int p) {
    int8_t* const panel = out->panels() + static_cast<size_t>(p) * k_pad * nr;
    const int cols = std::min(nr, n - p * nr);
    const int8_t* src0 = b.data + static_cast<ptrdiff_t>(p) * nr * b.row_stride;
    const int full_groups = b.k_stride == 1 ? k / 4 : 0;
    const int first = kern->pack_panel_rows && full_groups > 0
                          ? kern->pack_panel_rows(src0, b.row_stride, cols, full_groups, panel) : 0;
    int8_t* dst = panel + static_cast<size_t>(first) * nr * 4;
    for (int g = first; g < k_pad / 4; ++g, dst += nr * 4) {
      const int k0 = g * 4;
      for (int j = 0; j < cols; ++j) {
        const int8_t* src = src0 + static_cast<ptrdiff_t>(j) * b.row_stride;
        if (g < full_groups) {
          std::memcpy(dst + j * 4, src + k0, 4);
          continue;
        }
        for (int q = 0; q < 4; ++q)
          dst[j * 4 + q] = k0 + q < k ? src[static_cast<ptrdiff_t>(k0 + q) * b.k_stride] : 0;
      }
      if (cols < nr) std::memset(dst + cols * 4, 0, (nr - cols) * 4);
    }
    if (!offset_trick) return;
    if (kern->colsum) {  // -128 * colsum(b), from the packed panel (its padding is zero)
      int32_t* sums = out->col_offset.data() + static_cast<size_t>(p) * nr;
      kern->colsum(panel, k_pad / 4, sums);
      for (int j = 0; j < nr; ++j) sums[j] *= -128;
      return;
    }
    for (int j = 0; j < cols; ++j) {  // -128 * colsum(b): the offset trick's correction
      const int8_t* src = src0 + static_cast<ptrdiff_t>(j) * b.row_stride;
      int32_t sum = 0;
      if (b.k_stride == 1) {
        for (int kk = 0; kk < k; ++kk) sum += src[kk];
      } else {
        for (int kk = 0; kk < k; ++kk) sum += src[static_cast<ptrdiff_t>(kk) * b.k_stride];
      }
      out->col_offset[p * nr + j] = -128 * sum;
    }
  });
}

TaskSplit split_tasks(const GemmKernel* kern, int m, int n, int threads) {
  const int mr = kern->mr, panels = (n + kern->nr - 1) / kern->nr;
  int m_blocks = round_up((m + kern->mc - 1) / kern->mc, threads);
  m_blocks = std::min(m_blocks, (m + mr - 1) / mr);
  const int mc = round_up((m + m_blocks - 1) / m_blocks, mr);
  m_blocks = (m + mc - 1) / mc;
  const int n_splits = std::min(panels, std::max(1, (2 * threads + m_blocks - 1) / m_blocks));
  return TaskSplit{mc, m_blocks, n_splits, (panels + n_splits - 1) / n_splits};
}

int a_row_bytes(Isa isa, int k) {
  const GemmKernel* kern = gemm_kernel(gemm_isa(isa, k));
  return kern->a_is_rows && k <= kern->kc ? 4 * padded_kgroups(kern, k) : k;
}

int a_rows(Isa isa, int m) { return round_up(m, gemm_kernel(isa)->mr); }

void for_each_c_tile(const GemmKernel* kern, int m, int n, int k, int32_t* c, ptrdiff_t ldc, int64_t* absmax,
                     const std::function<void(const TaskSplit&, const CTile&)>& tile, FusedRequant* fused) {
  if (absmax) *absmax = 0;
  if (m <= 0 || n <= 0) return;
  if (k == 0) {
    for (int i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0);
    return;
  }
  // Element (i, j) of C is element i * n + j of the rounded tensor (its random stream index).
  const bool fuse = fused && absmax && ldc == n;
  const int nr = kern->nr, panels = (n + nr - 1) / nr;
  const TaskSplit split = split_tasks(kern, m, n, pool_threads());
  std::vector<int64_t> task_max(absmax ? split.tasks() : 0, 0);  // absmax: one per task
  parallel_for(split.tasks(), [&](int task) {
    const int row0 = (task / split.n_splits) * split.mc, p0 = (task % split.n_splits) * split.panels_per_split;
    const CTile t{row0, std::min(split.mc, m - row0), p0, std::min(panels, p0 + split.panels_per_split)};
    tile(split, t);
    if (!absmax || t.p1 <= t.p0) return;
    const int col0 = t.p0 * nr, col1 = std::min(n, t.p1 * nr);
    if (!fuse) {
      task_max[task] = absmax_block(c + static_cast<ptrdiff_t>(t.row0) * ldc + col0, t.rows, col1 - col0, ldc);
      return;
    }
    const size_t first = static_cast<size_t>(t.row0) * n;
    if (col0 == 0 && col1 == n) {  // whole rows: one contiguous range
      task_max[task] = shift_round_absmax_range(c, first, first + static_cast<size_t>(t.rows) * n, fused->shift,
                                                fused->mode, fused->key, fused->out);
      return;
    }
    int64_t most = 0;
    for (size_t at = first; at < first + static_cast<size_t>(t.rows) * n; at += n)
      most = std::max(most, shift_round_absmax_range(c, at + col0, at + col1, fused->shift, fused->mode, fused->key,
                                                     fused->out));
    task_max[task] = most;
  });
  if (absmax) *absmax = *std::max_element(task_max.begin(), task_max.end());
  if (fuse) fused->applied = true;
}

namespace {
std::atomic<long long> g_signed_blocks{0}, g_unsigned_blocks{0}, g_b_unsigned_blocks{0}, g_small_a_blocks{0},
    g_pair_blocks{0}, g_outlier_pair_blocks{0};

// Whether panels [t.p0, t.p1) of b hold no negative byte over groups [pc / 4, pc / 4 + kgroups)
// (their zero padding included): one read of what the task's row tiles read mc / mr times.
bool panels_nonnegative(const PackedB& b, const CTile& t, int pc, int kgroups) {
  uint8_t negative = 0;  // OR of the bytes: the top bit of any negative one
  const size_t bytes = static_cast<size_t>(kgroups) * 4 * b.nr;
  for (int p = t.p0; p < t.p1; ++p) {
    const uint8_t* at = reinterpret_cast<const uint8_t*>(b.panels()) + static_cast<size_t>(p) * b.k_pad * b.nr +
                        static_cast<size_t>(pc) * b.nr;
    for (size_t i = 0; i < bytes; ++i) negative |= at[i];
    if (negative & 0x80) return false;
  }
  return true;
}
}  // namespace

long long gemm_b_unsigned_blocks(bool reset) { return reset ? g_b_unsigned_blocks.exchange(0) : g_b_unsigned_blocks.load(); }
long long gemm_small_a_blocks(bool reset) { return reset ? g_small_a_blocks.exchange(0) : g_small_a_blocks.load(); }
long long gemm_pair_blocks(bool reset) { return reset ? g_pair_blocks.exchange(0) : g_pair_blocks.load(); }
void count_pair_block() { g_pair_blocks.fetch_add(1, std::memory_order_relaxed); }
long long gemm_outlier_pair_blocks(bool reset) {
  return reset ? g_outlier_pair_blocks.exchange(0) : g_outlier_pair_blocks.load();
}
void count_outlier_pair_block() { g_outlier_pair_blocks.fetch_add(1, std::memory_order_relaxed); }

void count_block(BlockKernel kernel) {
  std::atomic<long long>& counter = kernel == BlockKernel::kUnsigned    ? g_unsigned_blocks
                                    : kernel == BlockKernel::kBUnsigned ? g_b_unsigned_blocks
                                    : kernel == BlockKernel::kSmallA    ? g_small_a_blocks
                                                                        : g_signed_blocks;
  counter.fetch_add(1, std::memory_order_relaxed);
}

GemmBlockCounts gemm_block_counts(bool reset) {
  if (reset) return {g_signed_blocks.exchange(0), g_unsigned_blocks.exchange(0)};
  return {g_signed_blocks.load(), g_unsigned_blocks.load()};
}

// Rows of an A block with outliers computed before their outliers are added: 4 tiles'
// C rows (24 x N int32: 48 KB at N = 512) stay in L1/L2 for add_outliers, and B's panels
// are read from L2 once per chunk instead of once per block. Measured at 0.4 % outliers
// (bench_gemm's errors, 1 thread, against the same block without outliers): 24 rows
// 5-9 % slower, 6 rows 11-22 %, the whole block (192 rows, C's rows in L3 by then) 9-29 %,
// and per tile and panel right after micro (C's tile in L1) 15-24 % even at 0.02 %.
constexpr int kOutlierChunkRows = 24;
constexpr int kOutlierPairMinPanels = 16, kOutlierPairMinDepth = 256;

void gemm_packed(MatrixS8 a, int m, const PackedB& b, int32_t* c, ptrdiff_t ldc, bool a_padded, int64_t* absmax,
                 FusedRequant* fused) {
  const GemmKernel* kern = kernel_for(b.isa);
  const int n = b.n, k = b.k, mr = kern->mr, nr = kern->nr, kc_max = kern->kc;
  const bool in_place = a_padded && kern->a_is_rows && k <= kc_max && a.k_stride == 1 && a.group_rows == 0 &&
                        a.row_stride == 4 * padded_kgroups(kern, k);
  for_each_c_tile(kern, m, n, k, c, ldc, absmax, [&](const TaskSplit& split, const CTile& t) {
    // room for the widest packing: pack_a's elements, or pack_a_small's bytes and tails
    const size_t a_bytes =
        static_cast<size_t>(split.mc) * 4 * padded_kgroups(kern, std::min(k, kc_max)) * kern->a_elem_bytes +
        static_cast<size_t>(split.mc / mr + 1) * kSmallATail;
    thread_local Kept<std::vector<uint8_t>> a_scratch;
    if (!in_place && a_scratch.size() < a_bytes + 64) a_scratch.resize(a_bytes + 64);
    uint8_t* a_pack = in_place ? nullptr : PackedB::align64(a_scratch.data());  // a_bytes + 64: room to align
    if (kern->task_begin) kern->task_begin();
    for (int pc = 0; pc < k; pc += kc_max) {
      const int kc = std::min(kc_max, k - pc), kgroups = padded_kgroups(kern, kc);
      const MatrixS8 a_block = a.from(t.row0, pc);
      // Where the ISA has byte kernels (AVX2's vpmaddubsw), the first that is exact here:
      // A with no negative value, else B panels with none, else A within [-64, 64] but for
      // a few outliers (where B has the panels to pay for the range test); otherwise pack_a
      // and micro.
      SmallAOutliers outliers;
      const bool unsigned_a = !in_place && kern->pack_a_unsigned && kern->pack_a_unsigned(a_block, t.rows, kc, a_pack);
      const bool unsigned_b = !in_place && !unsigned_a && kern->micro_b_unsigned && panels_nonnegative(b, t, pc, kgroups);
      const bool small_a = !in_place && !unsigned_a && !unsigned_b && kern->pack_a_small &&
                           (n + nr - 1) / nr >= kSmallAMinPanels &&
                           kern->pack_a_small(a_block, t.rows, kc, a_pack, &outliers);
      if (in_place) {
        a_pack = reinterpret_cast<uint8_t*>(const_cast<int8_t*>(a_block.data));
      } else if (unsigned_b) {
        kern->pack_a_bytes(a_block, t.rows, kc, a_pack);
      } else if (!unsigned_a && !small_a) {
        kern->pack_a(a_block, t.rows, kc, a_pack);
      }
      count_block(unsigned_a ? BlockKernel::kUnsigned
                  : unsigned_b ? BlockKernel::kBUnsigned
                  : small_a    ? BlockKernel::kSmallA
                               : BlockKernel::kSigned);
      const MicroFn micro = unsigned_a ? kern->micro_unsigned
                            : unsigned_b ? kern->micro_b_unsigned
                            : small_a    ? kern->micro_small_a
                                         : kern->micro;
      const bool bytes = unsigned_a || unsigned_b || small_a;
      const size_t a_tile_bytes =
          static_cast<size_t>(kgroups) * mr * 4 * (bytes ? 1 : kern->a_elem_bytes) + (small_a ? kSmallATail : 0);
      // Row tiles in chunks: all at once (each B panel read from L1 by every tile), but where
      // the block has outliers a few at a time, whose outliers are then added while their C
      // rows are still in the cache.
      const bool with_outliers = small_a && outliers.total > 0;
      // Where the ISA has it, the pair kernel adds its tile's outliers to its accumulators
      // before they leave the registers (AVX2: one slot of a row's outliers after another),
      // and add_outliers below is left only an odd last panel: on VGG-11's deep shapes with
      // NITI-like errors faster than adding them after the chunk (docs/depthwise.md). Not on tasks of
      // fewer than kOutlierPairMinPanels panels or K blocks under kOutlierPairMinDepth, where
      // one pass along a chunk's C rows costs less than a loop over each tile's few
      // outliers per pair (MobileNetV2's errors column 1-2 % slower in the pairs).
      const bool in_pairs = with_outliers && kern->micro_pair_small_a_outliers && outliers.slots &&
                            t.p1 - t.p0 >= kOutlierPairMinPanels && kc >= kOutlierPairMinDepth;
      if (in_pairs) count_outlier_pair_block();
      // Chunks only where add_outliers has panels left to do (all, or the pairs' odd last
      // one): with none left, the whole block's row tiles run along each pair of B panels.
      const bool adds_left = with_outliers && (!in_pairs || (t.p1 - t.p0) % 2 == 1);
      const int chunk = adds_left ? kOutlierChunkRows : t.rows;
      const size_t panel_stride = static_cast<size_t>(b.k_pad) * nr;
      // The byte kernels take B's panels two at a time where the ISA has the pair kernel
      // (AVX2: 6 x 16 of C, A's tile read once per pair; 5-10 % faster on VGG-11's shapes).
      const MicroPairFn pair = unsigned_a   ? kern->micro_pair_unsigned
                               : unsigned_b ? kern->micro_pair_b_unsigned
                               : small_a    ? kern->micro_pair_small_a
                                            : nullptr;
      if (pair && t.p1 - t.p0 >= 2) count_pair_block();
      for (int r0 = 0; r0 < t.rows; r0 += chunk) {
        const int r1 = std::min(t.rows, r0 + chunk);
        int p = t.p0;
        for (; pair && p + 1 < t.p1; p += 2) {  // two panels at a time
          const int8_t* b_panel = b.panels() + p * panel_stride + static_cast<size_t>(pc) * nr;
          const int cols = std::min(2 * nr, n - p * nr);
          for (int r = r0; r < r1; r += mr) {
            if (in_pairs)
              kern->micro_pair_small_a_outliers(a_pack + (r / mr) * a_tile_bytes, b_panel, b_panel + panel_stride,
                                                kgroups, c + static_cast<ptrdiff_t>(t.row0 + r) * ldc + p * nr, ldc,
                                                std::min(mr, t.rows - r), cols, pc > 0,
                                                outliers.slots + static_cast<size_t>(outliers.slot_start[r / mr]) * mr,
                                                outliers.slot_count(r / mr));
            else
              pair(a_pack + (r / mr) * a_tile_bytes, b_panel, b_panel + panel_stride, kgroups,
                   c + static_cast<ptrdiff_t>(t.row0 + r) * ldc + p * nr, ldc, std::min(mr, t.rows - r), cols, pc > 0);
          }
        }
        const int p_single = p;
        for (; p < t.p1; ++p) {
          const int8_t* b_panel = b.panels() + p * panel_stride + static_cast<size_t>(pc) * nr;
          const int cols = std::min(nr, n - p * nr);
          for (int r = r0; r < r1; r += mr)
            micro(a_pack + (r / mr) * a_tile_bytes, b_panel, kgroups,
                  c + static_cast<ptrdiff_t>(t.row0 + r) * ldc + p * nr, ldc, std::min(mr, t.rows - r), cols, pc > 0,
                  b.col_offset.data() + p * nr);
        }
        // the panels whose outliers are still to add: all, or the odd one the pairs left
        const int p_from = in_pairs ? p_single : t.p0;
        if (!with_outliers || t.p1 <= p_from) continue;
        const int first = outliers.tile_start[r0 / mr], last = outliers.tile_start[(r1 + mr - 1) / mr];
        if (last > first)  // each along the panels
          kern->add_outliers(outliers.list + first, last - first,
                             b.panels() + p_from * panel_stride + static_cast<size_t>(pc) * nr, panel_stride,
                             t.p1 - p_from, std::min(nr, n - (t.p1 - 1) * nr),
                             c + static_cast<ptrdiff_t>(t.row0) * ldc + p_from * nr, ldc, 0);
      }
    }
    if (kern->task_end) kern->task_end();
  }, fused);
}

void gemm_s8_s32(MatrixS8 a, MatrixS8 b, int m, int n, int k, int32_t* c, bool a_padded, int64_t* absmax,
                 FusedRequant* fused) {
  thread_local Kept<PackedB> packed;
  pack_b(b, n, k, active_isa(), &packed);
  gemm_packed(a, m, packed, c, n, a_padded, absmax, fused);
}

void gemm_s8_s64(MatrixS8 a, MatrixS8 b, int m, int n, int k, int64_t* c) {
  std::fill(c, c + static_cast<ptrdiff_t>(m) * n, 0);
  std::vector<int32_t> part(static_cast<size_t>(m) * n);
  for (int k0 = 0; k0 < k; k0 += kMaxInt32Depth) {
    const int kc = std::min(kMaxInt32Depth, k - k0);
    const MatrixS8 a_chunk = a.from(0, k0), b_chunk = b.from(0, k0);
    gemm_s8_s32(a_chunk, b_chunk, m, n, kc, part.data());
    for (size_t i = 0; i < part.size(); ++i) c[i] += part[i];
  }
}

}  // namespace dsptrain
