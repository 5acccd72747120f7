// The patch gathers of a dilated convolution's GEMM composition (backends/base.py, layout.py):
// int8 NHWC in, int8 GEMM operands out, copies only (no arithmetic), so each is exact by
// construction and judged by layout.py's NumPy definitions (tests/native/test_dilated_gather.py).
#pragma once
#include <cstdint>

namespace dsptrain {

struct GatherShape {
  int n, h, w, c;         // the source (x, or err for the transposed gather)
  int kh, kw, stride, pad, dilation;
  int oh, ow;             // the rows' pixels: the conv's output (dilated_patches) or input (transposed)
};

// cols[N*OH*OW, KH*KW*C] (transposed: [KH*KW*C, N*OH*OW]) of x[N,H,W,C]: output pixel (oy, ox)'s
// taps (i, j) read x at (oy*stride - pad + i*dilation, ox*stride - pad + j*dilation), zero outside
// (layout.gemm_patches; transposed: the weight gradient's K-major operand).
void dilated_patches_s8(const int8_t* x, const GatherShape& s, bool transposed, int8_t* cols);

// A conv's backward data as one stride-1 GEMM (layout.gemm_transposed): the patches of err
// [N,OH',OW',O] (s.h, s.w its spatial size) spread `stride` apart on zeros and framed, read with
// taps `dilation` apart, one row per input pixel (s.oh x s.ow = the conv's input size), without
// the frame: tap (i, j) of input pixel (y, x) is err row (y + i*d - top) / stride when that divides,
// top = (KH-1)*d - pad, and the row exists; zero otherwise.
void transposed_patches_s8(const int8_t* err, const GatherShape& s, int8_t* cols);

// b[N, M] = a[M, N]^T (int8), in cache-sized tiles: the weight gradient's err^T.
void transpose_s8(const int8_t* a, int m, int n, int8_t* b);

}  // namespace dsptrain
