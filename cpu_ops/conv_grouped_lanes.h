// The inner loop of the grouped conv's direct kernel (conv_grouped_direct.cpp drives it): one
// row of output pixels of one group, its outputs on the vector's lanes, the group's input
// channels paired through vpmaddwd (the depthwise kernel's product, dwconv_avx2.cpp, turned
// from channels x taps to outputs x channels). For groups of few channels the GEMM's packing
// per product costs as much as its multiply; here nothing is packed: the source is an int16
// frame read in place, the weights a table of lane vectors built once a pass.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

// Lanes of int32 sums a vector holds (AVX2's ymm).
constexpr int kGroupedLanes = 8;

// For each group g < groups (its source at src + g * src_group, its weights at wv + g * wv_group,
// its outputs at y + g * lanes): y[o * ystep + l] = sum over taps t and pairs p of
//   src[o * xstep + off[t] + 2p] * lo(wv) + src[o * xstep + off[t] + 2p + 1] * hi(wv),
// wv = wv[(chunk * taps + t) * pairs + p][l % 8] with chunk = l / 8, for o < count and l < lanes:
// each int32 of wv holds the pair's two int16 weights (low, high), a lane past the group's
// outputs zeros. src is int16 (a pair's two channels adjacent); sums exact in int32.
// Only lanes [0, lanes) of y are written; taps == 0 writes zeros. absmax (may be null): 8 lanes
// of max |y| so far, raised to these sums' (the requantizer's range, taken from the registers).
bool grouped_lanes_compiled();
void grouped_lanes_row(const int16_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, int pairs,
                       const int32_t* wv, int lanes, int count, int32_t* y, ptrdiff_t ystep, int groups, ptrdiff_t src_group,
                       ptrdiff_t wv_group, uint32_t* absmax);

// The weight gradient's: out[k * kGroupedLanes * chunks + l] = sum over rows r < rows and pixel
// pairs q < pairs of madd(err[row_err[r] + q * err_step + l] (int32: the pair's two int16
// errors for output lane l), src[row_src[r] + q * src_step + off[k]] (int32: the pair's two
// int16 inputs)) for k < nk and l < chunks * 8 (the lanes past the group's outputs hold
// whatever the err row has there). Sums exact in int32 (the caller's depth bound).
void grouped_wgrad_lanes(const int32_t* src, const ptrdiff_t* row_src, ptrdiff_t src_step, const int32_t* err,
                         const ptrdiff_t* row_err, ptrdiff_t err_step, int rows, int pairs, const ptrdiff_t* off, int nk,
                         int chunks, int32_t* out);

// Pixel pairs of two rows, as two int16 in an int32 (low: row0's): for u < count, pixel
// x = first + u of each row (pixels `pixel` bytes apart, w of them; zero outside, or where a row
// is null), out[u * out_stride + k] = (row0[x][k], row1[x][k]) for k < n, zeros on to out_stride
// (the weight gradient's input and error pairs, two images' same pixel).
void grouped_pairs(const int8_t* row0, const int8_t* row1, ptrdiff_t pixel, int w, int first, int count, int n,
                   int32_t* out, int out_stride);

}  // namespace dsptrain
