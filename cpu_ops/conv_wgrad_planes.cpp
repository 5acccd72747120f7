// The weight gradient of a source with few channels (VGG-11's RGB input: 27 taps, 64
// output channels, 65,536 pixels) as a GEMM with the taps as rows:
//   dw^T[taps, O] = planes[taps, pixels] x err[pixels, O].
// The source is laid out once as biased (x + 128) zero-padded channel planes, so along
// an output row the 4 pixels of a reduction group read 4 consecutive bytes of one plane
// for every tap: gemm_rows reads A in place (tap t's row starts at its plane, shifted
// by the tap's offset), and only the error is packed, as B (O columns, k-major rows: its
// NHWC pixel rows). The pixel panels (conv_panels.cpp) had the 27 taps as the GEMM's
// wide side (64 columns a tile, 42 % of them used) and gathered them per pixel.
//
// The reduction runs over the padded grid's rows: all hp rows of every image, each ow
// pixels long, so consecutive rows are one stride (wp) apart in a plane. The kh - 1 rows
// an image has beyond its last output row read the next image's (or the slack's) bytes
// against error rows of zeros, so they add nothing (kh - 1 of hp rows: 6 % more
// multiply-accumulates for VGG-11's conv1). The rows are split into chunks, a whole
// number per thread: each chunk packs its own error rows (in the L2 of the thread that
// reads them) into its own partial dw^T, and the partials are added at the end (int32
// sums wrap mod 2^32, so the total is exact whenever the true one fits int32).
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_wgrad_planes.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Grid rows a chunk reduces over: VGG-11's conv1 at batch 64 (2,176 rows of 32 pixels)
// in 10 chunks of about 7,000 pixels, whose packed error (448 KiB) stays in L2.
constexpr int kRowsPerChunk = 256;
constexpr size_t kPlaneSlack = 64;

struct Planes {
  ptrdiff_t plane;   // bytes of one channel's plane: n * hp * wp
  int wp, kw, c;
};

// Where tap t = (i, j, ch) of dw's [kh, kw, c] order starts: plane ch, row i, column j.
ptrdiff_t tap_base(const void* ctx, int t) {
  const Planes& p = *static_cast<const Planes*>(ctx);
  const int ch = t % p.c, tap = t / p.c;
  return ch * p.plane + static_cast<ptrdiff_t>(tap / p.kw) * p.wp + tap % p.kw;
}

// Pixel kk of a chunk's reduction (grid rows from row0, ow pixels a row): its error row,
// or a row of zeros past an image's last output row.
struct ErrRows {
  const int8_t* err;
  const int8_t* zeros;
  int row0, hp, oh, ow, o;
  static const int8_t* row(const void* ctx, int kk, int /*seg*/) {
    const ErrRows& e = *static_cast<const ErrRows*>(ctx);
    const int grid_row = e.row0 + kk / e.ow, b = grid_row / e.hp, y = grid_row % e.hp;
    if (y >= e.oh) return e.zeros;
    return e.err + ((static_cast<ptrdiff_t>(b) * e.oh + y) * e.ow + kk % e.ow) * e.o;
  }
};

int hp_of(const ConvShape& s) { return s.h + 2 * s.pad; }
int wp_of(const ConvShape& s) { return s.w + 2 * s.pad; }
int taps_of(const ConvShape& s) { return s.kh * s.kw * s.c; }

// Chunks of grid rows: at least one per kRowsPerChunk, a multiple of the threads.
int chunk_count(const ConvShape& s) {
  const int rows = s.n * hp_of(s), threads = pool_threads();
  return std::min(rows, round_up((rows + kRowsPerChunk - 1) / kRowsPerChunk, threads));
}

