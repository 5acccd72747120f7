// Taps of a float convolution that read only the zero border, for every output pixel:
// at ResNet-18's 1x1 layer4 on 32x32 input, 8 of a 3x3 kernel's 9 taps (and 5 of 9 for
// its stride-2 entry conv on 2x2). Their products are exact zeros, so the convolution
// equals a smaller one over the live taps alone (the int8 drivers trim per output pixel
// instead: conv_trimmed.cpp). conv_f32.cpp runs that smaller convolution.
#pragma once

#include <vector>

#include "conv_shapes.h"

namespace dsptrain {

struct LiveTaps {
  int a0, b0;     // the first live tap row and column of the kernel
  ConvShape s;    // the convolution over the live taps alone: same input and output sizes
};

// Whether some taps of `s` are dead and the live ones form a convolution ConvShape can
// state (one padding for both axes and both sides); if so, `live` describes it.
bool live_taps(const ConvShape& s, LiveTaps* live);

// w[O, KH, KW, C] cut to the live taps: [O, live.kh, live.kw, C].
std::vector<float> slice_live_taps(const float* w, const ConvShape& s, const LiveTaps& live);

// dw[O, KH, KW, C] = the live taps' gradient dw_live put in place, zeros elsewhere.
void place_live_taps(const float* dw_live, const ConvShape& s, const LiveTaps& live, float* dw);

}  // namespace dsptrain
