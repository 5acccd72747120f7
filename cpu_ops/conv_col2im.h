// The scatter-add of a convolution's backward-data product: [N*OH*OW, KH*KW*C] patch sums
// back onto the NHWC input (zero padding dropped). For the emulated recipes' exact
// products (MLS's int64 sums; FP8's float64 sums of at most KH*KW FP16-valued terms,
// exact too), so the order of the additions does not change the result.
#pragma once
#include <cstdint>

namespace dsptrain {

struct Col2imShape {
  int n, oh, ow, kh, kw, c, h, w, stride, pad;
};

template <typename T>
void col2im_add(const T* dcols, const Col2imShape& s, T* dx);

}  // namespace dsptrain
