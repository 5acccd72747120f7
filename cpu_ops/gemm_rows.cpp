// The GEMM with A read where it lies: the implicit-GEMM convolution (a pixel's patch is
// its kh tap rows in the padded source, never copied into an im2col matrix), and no
// packing pass over A either, since the source is stored biased (a + 128) and the
// microkernel broadcasts each row's dwords from it directly. The loop nest is
// gemm_packed's (Goto & van de Geijn, TOMS 2008) minus the A packing: per task (rows x
// B panels), per K block, per B panel (in L1), per row tile: micro_rows.
#include <algorithm>
#include <vector>

#include "gemm_kernels.h"
#include "requant.h"
#include "thread_pool.h"

namespace dsptrain {

bool gemm_rows_supported(const PackedB& b) {
  const GemmKernel* kern = gemm_kernel(b.isa);
  return kern->isa == b.isa && kern->micro_rows != nullptr && kern->offset_trick && kern->k_align == 1;
}

namespace {

// K block: with A read in place, no packed A block has to stay in L2, and the longer block
// halves the passes over C of deep products (the weight gradient): 2048 against the
// kernel's 512 took VGG-11's weight gradients 52 -> 50 ms, backward data 44.5 -> 42 ms
// at one thread.
constexpr int kRowsKc = 2048;

// The pieces of depth [k0, k0 + kc) of a row: where each run's part of it starts (from
// the row's base) and how many groups of 4 it holds. k0 and kc are multiples of 4.
void pieces_of(const BiasedRows& a, int k0, int kc, std::vector<APiece>* out) {
  out->clear();
  for (int k = k0; k < k0 + kc;) {
    const int seg = k / a.seg_len, in_seg = k - seg * a.seg_len;
    const int len = std::min(a.seg_len - in_seg, k0 + kc - k);
    out->push_back(APiece{seg * a.seg_stride + in_seg, (len + 3) / 4});
    k += len;
  }
}

// The deepest product rounded from the registers, which takes its whole depth in one
// block: B's panel (depth x 64 bytes, 288 KiB for VGG-11's 3 x 3 x 512) stays in L2.
constexpr int kRoundedMaxK = 8192;

// Whether gemm_rows rounds its tiles to int8 in the registers (the given shift's fused
// requantize of round or psto; stochastic rounding's random words go by element index,
// so it keeps the pass over the int32 tile).
bool rounds_in_registers(const GemmKernel* kern, const FusedRequant* fused, const int64_t* absmax, bool whole_rows,
                         int k) {
  return kern->micro_rows_round != nullptr && fused != nullptr && absmax != nullptr && whole_rows &&
         fused->mode != RoundMode::kSto && fused->shift >= 0 && fused->shift <= 30 && k > 0 && k <= kRoundedMaxK;
}

// gemm_rows' tasks with each tile rounded into fused->out (row stride n) as it leaves the
// registers, and stored into c as well; *absmax the largest |acc|. A given shift that
// turns out too small is mended from c by the caller (finish_fused_requant).
void rows_rounded(const GemmKernel* kern, const BiasedRows& a, int m, const PackedB& b, int32_t* c, int64_t* absmax,
                  FusedRequant* fused) {
  const int n = b.n, mr = kern->mr, nr = kern->nr;
  const TaskSplit split = split_tasks(kern, m, n, pool_threads());
  std::vector<uint32_t> task_max(split.tasks(), 0);
  std::vector<APiece> whole;
  pieces_of(a, 0, b.k, &whole);
  const int panels = (n + nr - 1) / nr;
  parallel_for(split.tasks(), [&](int task) {
    const int row0 = (task / split.n_splits) * split.mc, rows = std::min(split.mc, m - row0);
    const int p0 = (task % split.n_splits) * split.panels_per_split, p1 = std::min(panels, p0 + split.panels_per_split);
    if (rows <= 0) return;
    std::vector<const uint8_t*> starts(round_up(rows, mr), a.data + a.row_base(a.ctx, row0));
    for (int r = 1; r < rows; ++r) starts[r] = a.data + a.row_base(a.ctx, row0 + r);
    for (int p = p0; p < p1; ++p) {
      const int8_t* b_panel = b.panels() + static_cast<size_t>(p) * b.k_pad * nr;
      for (int r = 0; r < rows; r += mr)
        kern->micro_rows_round(starts.data() + r, whole.data(), static_cast<int>(whole.size()), b_panel,
                               c + static_cast<ptrdiff_t>(row0 + r) * n + p * nr, n,
                               fused->out + static_cast<ptrdiff_t>(row0 + r) * n + p * nr, n, std::min(mr, rows - r),
                               std::min(nr, n - p * nr), b.col_offset.data() + p * nr, fused->shift, fused->mode,
                               &task_max[task]);
    }
  });
  *absmax = *std::max_element(task_max.begin(), task_max.end());
  fused->applied = true;
}

}  // namespace

void gemm_rows(const BiasedRows& a, int m, const PackedB& b, int32_t* c, ptrdiff_t ldc, int64_t* absmax,
               FusedRequant* fused) {
  const GemmKernel* kern = gemm_kernel(b.isa);
  const int n = b.n, k = b.k, mr = kern->mr, nr = kern->nr;
  if (m > 0 && n > 0 && rounds_in_registers(kern, fused, absmax, ldc == n, k)) {
    rows_rounded(kern, a, m, b, c, absmax, fused);
    return;
  }
  for_each_c_tile(kern, m, n, k, c, ldc, absmax, [&](const TaskSplit&, const CTile& t) {
    // Row starts, padded to whole tiles with the block's first row (results dropped).
    std::vector<const uint8_t*> starts(round_up(t.rows, mr), a.data + a.row_base(a.ctx, t.row0));
    for (int r = 1; r < t.rows; ++r) starts[r] = a.data + a.row_base(a.ctx, t.row0 + r);
    std::vector<APiece> pieces;
    for (int pc = 0; pc < k; pc += kRowsKc) {
      const int kc = std::min(kRowsKc, k - pc);
      pieces_of(a, pc, kc, &pieces);
      for (int p = t.p0; p < t.p1; ++p) {
        const int8_t* b_panel = b.panels() + static_cast<size_t>(p) * b.k_pad * nr + static_cast<size_t>(pc) * nr;
        const int cols = std::min(nr, n - p * nr);
        for (int r = 0; r < t.rows; r += mr)
          kern->micro_rows(starts.data() + r, pieces.data(), static_cast<int>(pieces.size()), b_panel,
                           c + static_cast<ptrdiff_t>(t.row0 + r) * ldc + p * nr, ldc, std::min(mr, t.rows - r), cols,
                           pc > 0, b.col_offset.data() + p * nr);
      }
    }
  }, fused);
}

}  // namespace dsptrain
