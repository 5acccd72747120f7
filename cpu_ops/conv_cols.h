// Patches of a convolution for the emulated recipes' explicit-GEMM products: im2col (NHWC
// input -> [N*OH*OW, KH*KW*C] rows, zero padding included) and col2im, the scatter-add of
// a backward-data product's patch sums back onto the NHWC input (zero padding dropped). For the emulated recipes' exact
// products (MLS's int64 sums; FP8's float64 sums of at most KH*KW FP16-valued terms,
// exact too), so the order of the additions does not change the result.
#pragma once
#include <cstdint>
#include <vector>

namespace dsptrain {

struct Col2imShape {
  int n, oh, ow, kh, kw, c, h, w, stride, pad;
};

template <typename T>
void col2im_add(const T* dcols, const Col2imShape& s, T* dx);

// One image's scatter-add (s.n ignored), on the calling thread: dx[H,W,C] is overwritten.
template <typename T>
void col2im_add_image(const T* dcols, const Col2imShape& s, T* dx);

// cols[N*OH*OW, KH*KW*C] from x[N,H,W,C] (s.oh, s.ow the output size); T: int16_t, float.
template <typename T>
void im2col_copy(const T* x, const Col2imShape& s, T* cols);

// One image's patches (s.n ignored), on the calling thread; `padded` is the caller's
// scratch for the zero-padded copy of the image (kept between calls of the same shape).
template <typename T>
void im2col_image(const T* x, const Col2imShape& s, T* cols, std::vector<T>& padded);

}  // namespace dsptrain
