// The convolution drivers: pad (and for the transposed convolution dilate) the source
// once, then pick by shape -- im2col + GEMM for wide layers, pixel panels
// (conv_panels.cpp) when the output channels are few. Scratch buffers are per thread and
// only grow, so steady-state training allocates nothing here.
#include "conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "conv_lanes.h"
#include "conv_panels.h"
#include "conv_transpose.h"
#include "conv_trimmed.h"
#include "conv_wgrad_planes.h"
#include "conv_wgrad_stream.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Fills cols[P, kh*kw*ch] (rows `ld` >= kh*kw*ch bytes apart, zero padded) from the
// padded source: one contiguous run per tap row.
void im2col(const PaddedSrc& s, int8_t* cols, ptrdiff_t ld) {
  const int run = s.run();
  const ptrdiff_t kk = static_cast<ptrdiff_t>(s.kh) * run, rs = s.row_stride();
  parallel_ranges(s.n * s.oh, static_cast<size_t>(s.pixels()) * ld, [&](int row0, int row1) {
    for (int row = row0; row < row1; ++row) {
      const int b = row / s.oh, oy = row % s.oh;
      int8_t* dst = cols + static_cast<ptrdiff_t>(row) * s.ow * ld;
      for (int ox = 0; ox < s.ow; ++ox, dst += ld - kk) {
        const int8_t* src = s.d + s.base(b, oy, ox);
        for (int i = 0; i < s.kh; ++i, dst += run) std::memcpy(dst, src + i * rs, run);
        if (ld > kk) std::memset(dst, 0, ld - kk);
      }
    }
  });
}

// i.e. per tap a [O, C] -> [C, O] transpose, in blocks (a plain loop over it reads w
// with a stride of kh*kw*C bytes: 10 ms for a 512x512 3x3 layer).
void flipped_transposed_weights(const int8_t* w, const ConvShape& s, int runp, int8_t* wt) {
  const int run = s.kw * s.o, k = s.kh * runp;
  const ptrdiff_t w_ld = static_cast<ptrdiff_t>(s.kh) * s.kw * s.c;
  parallel_ranges(s.kh * s.kw, static_cast<size_t>(s.o) * s.c * s.kh * s.kw, [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t) {
      const int i = t / s.kw, j = t % s.kw, src_tap = (s.kh - 1 - i) * s.kw + (s.kw - 1 - j);
      transpose_block(w + static_cast<ptrdiff_t>(src_tap) * s.c, w_ld, s.o, s.c, wt + i * runp + j * s.o, k);
    }
  });
  if (runp != run)
    for (int r = 0; r < s.c * s.kh; ++r) std::memset(wt + static_cast<ptrdiff_t>(r) * runp + run, 0, runp - run);
}

// `absmax`, `fused`: as gemm_packed's for int32 (the int64 path leaves them as they were).
template <typename T>
void gemm(MatrixS8 a, MatrixS8 b, int m, int n, int k, T* c, bool a_padded = false, int64_t* absmax = nullptr,
          FusedRequant* fused = nullptr) {
  if constexpr (std::is_same_v<T, int32_t>) {
    gemm_s8_s32(a, b, m, n, k, c, a_padded, absmax, fused);
  } else {
    gemm_s8_s64(a, b, m, n, k, c);
  }
}

std::vector<int8_t>& scratch(int which) {
  thread_local Kept<std::vector<int8_t>> buffers[3];
  return buffers[which];
}

