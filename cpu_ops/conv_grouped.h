// Grouped int8 convolutions (groups > 1; a depthwise one keeps dwconv.cpp) in one native call
// per pass: group g's input channels [g*C/G, (g+1)*C/G) against its weight rows
// [g*O/G, (g+1)*O/G). Each group's slice is read from the NHWC tensor natively (one pass of
// C/G bytes a pixel, as a conv's padding pass reads it) into the dense conv paths (conv.cpp:
// their lanes, panels and implicit GEMMs, chosen for the group's own shape) or, dilated, the
// gathers of dilated_gather.cpp into gemm_s8_s32; each group's sums land in their output
// channels in place. Sums only: the binding rounds the whole tensor once (one shift, NITI's
// one exponent per tensor), so every rounding mode is the dense conv's, bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "conv.h"
#include "conv_shapes.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {

// A grouped conv: `s` is the whole one (s.c input and s.o output channels; weights
// [s.o, kh, kw, s.c / groups]), taps `dilation` apart; oh() and ow() count the dilation.
struct GroupedConv {
  ConvShape s;
  int groups, dilation;
  int cg() const { return s.c / groups; }
  int og() const { return s.o / groups; }
  int oh() const { return (s.h + 2 * s.pad - (s.kh - 1) * dilation - 1) / s.stride + 1; }
  int ow() const { return (s.w + 2 * s.pad - (s.kw - 1) * dilation - 1) / s.stride + 1; }
  double macs() const { return double(s.n) * oh() * ow() * s.o * s.kh * s.kw * cg(); }
  // A 1x1 kernel meets no dilation: such a conv runs as an undilated one.
  bool dilated() const { return dilation > 1 && (s.kh > 1 || s.kw > 1); }
};

// What a pass runs for each group (for the tests that pin it): "gemm_1x1_in_place" (a 1x1,
// stride-1, unpadded conv: the tensors' pixels are the GEMM's rows as they lie),
// "residue_class_gemms" (a strided backward data: one GEMM per residue class of the input
// pixels over the taps that class meets) or "group_patches_gemm" (the group's patches
// gathered from its channels into the GEMM's A); on AVX2, for groups of at most 128 outputs (the
// forward's and weight gradient's; backward data's: input channels), the lane kernels of
// conv_grouped_direct.h: "direct_lanes", "residue_class_lanes" (strided backward data) and
// "pixel_pair_lanes" (the weight gradient; a 1x1 stride-1 unpadded one only up to 80 outputs a
// group, above that its in-place GEMM).
const char* grouped_algorithm(ConvPass pass, const GroupedConv& g);

// fn(group) for every group (conv_grouped.cpp): the groups as the pool's tasks when there are
// at least as many as threads, else one after the other, each splitting its own work.
void for_each_group(int groups, const std::function<void(int)>& fn);

// Strided backward data's residue classes (conv_grouped.cpp): the taps along one axis that
// input index r (mod stride) meets, and err's zero frame that keeps every class's taps in it.
std::vector<int> class_taps(int r, int k, int stride, int pad, int d);
struct ClassFrame {
  int top, left, hp, wp;  // err pixel (e, f) at frame (e + top, f + left)
};
ClassFrame class_frame(const GroupedConv& g);

// The kept scratch of one pass (scratch.h's buffers by name, the memory planner's count):
// `requant`, the requantizing entry point's accumulator too.
ScratchList grouped_scratch(ConvPass pass, const GroupedConv& g, bool requant);

// y[N,OH,OW,O] = x * w group by group. absmax (may be null): max |y| where the direct kernel took
// it from its registers, else left as it was (-1: not taken). T: int32_t or int64_t (numerics.acc_dtype of the
// group's depth KH*KW*C/G).
template <typename T>
void conv2d_grouped_fwd(const int8_t* x, const int8_t* w, const GroupedConv& g, T* y, int64_t* absmax = nullptr);

// dx[N,H,W,C] from err[N,OH,OW,O]; T by the depth KH*KW*O/G.
template <typename T>
void conv2d_grouped_bwd_data(const int8_t* err, const int8_t* w, const GroupedConv& g, T* dx, int64_t* absmax = nullptr);

// dw[O,KH,KW,C/G] from err[N,OH,OW,O] and x; T by the depth N*OH*OW.
template <typename T>
void conv2d_grouped_bwd_weight(const int8_t* err, const int8_t* x, const GroupedConv& g, T* dw);

// Fills d, n images of hp x wp frame pixels of `pixel` elements, from src, n images of h x w
// pixels of `src_pixel` bytes: frame row fy holds source row (fy - top) / step when that
// divides and lies in the source, else zeros (columns alike, `left`): the forward's padding
// (step 1), or backward data's error spread `stride` apart. copy(to, from) fills one frame
// pixel from one source pixel (the int8 frame copies it; the direct kernels' int16 frame also
// pads each group to an even count). Rows run as the pool's tasks.
template <typename T, typename Copy>
void fill_frame(T* d, const int8_t* src, int n, int h, int w, ptrdiff_t src_pixel, ptrdiff_t pixel, int top,
                int left, int step, int hp, int wp, Copy copy) {
  const ptrdiff_t row = wp * pixel;
  parallel_ranges(n * hp, static_cast<size_t>(n) * hp * row * sizeof(T), [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      T* out = d + r * row;
      std::memset(out, 0, row * sizeof(T));
      const int fy = r % hp - top;
      if (fy < 0 || fy % step || fy / step >= h) continue;
      const int8_t* in = src + (static_cast<ptrdiff_t>(r / hp) * h + fy / step) * w * src_pixel;
      for (int x = 0; x < w; ++x) {
        const int fx = left + x * step;
        if (fx >= 0 && fx < wp) copy(out + fx * pixel, in + x * src_pixel);
      }
    }
  });
}

}  // namespace dsptrain
