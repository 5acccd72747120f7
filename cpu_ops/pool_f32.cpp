// Images are independent, so the pool splits over them. Comparisons are branchless
// selects (random data would mispredict a branch every other element). The backward adds
// in the order (kh, kw) as NumPy does; without overlapping windows (stride >= kernel)
// every input element gets at most one term, written directly as 0.0f + term.
#include "pool_f32.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "thread_pool.h"

namespace dsptrain {
namespace {

// As the int8 kernels (pool.cpp): per output row and tap, the tap's pixels gathered
// into a contiguous run (compile-time channel counts make each copy a move), then one
// branch-free pass over the run; strict '>' keeps the first maximum.
// the index runs as int32 beside the floats and the select is a mask on the bits: the
// compiler vectorises that (a float select it would not, the compare might trap)
void max_update(const float* __restrict v, int32_t tap, size_t n, float* __restrict best, int32_t* __restrict idx) {
  for (size_t q = 0; q < n; ++q) {
    const int32_t more = -static_cast<int32_t>(v[q] > best[q]);   // all ones where v wins
    int32_t x, b;
    std::memcpy(&x, v + q, 4);
    std::memcpy(&b, best + q, 4);
    b = (x & more) | (b & ~more);
    std::memcpy(best + q, &b, 4);
    idx[q] = (tap & more) | (idx[q] & ~more);
  }
}

template <int C>
void pool_row(const float* in, const PoolShape& s, float* __restrict run, int32_t* __restrict wide, float* __restrict y,
              uint8_t* __restrict argmax) {
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const size_t n = static_cast<size_t>(ow) * c, step = static_cast<size_t>(s.stride) * c;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const float* src = in + i * rs + j * c;
      const float* v = src;
      if (s.stride != 1) {
        for (int ox = 0; ox < ow; ++ox) std::memcpy(run + static_cast<size_t>(ox) * c, src + ox * step, c * sizeof(float));
        v = run;
      }
      if (i == 0 && j == 0) {
        std::memcpy(y, v, n * sizeof(float));
        std::fill(wide, wide + n, 0);
      } else {
        max_update(v, i * k + j, n, y, wide);
      }
    }
  for (size_t q = 0; q < n; ++q) argmax[q] = static_cast<uint8_t>(wide[q]);
}

// dst[q] = 0 + err[q] where idx[q] == tap, else 0 + 0 (NumPy's zeros plus one term)
template <int C>
void unpool_row(const float* __restrict err, const uint8_t* __restrict idx, const PoolShape& s, float* __restrict out) {
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c, step = static_cast<ptrdiff_t>(s.stride) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const uint8_t tap = static_cast<uint8_t>(i * k + j);
      float* dst = out + i * rs + j * c;
      for (int ox = 0; ox < ow; ++ox, dst += step) {
        const float* e = err + static_cast<size_t>(ox) * c;
        const uint8_t* a = idx + static_cast<size_t>(ox) * c;
        for (int ch = 0; ch < c; ++ch) {
          uint32_t bits;   // err's bits where the argmax is this tap, else +0.0; then 0.0f + that
          std::memcpy(&bits, e + ch, 4);
          bits &= 0u - static_cast<uint32_t>(a[ch] == tap);
          float v;
          std::memcpy(&v, &bits, 4);
          dst[ch] = 0.0f + v;
        }
      }
    }
}

using PoolRowFn = void (*)(const float*, const PoolShape&, float*, int32_t*, float*, uint8_t*);
using UnpoolRowFn = void (*)(const float*, const uint8_t*, const PoolShape&, float*);

PoolRowFn pool_row_for(int c) {
  return c == 1 ? pool_row<1> : c == 3 ? pool_row<3> : c == 6 ? pool_row<6> : c == 16 ? pool_row<16> : pool_row<0>;
}
UnpoolRowFn unpool_row_for(int c) {
  return c == 1 ? unpool_row<1> : c == 3 ? unpool_row<3> : c == 6 ? unpool_row<6> : c == 16 ? unpool_row<16> : unpool_row<0>;
}

}  // namespace

void maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax) {
  const int oh = s.oh(), ow = s.ow(), c = s.c;
  const size_t in_image = static_cast<size_t>(s.h) * s.w * c, out_image = static_cast<size_t>(oh) * ow * c;
  const size_t bytes = static_cast<size_t>(s.n) * (in_image * 4 + out_image * 5);
  SerialScope serial(bytes < kTaskGrainBytes);
  const PoolRowFn row_fn = pool_row_for(c);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    std::vector<float> run(static_cast<size_t>(ow) * c);
    std::vector<int32_t> wide(static_cast<size_t>(ow) * c);
    for (int n = n0; n < n1; ++n)
      for (int i = 0; i < oh; ++i)
        row_fn(x + n * in_image + static_cast<size_t>(i) * s.stride * s.w * c, s, run.data(), wide.data(),
               y + n * out_image + static_cast<size_t>(i) * ow * c, argmax + n * out_image + static_cast<size_t>(i) * ow * c);
  });
}

void maxpool_bwd_f32(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx) {
  const int oh = s.oh(), ow = s.ow(), c = s.c, k = s.kernel;
  const size_t in_image = static_cast<size_t>(s.h) * s.w * c, out_image = static_cast<size_t>(oh) * ow * c;
  const size_t bytes = static_cast<size_t>(s.n) * (in_image * 4 + out_image * 5);
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(s.n, bytes, [&](int n0, int n1) {
    if (s.stride != k || s.h != oh * s.stride || s.w != ow * s.stride)   // cells no window writes stay 0
      std::fill(dx + n0 * in_image, dx + n1 * in_image, 0.0f);
    for (int n = n0; n < n1; ++n) {
      if (s.stride >= k) {  // windows do not overlap: one term per element
        for (int i = 0; i < oh; ++i)
          unpool_row_for(c)(err + n * out_image + static_cast<size_t>(i) * ow * c,
                            argmax + n * out_image + static_cast<size_t>(i) * ow * c, s,
                            dx + n * in_image + static_cast<size_t>(i) * s.stride * s.w * c);
        continue;
      }
      for (int kh = 0; kh < k; ++kh)
        for (int kw = 0; kw < k; ++kw) {
          const uint8_t tap = static_cast<uint8_t>(kh * k + kw);
          for (int i = 0; i < oh; ++i)
            for (int j = 0; j < ow; ++j) {
              const size_t o = n * out_image + (static_cast<size_t>(i) * ow + j) * c;
              float* d = dx + n * in_image + ((static_cast<size_t>(i) * s.stride + kh) * s.w + j * s.stride + kw) * c;
              for (int ch = 0; ch < c; ++ch) d[ch] += argmax[o + ch] == tap ? err[o + ch] : 0.0f;
            }
        }
    }
  });
}

}  // namespace dsptrain