int8_t* grow(std::vector<int8_t>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

// Rows of the transposed convolution's weights w'[c, (i, j, o)] = w[o, kh-1-i, kw-1-j, c],
// taken along c: depth kk = (i * kw + j) * O + o starts at w[o, kh-1-i, kw-1-j, 0].
struct FlippedTaps {
  const int8_t* w;
  const ConvShape& s;
  static const int8_t* row(const void* ctx, int kk, int /*seg*/) {
    const FlippedTaps& t = *static_cast<const FlippedTaps*>(ctx);
    const int tap = kk / t.s.o, o = kk % t.s.o, i = tap / t.s.kw, j = tap % t.s.kw;
    return t.w + ((static_cast<ptrdiff_t>(o) * t.s.kh + (t.s.kh - 1 - i)) * t.s.kw + (t.s.kw - 1 - j)) * t.s.c;
  }
};

// Whether the int32 transposed convolution packs its B from w directly (else from a
// transposed copy): whenever it runs im2col + GEMM and the packing's offsets fit.
bool bwd_data_packs_w(const ConvShape& s, bool panels) {
  return !panels && pack_b_k_rows_fits(s.c, s.kh * s.kw * s.o, active_isa());
}

// Where output pixel p's patch starts in the padded source (its first tap row).
ptrdiff_t pixel_base(const PaddedSrc& s, int p) {
  const int per_image = s.oh * s.ow, b = p / per_image, oy = p % per_image / s.ow, ox = p % s.ow;
  return s.base(b, oy, ox);
}

// Tap row `seg` of output pixel kk's patch in the padded source: the pieces pack_b_k_rows
// reads the weight gradient's B from.
struct PatchRows {
  const PaddedSrc& s;
  static const int8_t* row(const void* ctx, int kk, int seg) {
    const PaddedSrc& s = static_cast<const PatchRows*>(ctx)->s;
    return s.d + pixel_base(s, kk) + seg * s.row_stride();
  }
};

// The patches of a biased padded source as gemm_rows' A: each pixel's kh tap rows, read
// in place (the implicit GEMM).
ptrdiff_t patch_base(const void* ctx, int p) { return pixel_base(*static_cast<const PaddedSrc*>(ctx), p); }
BiasedRows patch_rows(const PaddedSrc& src) {
  return BiasedRows{reinterpret_cast<const uint8_t*>(src.d), src.kh, src.run(), src.row_stride(), patch_base, &src};
}

// Whether the GEMM of this depth runs on a kernel that reads A in place (gemm_rows).
bool reads_a_in_place(int depth) { return gemm_kernel(gemm_isa(active_isa(), depth))->micro_rows != nullptr; }

// The implicit GEMM instead of im2col + GEMM: where the GEMM's kernel reads A in place,
// the tap rows split into whole groups of 4 and the depth keeps int32 accumulators exact.
bool implicit_gemm_fits(int run, int depth) {
  return run % 4 == 0 && depth * 127LL * 127LL < (1LL << 31) && reads_a_in_place(depth);
}

// Plain rows `*ctx` bytes apart, as gemm_rows' A.
ptrdiff_t plain_row_base(const void* ctx, int row) { return row * *static_cast<const ptrdiff_t*>(ctx); }

// The patch matrix of `src` (m rows, depth k) in scratch(0), laid out so that the GEMM
// reads it in place where its kernel can (gemm_packed's a_padded): rows a_row_bytes
// apart, zero padded, zero rows up to a_rows.
MatrixS8 patches(const PaddedSrc& src, int m, int k) {
  const ptrdiff_t ld = a_row_bytes(active_isa(), k), rows = a_rows(active_isa(), m);
  int8_t* cols = grow(scratch(0), static_cast<size_t>(rows) * ld);
  im2col(src, cols, ld);
  std::memset(cols + m * ld, 0, static_cast<size_t>(rows - m) * ld);
  return MatrixS8{cols, ld, 1};
}

// Share of useful work in a tile of `tile` rows or columns holding `n`.
double fill(int n, int tile) { return static_cast<double>(n) / ((n + tile - 1) / tile * tile); }

// Pixel panels when the output channels fill the GEMM's short side (mr) clearly better
// than its wide one (nr), and the padded depth keeps int32 accumulators exact.
bool use_pixel_panels(int out_channels, int depth, long long padded_bytes) {
  // On AMX the im2col GEMM wins once the output channels fill a 32-row tile at least half.
  if (active_isa() == Isa::kAmx && out_channels >= gemm_kernel(Isa::kAmx)->mr) return false;
  const GemmKernel* k = panel_kernel();
  return depth <= kMaxInt32Depth && padded_bytes < (1LL << 31) - 4096 &&  // int32 gather offsets
         fill(out_channels, k->mr) > fill(out_channels, k->nr) + 0.1;
}

long long fwd_bytes(const ConvShape& s) { return 1LL * s.n * (s.h + 2 * s.pad) * (s.w + 2 * s.pad) * s.c; }
long long bwd_bytes(const ConvShape& s) { return 1LL * s.n * (s.h + s.kh - 1) * (s.w + s.kw - 1) * s.o; }

// The panel weight gradient while its per-task accumulators stay small.
bool use_wgrad_panels(const ConvShape& s) {
  // On AMX the GEMM wins once the output channels fill a 32-row tile (VGG-11 at batch 64:
  // 2-4x faster than the VNNI panels for 64-256 channels).
  if (active_isa() == Isa::kAmx && s.o >= gemm_kernel(Isa::kAmx)->mr) return false;
  // On AVX-512 VNNI the GEMM wins from about 128K taps x channels: VGG-11's conv3 (1152 taps
  // x 256) took 8.2 ms on the panels and 6.5 ms on the GEMM at one thread; conv2 (576 x
  // 128) 7.8 and 8.2 ms. (Shapes the streamed GEMM fits, conv_wgrad_stream.cpp, take it
  // before this choice: conv2 there 6.5 ms.)
  const long long taps = static_cast<long long>(s.kh) * run_pad(s.kw * s.c);
  return taps * s.o <= (active_isa() == Isa::kAvx512Vnni ? 128 : 300) * 1024;
}

// w[o, i, j, c] -> dst[o, i, run_pad(kw*c)] with zero padding after each tap row.
void weights_in_runs(const int8_t* w, int o, int kh, int run, int8_t* dst) {
  const int runp = run_pad(run);
  for (int r = 0; r < o * kh; ++r) {
    std::memcpy(dst + static_cast<ptrdiff_t>(r) * runp, w + static_cast<ptrdiff_t>(r) * run, run);
    std::memset(dst + static_cast<ptrdiff_t>(r) * runp + run, 0, runp - run);
  }
}

PaddedSrc forward_source(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf, uint8_t bias = 0) {
  return pad_source(x, s.n, s.h, s.w, s.c, s.pad, s.pad, 1, s.h + 2 * s.pad, s.w + 2 * s.pad, s.oh(), s.ow(), s.kh, s.kw,
                    s.stride, buf, bias);
}

bool is_1x1(const ConvShape& s) { return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0; }
// 1x1, stride > 1, no padding (ResNet's downsampling shortcuts): the output pixels are every
// s-th pixel of every s-th row of x, so the products are GEMMs on those pixels in place.
bool is_1x1_strided(const ConvShape& s) { return s.kh == 1 && s.kw == 1 && s.stride > 1 && s.pad == 0; }

// x's pixels under the output pixels of a strided 1x1 convolution as a GEMM's [P, C] rows,
// in place: ow of them s * C bytes apart, then the next output row s image rows on.
MatrixS8 strided_pixels(const int8_t* x, const ConvShape& s) {
  MatrixS8 a{x, static_cast<ptrdiff_t>(s.stride) * s.c, 1};
  a.group_rows = s.ow();
  a.image_rows = s.oh() * s.ow();
  a.group_stride = static_cast<ptrdiff_t>(s.stride) * s.w * s.c;
  a.image_stride = static_cast<ptrdiff_t>(s.h) * s.w * s.c;
  return a;
}

// Pixel kk of the strided pixels as pack_b_k_rows' depth row (the weight gradient's B).
struct StridedPixelRows {
  MatrixS8 pixels;
  static const int8_t* row(const void* ctx, int kk, int /*seg*/) {
    return static_cast<const StridedPixelRows*>(ctx)->pixels.row(kk);
  }
};

// The strided 1x1 weight gradient as one int32 GEMM over the strided pixels (B packed
// from x in place): where the pixel count keeps int32 sums exact and the packing fits.
bool wgrad_1x1_strided(const ConvShape& s) {
  const int p = s.n * s.oh() * s.ow();
  return is_1x1_strided(s) && !(1LL * p * 127 * 127 >= (1LL << 31)) && pack_b_k_rows_fits(s.c, p, active_isa());
}
bool fwd_panels(const ConvShape& s) { return use_pixel_panels(s.o, s.kh * run_pad(s.kw * s.c), fwd_bytes(s)); }
bool bwd_data_panels(const ConvShape& s) { return use_pixel_panels(s.c, s.kh * run_pad(s.kw * s.o), bwd_bytes(s)); }

bool fwd_implicit(const ConvShape& s) { return !is_1x1(s) && !fwd_panels(s) && implicit_gemm_fits(s.kw * s.c, s.kh * s.kw * s.c); }

// Three channels (an RGB input) widened to four, so each tap row is whole groups of 4 and
// the implicit GEMM applies: a third more multiply-accumulates, but no im2col copy and no
// A packing (VGG-11's conv1 forward at batch 64, one thread, requantized: 3.7 -> 3.4 ms;
// 3.0 with a given shift's rounding fused into the GEMM's tiles).
constexpr int kWideChannels = 4;
constexpr size_t kPaddedSlack = 64;  // readable bytes after the padded source, as pad_source's
bool fwd_implicit_c4(const ConvShape& s) {
  return s.c == 3 && !is_1x1(s) && !fwd_panels(s) && !fwd_implicit(s) &&
         implicit_gemm_fits(s.kw * kWideChannels, s.kh * s.kw * kWideChannels);
}

// x[n, h, w, 3] padded and widened to [n, hp, wp, 4], every byte XOR 0x80 (the fourth
// channel and the border hold the biased zero), for gemm_rows.
PaddedSrc widened_source(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf) {
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad, c = kWideChannels;
  const size_t row = static_cast<size_t>(wp) * c, image = row * hp;
  if (buf->size() < image * s.n + kPaddedSlack) buf->resize(image * s.n + kPaddedSlack);
  int8_t* d = buf->data();
  std::memset(d + image * s.n, 0, kPaddedSlack);
  parallel_ranges(s.n * hp, image * s.n, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      int8_t* out = d + static_cast<size_t>(r) * row;
      std::memset(out, 0x80, row);
      const int y = r % hp - s.pad;
      if (y < 0 || y >= s.h) continue;
      const int8_t* in = x + (static_cast<size_t>(r / hp) * s.h + y) * s.w * s.c;
      for (int i = 0; i < s.w; ++i)
        for (int ch = 0; ch < s.c; ++ch) out[(i + s.pad) * c + ch] = static_cast<int8_t>(in[i * s.c + ch] ^ 0x80);
    }
  });
  return PaddedSrc{d, s.n, hp, wp, c, s.oh(), s.ow(), s.kh, s.kw, s.stride};
}