// x[n, h, w, c] -> planes[c][n][hp][wp], every byte XOR 0x80 (the padding the biased zero).
const uint8_t* fill_planes(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf) {
  const int hp = hp_of(s), wp = wp_of(s);
  const ptrdiff_t plane = static_cast<ptrdiff_t>(s.n) * hp * wp;
  const size_t bytes = wgrad_planes_source_bytes(s);
  if (buf->size() < bytes) buf->resize(bytes);
  int8_t* d = buf->data();
  std::memset(d + s.c * plane, 0x80, bytes - s.c * plane);
  parallel_ranges(s.n * hp, static_cast<size_t>(s.c) * plane, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const int y = r % hp - s.pad;
      for (int ch = 0; ch < s.c; ++ch) {
        int8_t* out = d + ch * plane + static_cast<ptrdiff_t>(r) * wp;
        std::memset(out, 0x80, wp);
        if (y < 0 || y >= s.h) continue;
        const int8_t* in = x + (static_cast<ptrdiff_t>(r / hp) * s.h + y) * s.w * s.c + ch;
        for (int i = 0; i < s.w; ++i) out[s.pad + i] = static_cast<int8_t>(in[i * s.c] ^ 0x80);
      }
    }
  });
  return reinterpret_cast<const uint8_t*>(d);
}

}  // namespace

bool wgrad_planes_fit(const ConvShape& s) {
  // Few taps (the GEMM's short side), enough output channels to fill B's panels, whole
  // groups of 4 pixels along each output row, and the GEMM that reads A in place.
  if (s.stride != 1 || s.c > 4 || taps_of(s) > 64 || s.o < 32 || s.ow() % 4 != 0) return false;
  const GemmKernel* kern = gemm_kernel(gemm_isa(active_isa(), kMaxInt32Depth));
  return kern->micro_rows != nullptr && kern->offset_trick && kern->k_align == 1;
}

size_t wgrad_planes_source_bytes(const ConvShape& s) {
  const size_t plane = static_cast<size_t>(s.n) * hp_of(s) * wp_of(s);
  return s.c * plane + static_cast<size_t>(s.kh) * wp_of(s) + kPlaneSlack;   // the last rows' reads past the grid
}

size_t wgrad_planes_partial_bytes(const ConvShape& s) {
  return static_cast<size_t>(chunk_count(s)) * taps_of(s) * s.o * sizeof(int32_t);
}

size_t wgrad_planes_packed_bytes(const ConvShape& s) {
  const int rows = s.n * hp_of(s), chunks = chunk_count(s), per_chunk = (rows + chunks - 1) / chunks;
  return packed_b_bytes(s.o, per_chunk * s.ow(), active_isa());
}

void conv_wgrad_planes(const int8_t* x, const int8_t* err, const ConvShape& s, int32_t* dw) {
  thread_local Kept<std::vector<int8_t>> source;
  thread_local Kept<std::vector<int32_t>> partial;
  const int hp = hp_of(s), wp = wp_of(s), taps = taps_of(s), ow = s.ow();
  const uint8_t* planes = fill_planes(x, s, &source);
  const Planes layout{static_cast<ptrdiff_t>(s.n) * hp * wp, wp, s.kw, s.c};
  const int rows = s.n * hp, chunks = chunk_count(s);
  const size_t part = static_cast<size_t>(taps) * s.o;
  if (partial.size() < chunks * part) partial.resize(chunks * part);
  int32_t* const parts = partial.data();   // the caller's: a thread_local named in the task would be the worker's
  const std::vector<int8_t> zeros(s.o, 0);
  parallel_for(chunks, [&](int chunk) {
    const int row0 = static_cast<int>(static_cast<long long>(rows) * chunk / chunks);
    const int row1 = static_cast<int>(static_cast<long long>(rows) * (chunk + 1) / chunks);
    const ErrRows e{err, zeros.data(), row0, hp, s.oh(), ow, s.o};
    thread_local Kept<PackedB> packed;
    pack_b_k_rows(s.o, (row1 - row0) * ow, active_isa(), ErrRows::row, &e, &packed);
    const BiasedRows a{planes + static_cast<ptrdiff_t>(row0) * wp, row1 - row0, ow, wp, tap_base, &layout};
    gemm_rows(a, taps, packed, parts + chunk * part, s.o);
  });
  // dw[o, t] = sum over chunks of partial[chunk][t, o]
  for (int o = 0; o < s.o; ++o)
    for (int t = 0; t < taps; ++t) {
      uint32_t sum = 0;
      for (int chunk = 0; chunk < chunks; ++chunk) sum += static_cast<uint32_t>(parts[chunk * part + t * s.o + o]);
      dw[static_cast<ptrdiff_t>(o) * taps + t] = static_cast<int32_t>(sum);
    }
}

}  // namespace dsptrain
