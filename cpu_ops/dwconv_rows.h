// The inner loops of the depthwise convolutions (dwconv.cpp drives them): one output row,
// or one row of a weight gradient's positions, over a channel range. `src` is the row's
// window corner in the source image (dwconv.cpp: x zero-padded, or err zero-inserted), its
// output position o at src + o * xstep; tap t reads src + off[t]. The taps are summed in
// the order `off` lists them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

// The portable kernels (the compiler vectorises the channel loops: AVX-512 / AVX2 clones
// on x86-64, NEON on aarch64). Channels [0, cw): y[o * ystride + c] = sum over taps of
// src[o * xstep + off[t] + c] * w[t * wstride + c], each product rounded then added (float).
void dw_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, const int16_t* w,
                ptrdiff_t wstride, int cw, int count, int32_t* y, ptrdiff_t ystride);
void dw_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, const float* w,
                 ptrdiff_t wstride, int cw, int count, float* y, ptrdiff_t ystride);
// acc[t * astride + c] += sum over o < count of e[o * estride + c] * src[o * xstep + off[t] + c]
// (float: o in order, each product rounded then added).
void dw_wgrad_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, const int8_t* e,
                      ptrdiff_t estride, int cw, int count, int32_t* acc, ptrdiff_t astride);
void dw_wgrad_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, const float* e,
                       ptrdiff_t estride, int cw, int count, float* acc, ptrdiff_t astride);

// AVX2 (dwconv_avx2.cpp): taps paired through vpmaddwd, 8 channels a step, cw a multiple
// of 8. Forward / backward data: pair p multiplies src + pair_off[2p] and src + pair_off[2p+1]
// by wpairs[p * wstride + 2c + {0, 1}] (an odd last tap pairs with a zero weight), the sums
// in registers. Weight gradient: positions o and o+1 paired, the taps' sums in registers.
bool dw_madd_compiled();
void dw_rows_s8_madd(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* pair_off, int pairs, const int16_t* wpairs,
                     ptrdiff_t wstride, int cw, int count, int32_t* y, ptrdiff_t ystride);
void dw_wgrad_rows_s8_madd(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, const int8_t* e,
                           ptrdiff_t estride, int cw, int count, int32_t* acc, ptrdiff_t astride);

}  // namespace dsptrain