bool bwd_data_implicit(const ConvShape& s) {
  return !bwd_data_panels(s) && bwd_data_packs_w(s, false) && implicit_gemm_fits(s.kw * s.o, s.kh * s.kw * s.o);
}

// The implicit GEMM with the border's taps left out (conv_trimmed.cpp) from this share of
// the taps on the border. VGG-11 at batch 64, one thread, requantized with a given shift
// (forward / backward data, ms): conv3 (8 x 8, 16 % border) 5.9 / 5.7 -> 5.3 / 5.0, conv5
// (4 x 4, 31 %) 5.6 / 5.8 -> 4.4 / 4.4, conv7 (2 x 2, 56 %) 3.1 / 3.2 -> 1.5 / 1.6; conv2
// (16 x 16, 8 %) 6.3 / 6.0 -> 6.9 / 6.0 keeps the plain implicit GEMM.
constexpr double kMinBorderShare = 0.1;
// Where the forward's padded source holds x, and the backward data's padded error err.
SourceWindow fwd_window(const ConvShape& s) { return SourceWindow{s.pad, s.pad + s.h, s.pad, s.pad + s.w}; }
SourceWindow bwd_data_window(const ConvShape& s) {
  const int y0 = s.kh - 1 - s.pad, x0 = s.kw - 1 - s.pad;
  return SourceWindow{y0, y0 + s.oh(), x0, x0 + s.ow()};
}
bool fwd_trimmed(const ConvShape& s) {
  return fwd_implicit(s) && s.stride == 1 && trimmed_fits(s.c, s.kh * s.kw * s.c) &&
         trimmed_border_share(s.oh(), s.ow(), s.kh, s.kw, fwd_window(s)) >= kMinBorderShare;
}
bool bwd_data_trimmed(const ConvShape& s) {
  return bwd_data_implicit(s) && s.stride == 1 && trimmed_fits(s.o, s.kh * s.kw * s.o) &&
         trimmed_border_share(s.h, s.w, s.kh, s.kw, bwd_data_window(s)) >= kMinBorderShare;
}

