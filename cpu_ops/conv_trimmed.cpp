// The implicit GEMM of a stride-1 convolution with each output position's taps trimmed to
// where the source lies. A padded 3 x 3 convolution over a small image spends much of its
// products on the zero border: at 2 x 2 pixels 80 of 144 taps, at 4 x 4 44 of 144, at
// 8 x 8 92 of 576 (VGG-11's conv7-8, conv5-6 and conv3-4 at 32 x 32 inputs, forward and
// backward data alike: a quarter of the whole step's multiply-accumulates). Output
// positions whose kernel windows meet the source alike form a class (at most 3 x 3 of
// them for a 3 x 3 kernel); a class's rows read only its taps' pieces of A, in place as
// gemm_rows does, and only the matching groups of the one packed B (APiece::b_skip), with
// B's column offsets (the offset trick's -128 x column sums) summed over those groups
// alone. The skipped bytes are the biased zero, so the int32 sums are the same.
//
// A class's rows are pixels spread over the output, so a tile's rows leave the registers
// each to its own address (micro_rows_at; through a buffer and copies they took VGG-11's
// conv5 and conv6 5-8 % longer). The whole depth is one block: B's panel (depth x 64
// bytes) stays in L2 while every tile of the task runs over it.
#include "conv_trimmed.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm_kernels.h"
#include "requant.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// The deepest product trimmed: its B panel, depth x 64 bytes, stays in L2 (as gemm_rows'
// rounded tiles).
constexpr int kTrimmedMaxK = 8192;

// Tiles run over each B panel in turn before the next chunk: about gemm_rows' row block.
constexpr int kChunkTiles = 32;

// Taps [k0, k1) of a window of k taps from padded row (or column) `at` that land in the
// source's [lo, hi); empty (k0 == k1) when none do.
struct TapSpan {
  int k0, k1;
  bool operator==(const TapSpan& o) const { return k0 == o.k0 && k1 == o.k1; }
};
TapSpan span_at(int at, int k, int lo, int hi) {
  const int k0 = std::clamp(lo - at, 0, k), k1 = std::clamp(hi - at, 0, k);
  return TapSpan{k0, std::max(k0, k1)};
}

// Output positions whose windows meet the source alike: their pieces of A and B, B's
// column offsets over those pieces (panels x nr), and the output pixels (all images).
struct TapClass {
  TapSpan ys, xs;
  std::vector<APiece> pieces;
  std::vector<int32_t> col_offset;
  std::vector<int> pixels;
  int groups = 0;
};

// A tile: rows [first, first + rows) of class `cls`'s pixels.
struct Tile {
  int cls, first, rows;
};

std::vector<TapClass> tap_classes(const PaddedSrc& src, const SourceWindow& win, const PackedB& b,
                                  const GemmKernel* kern) {
  std::vector<TapClass> classes;
  std::vector<int> class_of(static_cast<size_t>(src.oh) * src.ow);
  for (int oy = 0; oy < src.oh; ++oy)
    for (int ox = 0; ox < src.ow; ++ox) {
      const TapSpan ys = span_at(oy, src.kh, win.y0, win.y1), xs = span_at(ox, src.kw, win.x0, win.x1);
      size_t c = 0;
      while (c < classes.size() && !(classes[c].ys == ys && classes[c].xs == xs)) ++c;
      if (c == classes.size()) classes.push_back(TapClass{ys, xs, {}, {}, {}, 0});
      class_of[static_cast<size_t>(oy) * src.ow + ox] = static_cast<int>(c);
    }
  const int positions = src.oh * src.ow, nr = b.nr, panels = (b.n + nr - 1) / nr;
  std::vector<int32_t> sums(nr);
  for (TapClass& tc : classes) {
    // Depth (i, j, ch) of the patch is tap row i's piece j * ch of A and group
    // (i * kw + j) * ch / 4 of B.
    int b_next = 0;
    if (tc.xs.k1 > tc.xs.k0)
      for (int i = tc.ys.k0; i < tc.ys.k1; ++i) {
        const int g0 = (i * src.kw + tc.xs.k0) * src.ch / 4, groups = (tc.xs.k1 - tc.xs.k0) * src.ch / 4;
        tc.pieces.push_back(APiece{i * src.row_stride() + static_cast<ptrdiff_t>(tc.xs.k0) * src.ch, groups, g0 - b_next});
        b_next = g0 + groups;
        tc.groups += groups;
      }
    tc.col_offset.assign(static_cast<size_t>(panels) * nr, 0);
    for (int p = 0; p < panels; ++p) {
      const int8_t* panel = b.panels() + static_cast<size_t>(p) * b.k_pad * nr;
      int32_t* offset = tc.col_offset.data() + static_cast<size_t>(p) * nr;
      int g = 0;
      for (const APiece& piece : tc.pieces) {
        g += piece.b_skip;
        kern->colsum(panel + static_cast<size_t>(g) * nr * 4, piece.groups, sums.data());
        for (int j = 0; j < nr; ++j) offset[j] += sums[j];
        g += piece.groups;
      }
      for (int j = 0; j < nr; ++j) offset[j] *= -128;
    }
  }
  for (int img = 0; img < src.n; ++img)
    for (int pos = 0; pos < positions; ++pos) classes[class_of[pos]].pixels.push_back(img * positions + pos);
  return classes;
}

}  // namespace

