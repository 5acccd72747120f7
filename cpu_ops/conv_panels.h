// The padded source and the pixel-panel kernels for few output channels (conv_panels.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "conv_shapes.h"

namespace dsptrain {

// Builds the padded source in `buf` from src[n, h, w, ch]: padded row y' holds source row
// (y' - off_y) / dil when that is exact and in range, else zeros (columns alike, off_x).
// `bias` 0x80 stores every byte, padding included, as the unsigned a + 128 (XOR 0x80):
// the form the offset-trick kernels read in place (gemm_rows).
PaddedSrc pad_source(const int8_t* src, int n, int h, int w, int ch, int off_y, int off_x, int dil, int hp, int wp,
                     int oh, int ow, int kh, int kw, int step, std::vector<int8_t>* buf, uint8_t bias = 0);

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

}  // namespace dsptrain