bool acc_is_int64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }  // bindings.h needs_int64

// The few-channel passes that run on conv_lanes (int32 accumulators only: the depth
// limits of use_pixel_panels keep them exact, and int64 depths never get here).
bool fwd_lanes(const ConvShape& s) {
  return !acc_is_int64(s.kh * s.kw * s.c) && lanes_fit(s.c, s.kh, s.kw, s.stride, s.o);
}
bool bwd_data_lanes(const ConvShape& s) {   // a stride-1 convolution of the dilated error
  return !acc_is_int64(s.kh * s.kw * s.o) && lanes_fit(s.o, s.kh, s.kw, 1, s.c);
}
bool wgrad_lanes(const ConvShape& s) {   // the reduction runs over the pixels
  return !acc_is_int64(1LL * s.n * s.oh() * s.ow()) && wgrad_lanes_fit(s.c, s.kh, s.kw, s.stride, s.o);
}
bool bwd_broadcast(const ConvShape& s) { return !acc_is_int64(s.kh * s.kw * s.o) && bwd_broadcast_fit(s); }
bool wgrad_planes(const ConvShape& s) { return !acc_is_int64(1LL * s.n * s.oh() * s.ow()) && wgrad_planes_fit(s); }
// The streamed im2col weight gradient: int32, err^T read in place, whole B panels in a tap row.
bool wgrad_stream(const ConvShape& s) {
  const int p = s.n * s.oh() * s.ow();
  return !acc_is_int64(p) && wgrad_packs_source(s) && reads_a_in_place(p) && wgrad_stream_fit(s);
}
bool wgrad_olanes(const ConvShape& s) {
  return !acc_is_int64(1LL * s.n * s.oh() * s.ow()) && wgrad_olanes_fit(s.c, s.kh, s.kw, s.stride, s.o, s.w + 2 * s.pad, s.ow());
}

