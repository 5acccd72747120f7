// Float 2x2 max-pool, stride 2, and its backward on AVX-512 for up to 16 channels (LeNet's
// 6 and 16): the pixels a vector holds, P = 16 / C of them, and their windows' four taps
// picked out of two rows' 32-float stretches by vpermt2ps, so a layer of few channels fills
// the lanes (the generic loops in pool.cpp run C lanes a pixel; float data is four times
// int8's and this pass was LeNet-5's costliest element-wise op under the emulated recipes).
// The same arithmetic per element as pool.cpp: taps in (kh, kw) order, a tap taking over
// when it compares greater (so the first maximum wins and a NaN never takes over); the
// backward writes 0.0f + err where the argmax names the tap, else +0.0. The fused ReLU
// (relu_maxpool_f32) passes each tap through relu_f32's select (x kept where x >= 0 or
// NaN, else +0.0) before the compares; its backward takes a window's error only where the
// pooled value is > 0 (relu_bwd_f32's select), else +0.0.
#include "pool_f32_pairs.h"

#include <cstring>

#include "cpu_features.h"
#include "thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_POOL_PAIRS 1
#endif

namespace dsptrain {

#ifdef DSPTRAIN_POOL_PAIRS
namespace {

bool has_avx512() { return cpu_features().avx512bw && cpu_features().avx512vl; }

inline __mmask16 lanes16(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// Lane l of a vector holds channel l % C of pixel l / C (l < P * C); tap j of that pixel's
// window is element 2 * C * (l / C) + j * C + l % C of the rows' stretch from its first pixel.
struct PairLayout {
  int c, pixels, lanes;     // C, P, P * C
  __m512i tap[2];           // stretch index of lane l for kw = 0, 1
  __m512i back[2];          // stretch lanes 0-15 and 16-31: (kw ? 16 : 0) + the lane it comes from
};

__attribute__((target("avx512f"))) PairLayout pair_layout(int c) {
  PairLayout p;
  p.c = c;
  p.pixels = 16 / c;
  p.lanes = p.pixels * c;
  alignas(64) int32_t tap[2][16] = {}, back[2][16] = {};
  for (int l = 0; l < p.lanes; ++l)
    for (int j = 0; j < 2; ++j) tap[j][l] = 2 * c * (l / c) + j * c + l % c;
  for (int w = 0; w < 2 * p.lanes; ++w) {   // the stretch element w: pixel w / (2C), kw, channel
    const int pixel = w / (2 * c), kw = (w % (2 * c)) / c, ch = w % c;
    back[w / 16][w % 16] = (kw ? 16 : 0) + pixel * c + ch;
  }
  for (int j = 0; j < 2; ++j) {
    p.tap[j] = _mm512_load_si512(tap[j]);
    p.back[j] = _mm512_load_si512(back[j]);
  }
  return p;
}

// The 32-float stretch of a row from `at` (`count` of them real, the rest not read).
struct Stretch {
  __m512 lo, hi;
};
__attribute__((target("avx512f"))) inline Stretch load_stretch(const float* at, int count) {
  return {_mm512_maskz_loadu_ps(lanes16(count), at), _mm512_maskz_loadu_ps(lanes16(count - 16), at + 16)};
}

// relu_f32's select on 16 lanes: x where x >= 0 or unordered (NaN), else +0.0
__attribute__((target("avx512f"))) inline __m512 relu16(__m512 x) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NLT_UQ), x);
}

