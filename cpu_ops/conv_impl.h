// Internal to the convolutions (conv.cpp, conv_panels.cpp): the padded source every
// convolution reads, and the kernels for small channel counts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "conv.h"

namespace dsptrain {

// A source tensor zero padded (and, for the transposed convolution, zero dilated) so that
// every convolution becomes a 'valid' one: output pixel p = (b, oy, ox) and tap (i, j, c)
// read d[base(p) + i * row_stride() + j * ch + c]. Tap row i is one contiguous run of
// kw * ch bytes, which is what makes the gathers below cheap. `d` has 4 bytes of slack
// after the last element, so a run may be read rounded up to 4 bytes.
struct PaddedSrc {
  const int8_t* d;
  int n, hp, wp, ch;  // the padded tensor
  int oh, ow;         // output pixels
  int kh, kw, step;   // kernel and stride over the padded tensor
  ptrdiff_t pixels() const { return static_cast<ptrdiff_t>(n) * oh * ow; }
  ptrdiff_t row_stride() const { return static_cast<ptrdiff_t>(wp) * ch; }
  int run() const { return kw * ch; }
  ptrdiff_t base(int b, int oy, int ox) const {
    return ((static_cast<ptrdiff_t>(b) * hp + oy * step) * wp + static_cast<ptrdiff_t>(ox) * step) * ch;
  }
};

// Padded rows [y0, y1) and columns [x0, x1) hold the source; the rest is the zero border.
struct SourceWindow {
  int y0, y1, x0, x1;
};

// Builds the padded source in `buf` from src[n, h, w, ch]: padded row y' holds source row
// (y' - off_y) / dil when that is exact and in range, else zeros (columns alike, off_x).
// `bias` 0x80 stores every byte, padding included, as the unsigned a + 128 (XOR 0x80):
// the form the offset-trick kernels read in place (gemm_rows).
PaddedSrc pad_source(const int8_t* src, int n, int h, int w, int ch, int off_y, int off_x, int dil, int hp, int wp,
                     int oh, int ow, int kh, int kw, int step, std::vector<int8_t>* buf, uint8_t bias = 0);

// Whether the int32 im2col weight gradient packs its B straight from the padded source
// (conv.cpp; else through an im2col copy).
bool wgrad_packs_source(const ConvShape& s);

// Bytes after the weight gradient's err^T (conv.cpp): gemm_rows reads the last row's
// final group of 4 whole when the pixel count is not a multiple of 4.
constexpr size_t kWgradRowSlack = 4;

// dst[cols, rows] = src[rows, cols]^T (^ bias; dst's rows dst_ld >= rows bytes apart, 0:
// rows), on the pool in bands of rows, 16 x 16 blocks in registers (conv.cpp).
void transpose(const int8_t* src, ptrdiff_t rows, ptrdiff_t cols, int8_t* dst, uint8_t bias = 0, ptrdiff_t dst_ld = 0);

// Its row stride when gemm_rows reads it: an odd number of cache lines, so the six rows of
// a tile never fall into the same L1 sets (at 4096 pixels, VGG-11's conv4 at batch 64,
// rows 4 KiB apart made the weight gradient 7 % slower than with packed A).
inline ptrdiff_t wgrad_row_stride(int pixels) {
  const ptrdiff_t lines = (pixels + 63) / 64;
  return 64 * (lines % 2 ? lines : lines + 1);
}

// Weights [oc, kh, kw, ch] in "run layout": each tap row's kw*ch bytes padded with zeros
// to a multiple of 4, so every group of 4 k is one 4-byte load from the source.
inline int run_pad(int run) { return (run + 3) / 4 * 4; }

// out[P, oc] = patches(s)[P, K] x w_runs[oc, K]^T, computed as w_runs x patches^T with
// the pixels as the GEMM's wide dimension (panels of nr pixels gathered straight into
// the packed layout) and stored transposed. For few output channels. T: int32/int64.
template <typename T>
void conv_pixel_panels(const PaddedSrc& s, const int8_t* w_runs, int oc, T* out);

// dw[oc, kh, kw, ch] = err[P, oc]^T x patches(s)[P, K]: the long pixel reduction is
// split over threads in blocks, each with its own accumulator, reduced at the end.
struct GemmKernel;
// Whether conv_wgrad_panels on `kern` reads its A (err^T, transposed once, biased) in place
// with micro_rows instead of packing it per block.
bool wgrad_panels_read_rows(const GemmKernel* kern);

template <typename T>
void conv_wgrad_panels(const PaddedSrc& s, const int8_t* err, int oc, T* dw);

// dw[oc, kh, kw, ch] of a source with few channels (an RGB input) as the GEMM
// dw^T[taps, oc] = planes[taps, pixels] x err[pixels, oc], A read in place from the
// source's biased channel planes (conv_wgrad_planes.cpp). int32 only; where it fits.
bool wgrad_planes_fit(const ConvShape& s);
void conv_wgrad_planes(const int8_t* x, const int8_t* err, const ConvShape& s, int32_t* dw);
size_t wgrad_planes_source_bytes(const ConvShape& s);    // its scratch, for scratch.cpp
size_t wgrad_planes_partial_bytes(const ConvShape& s);
size_t wgrad_planes_packed_bytes(const ConvShape& s);   // per pool thread

// The im2col weight gradient with the patches packed one B panel and K block at a time,
// just before use (conv_wgrad_stream.cpp): err_t is err^T biased (a + 128), rows `ld`
// apart, read in place; dw[o, kh * kw * ch]. Where whole panels lie in one tap row.
// Trimmed (`trim`: where the padded source holds x; stride 1), err_t's pixels go position
// by position, (oy, ox, image), and each panel reduces over only the pixels whose tap
// lands in the window (wgrad_stream_trimmed_fit: whole panels within a tap's channels,
// images in whole groups of 4).
bool wgrad_stream_fit(const ConvShape& s);
bool wgrad_stream_trimmed_fit(const ConvShape& s);
void conv_wgrad_stream(const PaddedSrc& src, const uint8_t* err_t, ptrdiff_t ld, int o, int32_t* dw,
                       const SourceWindow* trim = nullptr);
size_t wgrad_stream_panel_bytes();   // per pool thread

}  // namespace dsptrain