// The streamed weight gradient with each panel's border pixels left out (conv_wgrad_stream.cpp
// trimmed), from a twentieth of the taps on the border: VGG-11's conv2-8. Its runs of
// pixels are long and stored in place, so it pays earlier than the forward's classes:
// conv2 (16 x 16, 8 %) at one thread 6.28 -> 6.05 ms (three interleaved runs each).
constexpr double kMinWgradBorderShare = 0.05;
bool wgrad_stream_trimmed(const ConvShape& s) {
  const int p = s.n * s.oh() * s.ow();
  return !acc_is_int64(p) && reads_a_in_place(p) && wgrad_stream_trimmed_fit(s) &&
         trimmed_border_share(s.oh(), s.ow(), s.kh, s.kw, fwd_window(s)) >= kMinWgradBorderShare;
}

// The weight gradient's algorithm, asked once: conv_algorithm names it, conv2d_bwd_weight
// runs it. The int32-only ones (every one but the panels and im2col) never come up for an
// int64 depth: each asks !acc_is_int64 of the pixel count, the depth the binding asks too.
enum class WgradPath { kStrided1x1, kPlanes, kStreamTrimmed, kStream, kIm2colGemm, kLanes, kOutputLanes, kPanels };
WgradPath wgrad_path(const ConvShape& s) {
  if (wgrad_1x1_strided(s)) return WgradPath::kStrided1x1;
  if (wgrad_planes(s)) return WgradPath::kPlanes;
  if (wgrad_stream_trimmed(s)) return WgradPath::kStreamTrimmed;
  if (wgrad_stream(s)) return WgradPath::kStream;
  if (!use_wgrad_panels(s)) return WgradPath::kIm2colGemm;
  return wgrad_lanes(s) ? WgradPath::kLanes : wgrad_olanes(s) ? WgradPath::kOutputLanes : WgradPath::kPanels;
}

}  // namespace

// When its tap rows split into whole groups of 4 columns and the packing's offsets fit.
bool wgrad_packs_source(const ConvShape& s) {
  return (s.kh == 1 || s.kw * s.c % 4 == 0) && pack_b_k_rows_fits(s.kh * s.kw * s.c, s.n * s.oh() * s.ow(), active_isa());
}

const char* conv_algorithm(ConvPass pass, const ConvShape& s) {
  switch (pass) {
    case ConvPass::kForward:
      if (is_1x1(s)) return "gemm_1x1";
      if (is_1x1_strided(s)) return "gemm_1x1_strided";
      if (fwd_panels(s)) return fwd_lanes(s) ? "lanes" : "pixel_panels";
      if (fwd_implicit_c4(s)) return "implicit_gemm_c4";
      if (fwd_trimmed(s)) return "implicit_gemm_trimmed";
      return fwd_implicit(s) ? "implicit_gemm" : "im2col_gemm";
    case ConvPass::kBackwardData:
      if (bwd_broadcast(s)) return "err_broadcast";
      if (is_1x1(s)) return "gemm_1x1";
      if (is_1x1_strided(s)) return "gemm_1x1_strided";
      if (bwd_data_panels(s)) return bwd_data_lanes(s) ? "lanes" : "pixel_panels";
      if (bwd_data_trimmed(s)) return "implicit_gemm_trimmed";
      return bwd_data_implicit(s) ? "implicit_gemm" : "im2col_gemm";
    case ConvPass::kBackwardWeight:
      switch (wgrad_path(s)) {
        case WgradPath::kStrided1x1: return "gemm_1x1_strided";
        case WgradPath::kPlanes: return "wgrad_planes";
        case WgradPath::kStreamTrimmed: return "wgrad_stream_trimmed";
        case WgradPath::kStream: return "wgrad_stream";
        case WgradPath::kIm2colGemm: return "im2col_gemm";
        case WgradPath::kLanes: return "wgrad_lanes";
        case WgradPath::kOutputLanes: return "wgrad_olanes";
        case WgradPath::kPanels: return "wgrad_panels";
      }
  }
  return "?";
}

