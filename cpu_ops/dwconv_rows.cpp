// The portable depthwise loops (dwconv_rows.h): plain C++ whose channel loops the compiler
// vectorises, cloned for AVX-512 and AVX2 on x86-64 (target_clones.h), NEON on aarch64.
// Built with -ffp-contract=off, so the float loops round each product, then add: ops_ref's order.
// One loop per pass, for both element types: Acc is the sum's type (int32 for int8 operands,
// float for float), each operand widened to it before the product.
#include "dwconv_rows.h"

#include "target_clones.h"

namespace dsptrain {
namespace {

// y[o * ystride + c] = sum over taps t of src[o * xstep + off[t] + c] * w[t * wstride + c].
// Inlined into each clone below, so each ISA's copy vectorises the channel loop its own way.
template <typename X, typename W, typename Acc>
__attribute__((always_inline)) inline void dw_rows(const X* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                                   const W* w, ptrdiff_t wstride, int cw, int count, Acc* y,
                                                   ptrdiff_t ystride) {
  for (int o = 0; o < count; ++o) {
    Acc* __restrict yo = y + o * ystride;
    const X* xo = src + o * xstep;
    for (int c = 0; c < cw; ++c) yo[c] = Acc(0);
    for (int t = 0; t < taps; ++t) {
      const X* __restrict xs = xo + off[t];
      const W* __restrict ws = w + t * wstride;
      for (int c = 0; c < cw; ++c) yo[c] = yo[c] + Acc(xs[c]) * Acc(ws[c]);
    }
  }
}

// acc[t * astride + c] += sum over o < count of e[o * estride + c] * src[o * xstep + off[t] + c].
template <typename X, typename Acc>
__attribute__((always_inline)) inline void dw_wgrad_rows(const X* src, ptrdiff_t xstep, const ptrdiff_t* off,
                                                         int taps, const X* e, ptrdiff_t estride, int cw, int count,
                                                         Acc* acc, ptrdiff_t astride) {
  for (int o = 0; o < count; ++o) {
    const X* __restrict eo = e + o * estride;
    for (int t = 0; t < taps; ++t) {
      const X* __restrict xs = src + o * xstep + off[t];
      Acc* __restrict a = acc + t * astride;
      for (int c = 0; c < cw; ++c) a[c] = a[c] + Acc(eo[c]) * Acc(xs[c]);
    }
  }
}

}  // namespace

DSPTRAIN_CLONES void dw_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                const int16_t* w, ptrdiff_t wstride, int cw, int count, int32_t* y,
                                ptrdiff_t ystride) {
  dw_rows(src, xstep, off, taps, w, wstride, cw, count, y, ystride);
}

DSPTRAIN_CLONES void dw_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                 const float* w, ptrdiff_t wstride, int cw, int count, float* y,
                                 ptrdiff_t ystride) {
  dw_rows(src, xstep, off, taps, w, wstride, cw, count, y, ystride);
}

DSPTRAIN_CLONES void dw_wgrad_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                      const int8_t* e, ptrdiff_t estride, int cw, int count, int32_t* acc,
                                      ptrdiff_t astride) {
  dw_wgrad_rows(src, xstep, off, taps, e, estride, cw, count, acc, astride);
}

DSPTRAIN_CLONES void dw_wgrad_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                       const float* e, ptrdiff_t estride, int cw, int count, float* acc,
                                       ptrdiff_t astride) {
  dw_wgrad_rows(src, xstep, off, taps, e, estride, cw, count, acc, astride);
}

}  // namespace dsptrain
