// The conv paths' conditions (conv_paths.h): which kernel each pass runs for a shape,
// with the measurements that set each threshold; conv_algorithm names the choice.
#include "conv_paths.h"

#include "conv.h"
#include "conv_lanes.h"
#include "conv_trimmed.h"
#include "conv_wgrad_planes.h"
#include "conv_wgrad_stream.h"
#include "gemm.h"
#include "gemm_kernels.h"

namespace dsptrain {
namespace {

// The implicit GEMM instead of im2col + GEMM: where the GEMM's kernel reads A in place,
// the tap rows split into whole groups of 4 and the depth keeps int32 accumulators exact.
bool implicit_gemm_fits(int run, int depth) {
  return run % 4 == 0 && depth * 127LL * 127LL < (1LL << 31) && reads_a_in_place(depth);
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

// The strided 1x1 weight gradient as one int32 GEMM over the strided pixels (B packed
// from x in place): where the pixel count keeps int32 sums exact and the packing fits.
bool wgrad_1x1_strided(const ConvShape& s) {
  const int p = s.n * s.oh() * s.ow();
  return is_1x1_strided(s) && !(1LL * p * 127 * 127 >= (1LL << 31)) && pack_b_k_rows_fits(s.c, p, active_isa());
}

// The implicit GEMM with the border's taps left out (conv_trimmed.cpp) from this share of
// the taps on the border. VGG-11 at batch 64, one thread, requantized with a given shift
// (forward / backward data, ms): conv3 (8 x 8, 16 % border) 5.9 / 5.7 -> 5.3 / 5.0, conv5
// (4 x 4, 31 %) 5.6 / 5.8 -> 4.4 / 4.4, conv7 (2 x 2, 56 %) 3.1 / 3.2 -> 1.5 / 1.6; conv2
// (16 x 16, 8 %) 6.3 / 6.0 -> 6.9 / 6.0 keeps the plain implicit GEMM.
constexpr double kMinBorderShare = 0.1;

bool acc_is_int64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }  // bindings.h needs_int64

bool wgrad_lanes(const ConvShape& s) {   // the reduction runs over the pixels
  return !acc_is_int64(1LL * s.n * s.oh() * s.ow()) && wgrad_lanes_fit(s.c, s.kh, s.kw, s.stride, s.o);
}
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

}  // namespace

bool is_1x1(const ConvShape& s) { return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0; }
bool is_1x1_strided(const ConvShape& s) { return s.kh == 1 && s.kw == 1 && s.stride > 1 && s.pad == 0; }

bool reads_a_in_place(int depth) { return gemm_kernel(gemm_isa(active_isa(), depth))->micro_rows != nullptr; }

bool fwd_panels(const ConvShape& s) { return use_pixel_panels(s.o, s.kh * run_pad(s.kw * s.c), fwd_bytes(s)); }
bool bwd_data_panels(const ConvShape& s) { return use_pixel_panels(s.c, s.kh * run_pad(s.kw * s.o), bwd_bytes(s)); }

bool fwd_implicit(const ConvShape& s) { return !is_1x1(s) && !fwd_panels(s) && implicit_gemm_fits(s.kw * s.c, s.kh * s.kw * s.c); }

// The forward on 3 channels widened to kWideChannels: a third more multiply-accumulates,
// but no im2col copy and no A packing (VGG-11's conv1 forward at batch 64, one thread,
// requantized: 3.7 -> 3.4 ms; 3.0 with a given shift's rounding fused into the GEMM's tiles).
bool fwd_implicit_c4(const ConvShape& s) {
  return s.c == 3 && !is_1x1(s) && !fwd_panels(s) && !fwd_implicit(s) &&
         implicit_gemm_fits(s.kw * kWideChannels, s.kh * s.kw * kWideChannels);
}

bool bwd_data_packs_w(const ConvShape& s, bool panels) {
  return !panels && pack_b_k_rows_fits(s.c, s.kh * s.kw * s.o, active_isa());
}

bool bwd_data_implicit(const ConvShape& s) {
  return !bwd_data_panels(s) && bwd_data_packs_w(s, false) && implicit_gemm_fits(s.kw * s.o, s.kh * s.kw * s.o);
}

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

// The few-channel passes that run on conv_lanes (int32 accumulators only: the depth
// limits of use_pixel_panels keep them exact, and int64 depths never get here).
bool fwd_lanes(const ConvShape& s) {
  return !acc_is_int64(s.kh * s.kw * s.c) && lanes_fit(s.c, s.kh, s.kw, s.stride, s.o);
}
bool bwd_data_lanes(const ConvShape& s) {   // a stride-1 convolution of the dilated error
  return !acc_is_int64(s.kh * s.kw * s.o) && lanes_fit(s.o, s.kh, s.kw, 1, s.c);
}
bool bwd_broadcast(const ConvShape& s) { return !acc_is_int64(s.kh * s.kw * s.o) && bwd_broadcast_fit(s); }

WgradPath wgrad_path(const ConvShape& s) {
  if (wgrad_1x1_strided(s)) return WgradPath::kStrided1x1;
  if (wgrad_planes(s)) return WgradPath::kPlanes;
  if (wgrad_stream_trimmed(s)) return WgradPath::kStreamTrimmed;
  if (wgrad_stream(s)) return WgradPath::kStream;
  if (!use_wgrad_panels(s)) return WgradPath::kIm2colGemm;
  return wgrad_lanes(s) ? WgradPath::kLanes : wgrad_olanes(s) ? WgradPath::kOutputLanes : WgradPath::kPanels;
}

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

}  // namespace dsptrain