template <typename T>
void conv2d_fwd(const int8_t* x, const int8_t* w, const ConvShape& s, T* y, int64_t* absmax, FusedRequant* fused) {
  if (absmax) *absmax = -1;
  const int oh = s.oh(), ow = s.ow(), k = s.kh * s.kw * s.c, m = s.n * oh * ow;
  if (is_1x1(s)) {
    gemm(MatrixS8{x, k, 1}, MatrixS8{w, k, 1}, m, s.o, k, y, false, absmax, fused);
    return;
  }
  if (is_1x1_strided(s)) {   // the GEMM's A rows are the strided pixels, read in place by the A packing
    gemm(strided_pixels(x, s), MatrixS8{w, k, 1}, m, s.o, k, y, false, absmax, fused);
    return;
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (fwd_implicit(s)) {
      const PaddedSrc src = forward_source(x, s, &scratch(2), 0x80);
      thread_local Kept<PackedB> packed;
      pack_b(MatrixS8{w, k, 1}, s.o, k, active_isa(), &packed);
      if (fwd_trimmed(s)) gemm_rows_trimmed(src, fwd_window(s), packed, y, absmax, fused);
      else gemm_rows(patch_rows(src), m, packed, y, s.o, absmax, fused);
      return;
    }
    if (fwd_implicit_c4(s)) {
      const PaddedSrc src = widened_source(x, s, &scratch(2));
      const int k4 = s.kh * s.kw * kWideChannels;
      int8_t* w4 = grow(scratch(1), static_cast<size_t>(s.o) * k4);
      weights_in_runs(w, s.o, s.kh * s.kw, s.c, w4);   // each tap's 3 channels in a 4-byte run, the 4th zero
      thread_local Kept<PackedB> packed;
      pack_b(MatrixS8{w4, k4, 1}, s.o, k4, active_isa(), &packed);
      gemm_rows(patch_rows(src), m, packed, y, s.o, absmax, fused);
      return;
    }
  }
  const bool lanes = std::is_same_v<T, int32_t> && fwd_panels(s) && fwd_lanes(s);
  const PaddedSrc src = forward_source(x, s, &scratch(2), lanes && lanes_biased(s.c, s.kw, s.o) ? 0x80 : 0);
  if (fwd_panels(s)) {
    const int run = s.kw * s.c;
    int8_t* w_runs = grow(scratch(1), static_cast<size_t>(s.o) * s.kh * run_pad(run));
    weights_in_runs(w, s.o, s.kh, run, w_runs);
    if constexpr (std::is_same_v<T, int32_t>) {
      if (lanes) {
        conv_lanes(src, w_runs, s.o, s.pad, s.pad + s.h, y, absmax, fused);   // padded rows [pad, pad + h) hold x
        return;
      }
    }
    conv_pixel_panels(src, w_runs, s.o, y);
    return;
  }
  gemm(patches(src, m, k), MatrixS8{w, k, 1}, m, s.o, k, y, true, absmax, fused);
}