double trimmed_border_share(int out_h, int out_w, int kh, int kw, const SourceWindow& win) {
  const auto inside = [](int out, int k, int lo, int hi) {
    long long taps = 0;
    for (int o = 0; o < out; ++o) {
      const TapSpan s = span_at(o, k, lo, hi);
      taps += s.k1 - s.k0;
    }
    return static_cast<double>(taps) / (static_cast<double>(out) * k);
  };
  if (out_h <= 0 || out_w <= 0) return 0.0;
  return 1.0 - inside(out_h, kh, win.y0, win.y1) * inside(out_w, kw, win.x0, win.x1);
}

bool trimmed_fits(int channels, int depth) {
  const GemmKernel* kern = gemm_kernel(gemm_isa(active_isa(), depth));
  return kern->micro_rows_at != nullptr && kern->colsum != nullptr && kern->offset_trick && kern->k_align == 1 &&
         kern->mr <= 8 && kern->nr <= 64 && channels % 4 == 0 && depth <= kTrimmedMaxK;
}

void gemm_rows_trimmed(const PaddedSrc& src, const SourceWindow& win, const PackedB& b, int32_t* c,
                       int64_t* absmax, FusedRequant* fused) {
  const GemmKernel* kern = gemm_kernel(b.isa);
  const int n = b.n, mr = kern->mr, nr = kern->nr, panels = (n + nr - 1) / nr;
  if (absmax) *absmax = 0;
  if (src.pixels() == 0 || n == 0) return;
  const std::vector<TapClass> classes = tap_classes(src, win, b, kern);
  std::vector<Tile> tiles;
  std::vector<long long> done;   // work (groups x rows tiles) up to each tile, for the split
  long long work = 0;
  for (int cls = 0; cls < static_cast<int>(classes.size()); ++cls) {
    const int rows = static_cast<int>(classes[cls].pixels.size());
    for (int first = 0; first < rows; first += mr) {
      tiles.push_back(Tile{cls, first, std::min(mr, rows - first)});
      work += classes[cls].groups + 16;   // + the tile's set-up and stores
      done.push_back(work);
    }
  }
  // Tasks of about equal work, several per thread (the pool hands them out as threads come
  // free), each a run of tiles over every panel.
  const int threads = pool_threads();
  const int ntasks = std::min(static_cast<int>(tiles.size()), threads == 1 ? 1 : 4 * threads);
  std::vector<int> task_start(ntasks + 1, static_cast<int>(tiles.size()));
  task_start[0] = 0;
  for (int t = 1, i = 0; t < ntasks; ++t) {
    const long long goal = work * t / ntasks;
    while (i < static_cast<int>(tiles.size()) && done[i] <= goal) ++i;
    task_start[t] = std::max(i, task_start[t - 1]);
  }
  const bool round = fused != nullptr && absmax != nullptr && fused->mode != RoundMode::kSto && fused->shift >= 0 &&
                     fused->shift <= 30;
  const bool fuse_after = !round && fused != nullptr && absmax != nullptr;
  const uint8_t* a = reinterpret_cast<const uint8_t*>(src.d);
  std::vector<int64_t> task_max(ntasks, 0);
  parallel_for(ntasks, [&](int task) {
    const int t0 = task_start[task], t1 = task_start[task + 1];
    std::vector<const uint8_t*> starts(static_cast<size_t>(t1 - t0) * mr);
    for (int t = t0; t < t1; ++t) {
      const Tile& tile = tiles[t];
      const std::vector<int>& pixels = classes[tile.cls].pixels;
      const int per_image = src.oh * src.ow;
      for (int r = 0; r < mr; ++r) {   // rows past the tile repeat its first (results dropped)
        const int p = pixels[tile.first + (r < tile.rows ? r : 0)];
        starts[static_cast<size_t>(t - t0) * mr + r] = a + src.base(p / per_image, p % per_image / src.ow, p % src.ow);
      }
    }
    int32_t* c_rows[8];   // one tile's rows (mr <= 8)
    int8_t* q_rows[8];
    uint32_t most = 0;
    for (int chunk = t0; chunk < t1; chunk += kChunkTiles)   // the chunk's rows of A stay in L2 over the panels
    for (int p = 0; p < panels; ++p) {
      const int8_t* panel = b.panels() + static_cast<size_t>(p) * b.k_pad * nr;
      const int col0 = p * nr, cols = std::min(nr, n - col0);
      for (int t = chunk; t < std::min(t1, chunk + kChunkTiles); ++t) {
        const Tile& tile = tiles[t];
        const TapClass& tc = classes[tile.cls];
        const uint8_t* const* rows = starts.data() + static_cast<size_t>(t - t0) * mr;
        const int32_t* offset = tc.col_offset.data() + col0;
        const int npieces = static_cast<int>(tc.pieces.size());
        for (int r = 0; r < tile.rows; ++r) {
          const size_t at = static_cast<size_t>(tc.pixels[tile.first + r]) * n + col0;
          c_rows[r] = c + at;
          q_rows[r] = round ? fused->out + at : nullptr;
        }
        kern->micro_rows_at(rows, tc.pieces.data(), npieces, panel, c_rows, round ? q_rows : nullptr, tile.rows, cols,
                            offset, round ? fused->shift : 0, round ? fused->mode : RoundMode::kRound, &most);
      }
    }
    if (fuse_after)   // stochastic rounding draws by element index: each finished row in turn
      for (int t = t0; t < t1; ++t)
        for (int r = 0; r < tiles[t].rows; ++r) {
          const size_t at = static_cast<size_t>(classes[tiles[t].cls].pixels[tiles[t].first + r]) * n;
          shift_round_absmax_range(c, at, at + n, fused->shift, fused->mode, fused->key, fused->out);
        }
    task_max[task] = most;
  });
  if (absmax) *absmax = *std::max_element(task_max.begin(), task_max.end());
  if (fused && absmax) fused->applied = true;
}

}  // namespace dsptrain