template <bool Relu>
__attribute__((target("avx512f"))) void pool_rows(const float* x, const PoolShape& s, const PairLayout& p, float* y,
                                                   uint8_t* argmax, int row0, int row1) {
  const int c = s.c, ow = s.ow(), oh = s.oh();
  const size_t out_row = static_cast<size_t>(ow) * c, in_row = static_cast<size_t>(s.w) * c;
  for (int row = row0; row < row1; ++row) {
    const int b = row / oh, oy = row % oh;
    const float* r0 = x + (static_cast<size_t>(b) * s.h + 2 * static_cast<size_t>(oy)) * in_row;
    const float* r1 = r0 + in_row;
    float* yo = y + row * out_row;
    uint8_t* ao = argmax + row * out_row;
    for (int ox = 0; ox < ow; ox += p.pixels) {
      const int pixels = ow - ox < p.pixels ? ow - ox : p.pixels;
      const int stretch = 2 * c * pixels;
      const size_t at = 2 * static_cast<size_t>(ox) * c;
      const Stretch a = load_stretch(r0 + at, stretch), d = load_stretch(r1 + at, stretch);
      __m512 best = _mm512_permutex2var_ps(a.lo, p.tap[0], a.hi);
      __m512i idx = _mm512_setzero_si512();
      __m512 taps[3] = {_mm512_permutex2var_ps(a.lo, p.tap[1], a.hi), _mm512_permutex2var_ps(d.lo, p.tap[0], d.hi),
                        _mm512_permutex2var_ps(d.lo, p.tap[1], d.hi)};
      if constexpr (Relu) {
        best = relu16(best);
        for (__m512& t : taps) t = relu16(t);
      }
      for (int t = 0; t < 3; ++t) {
        const __mmask16 more = _mm512_cmp_ps_mask(taps[t], best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, more, taps[t]);
        idx = _mm512_mask_mov_epi32(idx, more, _mm512_set1_epi32(t + 1));
      }
      const __mmask16 out = lanes16(pixels * c);
      _mm512_mask_storeu_ps(yo + static_cast<size_t>(ox) * c, out, best);
      _mm512_mask_cvtepi32_storeu_epi8(ao + static_cast<size_t>(ox) * c, out, idx);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void unpool_rows(const float* err, const float* gate,
                                                                       const uint8_t* argmax, const PoolShape& s,
                                                                       const PairLayout& p, float* dx, int row0, int row1) {
  const int c = s.c, ow = s.ow(), oh = s.oh();
  const size_t out_row = static_cast<size_t>(ow) * c, in_row = static_cast<size_t>(s.w) * c;
  const __m512 zero = _mm512_setzero_ps();
  for (int row = row0; row < row1; ++row) {
    const int b = row / oh, oy = row % oh;
    float* d0 = dx + (static_cast<size_t>(b) * s.h + 2 * static_cast<size_t>(oy)) * in_row;
    float* d1 = d0 + in_row;
    const float* eo = err + row * out_row;
    const uint8_t* ao = argmax + row * out_row;
    for (int ox = 0; ox < ow; ox += p.pixels) {
      const int pixels = ow - ox < p.pixels ? ow - ox : p.pixels;
      const int stretch = 2 * c * pixels;
      const __mmask16 in = lanes16(pixels * c);
      __mmask16 take = in;   // gated: only where the pooled value is > 0 (ordered: a NaN gives +0.0)
      if (gate != nullptr)
        take &= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(in, gate + row * out_row + static_cast<size_t>(ox) * c),
                                   _mm512_setzero_ps(), _CMP_GT_OQ);
      const __m512 e = _mm512_maskz_loadu_ps(take, eo + static_cast<size_t>(ox) * c);
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(in, ao + static_cast<size_t>(ox) * c));
      __m512 routed[4];
      for (int t = 0; t < 4; ++t)   // 0.0f + err where the argmax is tap t, else 0.0f + +0.0
        routed[t] = _mm512_add_ps(zero, _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(idx, _mm512_set1_epi32(t)), e));
      const size_t at = 2 * static_cast<size_t>(ox) * c;
      for (int kh = 0; kh < 2; ++kh) {
        float* d = kh ? d1 : d0;
        const __m512 kw0 = routed[2 * kh], kw1 = routed[2 * kh + 1];
        _mm512_mask_storeu_ps(d + at, lanes16(stretch), _mm512_permutex2var_ps(kw0, p.back[0], kw1));
        if (stretch > 16)
          _mm512_mask_storeu_ps(d + at + 16, lanes16(stretch - 16), _mm512_permutex2var_ps(kw0, p.back[1], kw1));
      }
    }
  }
}

bool fits(const PoolShape& s) {
  return has_avx512() && s.kernel == 2 && s.stride == 2 && s.c >= 1 && s.c <= 16 && s.h % 2 == 0 && s.w % 2 == 0;
}

// The layout of c channels (1..16, fits), made once a thread per channel count:
// pool_compensation_bwd calls the backward on every chunk of rows.
const PairLayout& layout_for(int c) {
  thread_local PairLayout layouts[17];
  thread_local bool made[17] = {};
  if (!made[c]) layouts[c] = pair_layout(c), made[c] = true;
  return layouts[c];
}

}  // namespace

bool maxpool_f32_pairs(const float* x, const PoolShape& s, float* y, uint8_t* argmax, bool relu) {
  if (!fits(s)) return false;
  const PairLayout& p = layout_for(s.c);
  const int rows = s.n * s.oh();
  parallel_ranges(rows, static_cast<size_t>(s.n) * s.h * s.w * s.c * sizeof(float), [&](int r0, int r1) {
    if (relu) pool_rows<true>(x, s, p, y, argmax, r0, r1);
    else pool_rows<false>(x, s, p, y, argmax, r0, r1);
  });
  return true;
}

bool maxpool_bwd_f32_pairs(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx, const float* gate) {
  if (!fits(s)) return false;   // (every cell lies in one window: nothing is left to zero)
  const PairLayout& p = layout_for(s.c);
  const int rows = s.n * s.oh();
  parallel_ranges(rows, static_cast<size_t>(s.n) * s.h * s.w * s.c * 2 * sizeof(float),
                  [&](int r0, int r1) { unpool_rows(err, gate, argmax, s, p, dx, r0, r1); });
  return true;
}

#else
bool maxpool_f32_pairs(const float*, const PoolShape&, float*, uint8_t*, bool) { return false; }
bool maxpool_bwd_f32_pairs(const float*, const uint8_t*, const PoolShape&, float*, const float*) { return false; }
#endif

}  // namespace dsptrain