template <typename T>
void conv2d_bwd_data(const int8_t* err, const int8_t* w, const ConvShape& s, T* dx, int64_t* absmax,
                     FusedRequant* fused) {
  if (absmax) *absmax = -1;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (bwd_broadcast(s)) {   // conv_lanes.cpp: the error broadcast into dx rows
      conv_bwd_broadcast(err, w, s, dx, absmax, fused);
      return;
    }
  }
  if (is_1x1(s)) {   // dx[pixels, C] = err[pixels, O] @ w[O, C]: err read in place, w as its transpose's panels
    gemm(MatrixS8{err, s.o, 1}, MatrixS8{w, 1, s.c}, s.n * s.h * s.w, s.c, s.o, dx, false, absmax, fused);
    return;
  }
  if (is_1x1_strided(s)) {
    // dx is zero but at the strided pixels, which get err[P, O] @ w[O, C]: the GEMM runs on
    // the P = n*oh*ow error rows alone (a quarter of the dilated error's at stride 2), into
    // a [P, C] scratch whose rows then land s * C apart in the zeroed dx.
    const int p = s.n * s.oh() * s.ow();
    const size_t row_bytes = static_cast<size_t>(s.c) * sizeof(T);
    T* rows = reinterpret_cast<T*>(grow(scratch(0), static_cast<size_t>(p) * row_bytes));
    gemm(MatrixS8{err, s.o, 1}, MatrixS8{w, 1, s.c}, p, s.c, s.o, rows, false, absmax, nullptr);
    const int oh = s.oh(), ow = s.ow();
    parallel_ranges(s.n * s.h, static_cast<size_t>(s.n) * s.h * s.w * row_bytes, [&](int r0, int r1) {
      for (int r = r0; r < r1; ++r) {   // image row r of dx
        T* out = dx + static_cast<ptrdiff_t>(r) * s.w * s.c;
        std::memset(out, 0, static_cast<size_t>(s.w) * row_bytes);
        const int y = r % s.h;
        if (y % s.stride != 0 || y / s.stride >= oh) continue;
        const T* in = rows + (static_cast<ptrdiff_t>(r / s.h) * oh + y / s.stride) * ow * s.c;
        for (int ox = 0; ox < ow; ++ox)
          std::memcpy(out + static_cast<ptrdiff_t>(ox) * s.stride * s.c, in + static_cast<ptrdiff_t>(ox) * s.c, row_bytes);
      }
    });
    return;
  }
  // A stride-1 convolution of the zero-dilated, padded error with the flipped,
  // transposed kernel w'[c, i, j, o] = w[o, kh-1-i, kw-1-j, c].
  const int oh = s.oh(), ow = s.ow(), run = s.kw * s.o, m = s.n * s.h * s.w;
  const bool panels = bwd_data_panels(s);
  const int runp = panels ? run_pad(run) : run, k = s.kh * runp;
  const bool implicit = std::is_same_v<T, int32_t> && bwd_data_implicit(s);
  const bool lanes = std::is_same_v<T, int32_t> && panels && bwd_data_lanes(s);
  const bool biased = implicit || (lanes && lanes_biased(s.o, s.kw, s.c));
  const PaddedSrc src = pad_source(err, s.n, oh, ow, s.o, s.kh - 1 - s.pad, s.kw - 1 - s.pad, s.stride, s.h + s.kh - 1, s.w + s.kw - 1, s.h, s.w,
                                   s.kh, s.kw, 1, &scratch(2), biased ? 0x80 : 0);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (bwd_data_packs_w(s, panels)) {
      // The GEMM's B straight from w: depth kk = (i, j, o) of w' is w[o, kh-1-i, kw-1-j, :],
      // a contiguous row over c, so pack_b_k_rows interleaves it with no transposed copy.
      thread_local Kept<PackedB> packed;
      const FlippedTaps taps{w, s};
      pack_b_k_rows(s.c, k, active_isa(), FlippedTaps::row, &taps, &packed);
      if (implicit && bwd_data_trimmed(s)) gemm_rows_trimmed(src, bwd_data_window(s), packed, dx, absmax, fused);
      else if (implicit) gemm_rows(patch_rows(src), m, packed, dx, s.c, absmax, fused);
      else gemm_packed(patches(src, m, k), m, packed, dx, s.c, true, absmax, fused);
      return;
    }
  }
  int8_t* wt = grow(scratch(1), static_cast<size_t>(s.c) * k);
  flipped_transposed_weights(w, s, runp, wt);
  if (panels) {
    if constexpr (std::is_same_v<T, int32_t>) {
      if (lanes) {   // padded rows of the error: kh-1-pad + stride * (0 .. oh-1)
        const int first = s.kh - 1 - s.pad;
        conv_lanes(src, wt, s.c, first, first + (oh - 1) * s.stride + 1, dx, absmax, fused);
        return;
      }
    }
    conv_pixel_panels(src, wt, s.c, dx);
    return;
  }
  gemm(patches(src, m, k), MatrixS8{wt, k, 1}, m, s.c, k, dx, true, absmax, fused);
}

