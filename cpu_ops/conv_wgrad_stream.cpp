// The im2col weight gradient dw[O, KK] = err^T[O, P] x patches[P, KK] with B (the
// patches) packed one panel and one K block at a time, just before the row tiles use it,
// instead of all of it up front: VGG-11's conv4 packed 9.4 MB of patches (pack_b_k_rows)
// that went out to L3 and came back for the GEMM, with each B panel then read from L2 by
// every row tile. Here a task is one panel of 64 patch columns (a run of one tap row's
// kw * C bytes, so each group of 4 pixels is 4 contiguous source runs, one zmm
// interleave); per K block of pixels it packs that panel block into its own L2-sized
// buffer, takes its column sums (the offset trick's correction, per block) and runs every
// row tile of err^T (read in place, biased, as gemm_rows' A) over it. The first block
// stores C with its correction; later blocks accumulate, and their corrections are added
// to the panel's columns at the end. The panels are the pool's tasks, so no two threads
// pack the same B.
//
// Trimmed (a small padded image, VGG-11's conv3-8): err^T's pixels go position by
// position, (oy, ox, image), so the pixels whose tap of a panel lands in the source are
// whole runs of it, one per output row of positions; the panel packs only those and its
// row tiles read only those runs of err^T (APiece per run). The products of the zero
// border (16 % of the taps at 8 x 8, 31 % at 4 x 4, 56 % at 2 x 2) are not made.
#include <algorithm>
#include <vector>

#include "conv_wgrad_stream.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Pixels per K block: a block's packed panel (2048 x 64 bytes, 128 KiB) stays in L2 while
// every row tile reads it (gemm_rows' K block).
constexpr int kBlockPixels = 2048;

const GemmKernel* stream_kernel() { return gemm_kernel(gemm_isa(active_isa(), kMaxInt32Depth)); }

}  // namespace

bool wgrad_stream_fit(const ConvShape& s) {
  const GemmKernel* kern = stream_kernel();
  if (!kern->micro_rows || !kern->interleave_panel || !kern->colsum || !kern->offset_trick || kern->k_align != 1)
    return false;
  // At least one whole K block: on fewer pixels (VGG-11's conv5-8, 1024 and 256) the rows'
  // short reductions pay the panel packing per task and the GEMM on B packed once won
  // (conv7 at one thread 3.16 against 3.38 ms). With fewer than 64 output channels the
  // panel and lane kernels keep the shape.
  const long long pixels = 1LL * s.n * s.oh() * s.ow();
  return (s.kw * s.c) % kern->nr == 0 && pixels % 4 == 0 && pixels >= kBlockPixels && s.o >= 64;
}

size_t wgrad_stream_panel_bytes() { return static_cast<size_t>(kBlockPixels) * stream_kernel()->nr + 64; }

bool wgrad_stream_trimmed_fit(const ConvShape& s) {
  const GemmKernel* kern = stream_kernel();
  if (!kern->micro_rows || !kern->interleave_panel || !kern->colsum || !kern->offset_trick || kern->k_align != 1)
    return false;
  // Each panel within one tap (whole panels in a channel run), whole groups of 4 images.
  return s.stride == 1 && s.c % kern->nr == 0 && s.n % 4 == 0 && s.o >= 64;
}

