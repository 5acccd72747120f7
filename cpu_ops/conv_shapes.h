// The shapes and layouts every int8 convolution file shares (conv.cpp, conv_lanes.cpp,
// conv_panels.cpp, conv_trimmed.cpp, conv_wgrad_*.cpp, scratch.cpp): types and inline
// arithmetic only, so a kernel file includes this and the headers of what it calls.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

// A convolution: NHWC input x, OHWC weights.
struct ConvShape {
  int n, h, w, c;     // input x
  int o, kh, kw;      // weights (o, kh, kw, c)
  int stride, pad;
  int oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int ow() const { return (w + 2 * pad - kw) / stride + 1; }
};

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

// Weights [oc, kh, kw, ch] in "run layout": each tap row's kw*ch bytes padded with zeros
// to a multiple of 4, so every group of 4 k is one 4-byte load from the source.
inline int run_pad(int run) { return (run + 3) / 4 * 4; }

// The row stride of the weight gradient's err^T (conv.cpp, conv_panels.cpp) when gemm_rows
// reads it in place: an odd number of cache lines, so the six rows of
// a tile never fall into the same L1 sets (at 4096 pixels, VGG-11's conv4 at batch 64,
// rows 4 KiB apart made the weight gradient 7 % slower than with packed A).
inline ptrdiff_t wgrad_row_stride(int pixels) {
  const ptrdiff_t lines = (pixels + 63) / 64;
  return 64 * (lines % 2 ? lines : lines + 1);
}

// Bytes after the weight gradient's err^T (conv.cpp): gemm_rows reads the last row's
// final group of 4 whole when the pixel count is not a multiple of 4.
constexpr size_t kWgradRowSlack = 4;

}  // namespace dsptrain