template <typename T>
void conv2d_bwd_weight(const int8_t* err, const int8_t* x, const ConvShape& s, T* dw) {
  const WgradPath path = wgrad_path(s);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (path == WgradPath::kStrided1x1) {   // dw[O, C] = err^T[O, P] @ pixels[P, C], B packed from x in place
      const int p = s.n * s.oh() * s.ow();
      int8_t* err_t = grow(scratch(1), static_cast<size_t>(s.o) * p);
      transpose(err, p, s.o, err_t, 0, p);
      thread_local Kept<PackedB> packed;
      const StridedPixelRows rows{strided_pixels(x, s)};
      pack_b_k_rows(s.c, p, active_isa(), StridedPixelRows::row, &rows, &packed);
      gemm_packed(MatrixS8{err_t, p, 1}, s.o, packed, dw, s.c);
      return;
    }
    if (path == WgradPath::kPlanes) {   // conv_wgrad_planes.cpp: few source channels, taps as the GEMM's rows
      conv_wgrad_planes(x, err, s, dw);
      return;
    }
  }
  const PaddedSrc src = forward_source(x, s, &scratch(2));
  if constexpr (std::is_same_v<T, int32_t>) {
    if (path == WgradPath::kLanes) {
      conv_wgrad_lanes(src, err, s.o, dw);
      return;
    }
    if (path == WgradPath::kOutputLanes) {
      conv_wgrad_olanes(src, err, s.o, dw);
      return;
    }
  }
  if (path == WgradPath::kPanels) {
    conv_wgrad_panels(src, err, s.o, dw);
    return;
  }
  // dw[O, KK] = err^T[O, P] x patches[P, KK]: err transposed once up front (the A rows),
  // the patches a k-major B, interleaved four pixels at a time; the result is already in
  // dw's layout. With int32 accumulators the patches are packed straight from the padded
  // source (each pixel's kh tap rows are the pieces of its depth row: no im2col).
  // Where the kernel reads A in place, err^T is stored biased (a + 128) and read as rows
  // by gemm_rows (no A packing), kWgradRowSlack bytes after it for the last row's group.
  // The trimmed stream reads err^T position by position (transpose_by_position), biased and in place.
  const int p = s.n * s.oh() * s.ow(), kk = s.kh * s.kw * s.c;
  const bool trimmed = path == WgradPath::kStreamTrimmed;   // int32 only (wgrad_path)
  const bool rows_a = trimmed || (std::is_same_v<T, int32_t> && wgrad_packs_source(s) && reads_a_in_place(p));
  const ptrdiff_t ld = rows_a ? wgrad_row_stride(p) : p;
  int8_t* err_t = grow(scratch(1), static_cast<size_t>(s.o) * ld + kWgradRowSlack);
  if (trimmed) transpose_by_position(err, s.n, s.oh() * s.ow(), s.o, err_t, ld, 0x80);
  else transpose(err, p, s.o, err_t, rows_a ? 0x80 : 0, ld);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (trimmed) {
      const SourceWindow window = fwd_window(s);
      conv_wgrad_stream(src, reinterpret_cast<const uint8_t*>(err_t), ld, s.o, dw, &window);
      return;
    }
    if (path == WgradPath::kStream) {   // conv_wgrad_stream.cpp: B packed panel by panel as it is used (rows_a holds)
      conv_wgrad_stream(src, reinterpret_cast<const uint8_t*>(err_t), ld, s.o, dw);
      return;
    }
    if (wgrad_packs_source(s)) {
      thread_local Kept<PackedB> packed;
      const PatchRows rows{src};
      pack_b_k_rows(kk, p, active_isa(), PatchRows::row, &rows, &packed, s.kh);
      if (rows_a) {
        gemm_rows(BiasedRows{reinterpret_cast<const uint8_t*>(err_t), 1, p, 0, plain_row_base, &ld}, s.o, packed, dw, kk);
      } else {
        gemm_packed(MatrixS8{err_t, p, 1}, s.o, packed, dw, kk);
      }
      return;
    }
  }
  int8_t* cols = grow(scratch(0), static_cast<size_t>(p) * kk);
  im2col(src, cols, kk);
  gemm(MatrixS8{err_t, p, 1}, MatrixS8{cols, 1, kk}, s.o, kk, p, dw);
}

template void conv2d_fwd<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*, FusedRequant*);
template void conv2d_fwd<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*, int64_t*, FusedRequant*);
template void conv2d_bwd_data<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*,
                                       FusedRequant*);
template void conv2d_bwd_data<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*, int64_t*,
                                       FusedRequant*);
template void conv2d_bwd_weight<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*);
template void conv2d_bwd_weight<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*);

}  // namespace dsptrain
