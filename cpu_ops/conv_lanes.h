// Stride-1 convolutions with few output channels, output pixels and channels together in
// AVX-512 lanes (conv_lanes.cpp), called by the convolution drivers (conv.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "conv_shapes.h"

namespace dsptrain {

struct FusedRequant;  // requant.h

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
                FusedRequant* fused = nullptr);

// The weight gradient of a one-channel source (LeNet's first layer): taps in the lanes,
// four pixels a dword. Whether it runs here: one channel, step 1, kw <= 13, at most 8
// output channels, at most 4 vectors of tap rows (R = min(4, 16 / kw) rows each) and 16
// accumulators (vectors x channels), on AVX-512 VNNI + VBMI.
bool wgrad_lanes_fit(int ch, int kh, int kw, int step, int oc);

// dw[oc, kh, kw, 1] = err[P, oc]^T x patches(s)[P, kh * kw], int32.
void conv_wgrad_lanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw);

// The weight gradient with 9-16 output channels in the lanes (LeNet's conv2): a vector
// of the error (4 pixels x the channels) against each tap and channel's broadcast 4 source
// bytes. Whether it runs here: stride 1, 3 or 5 tap rows, 2 or more source channels, a padded source row of
// at most 128 bytes (wp * ch) and as channel runs too, on AVX-512 VNNI + VBMI.
bool wgrad_olanes_fit(int ch, int kh, int kw, int step, int oc, int wp, int ow);

// dw[oc, kh, kw, ch] = err[P, oc]^T x patches(s)[P, kh * kw * ch], int32; its kept
// buffer (the source as channel runs, the error as vectors) holds wgrad_olanes_kept_bytes.
size_t wgrad_olanes_kept_bytes(int n, int hp, int wp, int ch, int kw, int ow, int oh);
// and its tasks' partial sums (kept too) wgrad_olanes_sums_bytes
size_t wgrad_olanes_sums_bytes(int kh, int kw, int ch);
void conv_wgrad_olanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw);

// The backward data of a stride-1 convolution with a dx row of at most 96 lanes (w * c)
// and 8-32 error channels, a multiple of 4, on AVX-512 VNNI + VBMI: the dx row in
// the lanes, four error channels of an error pixel broadcast (LeNet's conv2).
bool bwd_broadcast_fit(const ConvShape& s);

// dx[N, H, W, C] (int32) from err[N, OH, OW, O] and w[O, KH, KW, C] of forward shape `s`;
// `absmax` and `fused` as for conv_lanes; its kept buffer holds bwd_broadcast_kept_bytes.
void conv_bwd_broadcast(const int8_t* err, const int8_t* w, const ConvShape& s, int32_t* dx, int64_t* absmax,
                        FusedRequant* fused);
size_t bwd_broadcast_kept_bytes(const ConvShape& s);

}  // namespace dsptrain
