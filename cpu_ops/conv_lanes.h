// Stride-1 convolutions with few output channels, output pixels and channels together in
// AVX-512 lanes (conv_lanes.cpp). Internal to the convolutions (conv.cpp).
#pragma once
#include <cstdint>

#include "conv_impl.h"

namespace dsptrain {

// Whether conv_lanes runs a source of `ch` channels, a kh x kw kernel at `step` and `oc`
// output channels here: step 1, an AVX-512 VNNI + VBMI CPU with the AVX-512 (or AMX) GEMM
// active, and a lane layout whose accumulators and weights fit (at most 4 vectors per
// pixel group, 128 source bytes per step, 24 KB of lane weights).
bool lanes_fit(int ch, int kh, int kw, int step, int oc);

// Whether conv_lanes reads its source padded with bias 0x80 (u8) for this layout (else
// as int8): the layouts with two loads or a broadcast per step.
bool lanes_biased(int ch, int kw, int oc);

// out[P, oc] = patches(s)[P, K] x w_runs[oc, K]^T (w_runs in run layout: [oc, kh,
// run_pad(kw * ch)]), int32, from a source padded as lanes_biased says; padded rows
// outside [data0, data1) hold only padding. `absmax` (if given) receives max |out|.
// With `fused`, out is not written: the results go shift-rounded to int8 into fused->q
// (the same layout) straight from the registers.
void conv_lanes(const PaddedSrc& s, const int8_t* w_runs, int oc, int data0, int data1, int32_t* out, int64_t* absmax,
                const FusedRequant* fused = nullptr);

// The weight gradient of a one-channel source (LeNet's first layer): taps in the lanes,
// four pixels a dword. Whether it runs here: one channel, step 1, kw <= 13, at most 8
// output channels, at most 4 vectors of tap rows (R = min(4, 16 / kw) rows each) and 16
// accumulators (vectors x channels), on AVX-512 VNNI + VBMI.
bool wgrad_lanes_fit(int ch, int kh, int kw, int step, int oc);

// dw[oc, kh, kw, 1] = err[P, oc]^T x patches(s)[P, kh * kw], int32.
void conv_wgrad_lanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw);

}  // namespace dsptrain