void conv_wgrad_stream(const PaddedSrc& src, const uint8_t* err_t, ptrdiff_t ld, int o, int32_t* dw,
                       const SourceWindow* trim) {
  const GemmKernel* kern = stream_kernel();
  const int nr = kern->nr, mr = kern->mr, run = src.run(), kk = src.kh * run, panels = kk / nr;
  const int pixels = static_cast<int>(src.pixels());
  std::vector<ptrdiff_t> base(pixels);   // pixel k's first tap row in the padded source, k in err^T's order
  const int per_image = src.oh * src.ow;
  for (int p = 0; p < pixels; ++p)
    base[p] = trim ? src.base(p % src.n, p / src.n / src.ow, p / src.n % src.ow)
                   : src.base(p / per_image, p % per_image / src.ow, p % src.ow);
  std::vector<const uint8_t*> starts(round_up(o, mr), err_t);   // rows past o repeat row 0 (dropped)
  for (int r = 0; r < o; ++r) starts[r] = err_t + r * ld;
  // Panels that do not split evenly over the threads (VGG-11's conv2: 9 over 2) split their
  // rows too, each part packing the panel for itself: the packing done twice costs less
  // than a thread idle for a ninth of the op.
  const int threads = pool_threads(), tiles = (o + mr - 1) / mr;
  const int row_parts = panels % threads != 0 && panels < 8 * threads ? std::min(threads, tiles) : 1;
  parallel_for(panels * row_parts, [&](int task) {
    const int panel = task / row_parts, part = task % row_parts;
    const int r0 = tiles * part / row_parts * mr, r1 = std::min(o, tiles * (part + 1) / row_parts * mr);
    thread_local Kept<std::vector<int8_t>> buffer;
    if (buffer.size() < wgrad_stream_panel_bytes()) buffer.resize(wgrad_stream_panel_bytes());
    int8_t* packed = PackedB::align64(buffer.data());
    const int col0 = panel * nr, tap_row = col0 / run;
    const int8_t* from = src.d + static_cast<ptrdiff_t>(tap_row) * src.row_stride() + col0 % run;
    // The runs [begin, end) of err^T's pixels this panel reduces over: all of them, or
    // (trimmed) those whose tap lands in the window, a run per row of output positions.
    std::vector<std::pair<int, int>> runs;
    if (!trim) {
      runs.emplace_back(0, pixels);
    } else {
      const int tap_col = col0 % run / src.ch, n = src.n;
      const int oy0 = std::clamp(trim->y0 - tap_row, 0, src.oh), oy1 = std::clamp(trim->y1 - tap_row, 0, src.oh);
      const int ox0 = std::clamp(trim->x0 - tap_col, 0, src.ow), ox1 = std::clamp(trim->x1 - tap_col, 0, src.ow);
      if (ox1 > ox0)
        for (int oy = oy0; oy < oy1; ++oy) runs.emplace_back((oy * src.ow + ox0) * n, (oy * src.ow + ox1) * n);
    }
    int total = 0;
    for (const auto& r : runs) total += r.second - r.first;
    alignas(64) int32_t first[64] = {}, later[64] = {}, sums[64];
    std::vector<APiece> pieces;
    size_t at_run = 0;
    int in_run = 0;   // the next block starts at runs[at_run].first + in_run
    for (int k0 = 0; k0 < std::max(total, 1); k0 += kBlockPixels) {   // (no pixels at all: the zeros, once)
      const int groups = std::min(kBlockPixels, total - k0) / 4;
      pieces.clear();
      for (int g = 0, left = groups * 4; left > 0;) {
        const int begin = runs[at_run].first + in_run, take = std::min(left, runs[at_run].second - begin);
        pieces.push_back(APiece{begin, take / 4});
        for (int q = 0; q < take / 4; ++q, ++g) {
          const ptrdiff_t* b = base.data() + begin + 4 * q;
          const int8_t* rows[4] = {from + b[0], from + b[1], from + b[2], from + b[3]};
          kern->interleave_panel(rows, packed + static_cast<ptrdiff_t>(g) * nr * 4);
        }
        left -= take;
        in_run += take;
        if (begin + take == runs[at_run].second) ++at_run, in_run = 0;
      }
      kern->colsum(packed, groups, sums);
      int32_t* correction = k0 == 0 ? first : later;
      for (int j = 0; j < nr; ++j)
        correction[j] = static_cast<int32_t>(static_cast<uint32_t>(correction[j]) + static_cast<uint32_t>(sums[j]) * 0xFFFFFF80u);
      for (int r = r0; r < r1; r += mr)
        kern->micro_rows(starts.data() + r, pieces.data(), static_cast<int>(pieces.size()), packed,
                         dw + static_cast<ptrdiff_t>(r) * kk + col0, kk, std::min(mr, o - r), nr, k0 > 0, first);
    }
    if (total > kBlockPixels)
      for (int r = r0; r < r1; ++r) {
        int32_t* c = dw + static_cast<ptrdiff_t>(r) * kk + col0;
        for (int j = 0; j < nr; ++j) c[j] = static_cast<int32_t>(static_cast<uint32_t>(c[j]) + static_cast<uint32_t>(later[j]));
      }
  });
}

}  // namespace dsptrain
