// The portable depthwise loops (dwconv_rows.h): plain C++ whose channel loops the compiler
// vectorises, cloned for AVX-512 and AVX2 on x86-64 (target_clones.h), NEON on aarch64.
// Built with -ffp-contract=off, so the float loops round each product, then add: ops_ref's order.
#include "dwconv_rows.h"

#include "target_clones.h"

namespace dsptrain {

DSPTRAIN_CLONES void dw_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                const int16_t* w, ptrdiff_t wstride, int cw, int count, int32_t* y,
                                ptrdiff_t ystride) {
  for (int o = 0; o < count; ++o) {
    int32_t* __restrict yo = y + o * ystride;
    const int8_t* xo = src + o * xstep;
    for (int c = 0; c < cw; ++c) yo[c] = 0;
    for (int t = 0; t < taps; ++t) {
      const int8_t* __restrict xs = xo + off[t];
      const int16_t* __restrict ws = w + t * wstride;
      for (int c = 0; c < cw; ++c) yo[c] += int32_t(xs[c]) * int32_t(ws[c]);
    }
  }
}

DSPTRAIN_CLONES void dw_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                 const float* w, ptrdiff_t wstride, int cw, int count, float* y,
                                 ptrdiff_t ystride) {
  for (int o = 0; o < count; ++o) {
    float* __restrict yo = y + o * ystride;
    const float* xo = src + o * xstep;
    for (int c = 0; c < cw; ++c) yo[c] = 0.0f;
    for (int t = 0; t < taps; ++t) {
      const float* __restrict xs = xo + off[t];
      const float* __restrict ws = w + t * wstride;
      for (int c = 0; c < cw; ++c) yo[c] = yo[c] + xs[c] * ws[c];
    }
  }
}

DSPTRAIN_CLONES void dw_wgrad_rows_s8(const int8_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                      const int8_t* e, ptrdiff_t estride, int cw, int count, int32_t* acc,
                                      ptrdiff_t astride) {
  for (int o = 0; o < count; ++o) {
    const int8_t* __restrict eo = e + o * estride;
    for (int t = 0; t < taps; ++t) {
      const int8_t* __restrict xs = src + o * xstep + off[t];
      int32_t* __restrict a = acc + t * astride;
      for (int c = 0; c < cw; ++c) a[c] += int32_t(eo[c]) * int32_t(xs[c]);
    }
  }
}

DSPTRAIN_CLONES void dw_wgrad_rows_f32(const float* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps,
                                       const float* e, ptrdiff_t estride, int cw, int count, float* acc,
                                       ptrdiff_t astride) {
  for (int o = 0; o < count; ++o) {
    const float* __restrict eo = e + o * estride;
    for (int t = 0; t < taps; ++t) {
      const float* __restrict xs = src + o * xstep + off[t];
      float* __restrict a = acc + t * astride;
      for (int c = 0; c < cw; ++c) a[c] = a[c] + eo[c] * xs[c];
    }
  }
}

}  // namespace dsptrain
