// Max-pool and its backward for int8 (NITI) and float (the emulated recipes, FP32): one
// window walk over the element type. Channels are innermost (NHWC), so every inner loop
// runs over contiguous elements and vectorises; work is split over output rows (pooling)
// or images (its backward), and small calls run on the caller alone (tasks_for).
//
// What differs by type is in PoolElement<T>: the running argmax's type (float keeps an
// int32 beside the floats so the select is a mask on the bits, which the compiler
// vectorises; a float select it would not, the compare might trap), how an error reaches
// the input (int8 clips -128 to -127; float adds it to +0.0 as NumPy's zeros plus one
// term do), and the sum where windows overlap (int8: exact int32, clipped after; float:
// in place, in NumPy's (kh, kw) order).
//
// The float recipes' ReLU then max-pool is one op each way (relu_maxpool_f32 and its
// backward): the forward applies the ReLU to each tap as it is read (the same select as
// relu_f32, so the same maxima and argmax as the two ops); the backward gates each window's
// error by its pooled value (err where y > 0, else +0.0: relu_bwd_f32 at the argmax cell,
// whose ReLU output is the window's maximum y) and routes it as the plain backward does.
#include "pool.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "eltwise_f32.h"
#include "pool_f32.h"
#include "pool_f32_pairs.h"
#include "pool_lanes.h"
#include "rounding.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

template <typename T>
struct PoolElement;

template <>
struct PoolElement<int8_t> {
  using Index = uint8_t;  // the argmax itself
  using Sum = int32_t;    // overlapping windows: exact, clipped to +-127 after
  // err where the argmax is this tap, else 0: masks, not branches, and no byte max (SSE2
  // has none), so it vectorises; -128 becomes -127 (the symmetric int8 range)
  static int8_t routed(int8_t err, bool hit) {
    const int8_t e = static_cast<int8_t>(err + static_cast<int8_t>(err == -128));
    return static_cast<int8_t>(e & -static_cast<int8_t>(hit));
  }
  static void max_update(const int8_t* __restrict v, uint8_t tap, size_t n, int8_t* __restrict best,
                         uint8_t* __restrict idx) {
    for (size_t q = 0; q < n; ++q) {
      const bool more = v[q] > best[q];
      best[q] = more ? v[q] : best[q];
      idx[q] = more ? tap : idx[q];
    }
  }
};

template <>
struct PoolElement<float> {
  using Index = int32_t;  // narrowed to the uint8 argmax after each row
  using Sum = float;      // overlapping windows: added in place, in (kh, kw) order
  // 0.0f + (err's bits where the argmax is this tap, else +0.0)
  static float routed(float err, bool hit) {
    uint32_t bits;
    std::memcpy(&bits, &err, 4);
    bits &= 0u - static_cast<uint32_t>(hit);
    float v;
    std::memcpy(&v, &bits, 4);
    return 0.0f + v;
  }
  static void max_update(const float* __restrict v, int32_t tap, size_t n, float* __restrict best,
                         int32_t* __restrict idx) {
    for (size_t q = 0; q < n; ++q) {
      const int32_t more = -static_cast<int32_t>(v[q] > best[q]);  // all ones where v wins
      int32_t x, b;
      std::memcpy(&x, v + q, 4);
      std::memcpy(&b, best + q, 4);
      b = (x & more) | (b & ~more);
      std::memcpy(best + q, &b, 4);
      idx[q] = (tap & more) | (idx[q] & ~more);
    }
  }
};

// One output row, tap by tap in tap order: the tap's input pixels are gathered into a
// contiguous run of OW*C elements (already one when stride is 1), then one branch-free
// pass over the run updates the row's maxima; strict '>' keeps the first maximum. C > 0
// fixes the channel count at compile time, so the per-pixel copies are a move or two;
// with other (typically many) channels each pixel is updated in place instead (C == 0).
// Relu (float only): every tap is gathered and passes the ReLU first.
template <typename T, int C, bool Relu>
void pool_row(const T* in, const PoolShape& s, T* __restrict run, typename PoolElement<T>::Index* __restrict idx,
              T* __restrict y, uint8_t* __restrict argmax) {
  using E = PoolElement<T>;
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const size_t n = static_cast<size_t>(ow) * c, step = static_cast<size_t>(s.stride) * c;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const auto tap = static_cast<typename E::Index>(i * k + j);
      const T* src = in + i * rs + j * c;
      const T* v = src;
      if (!Relu && C == 0 && s.stride != 1 && i + j > 0) {  // many channels: update pixel by pixel, no copy
        for (int ox = 0; ox < ow; ++ox)
          E::max_update(src + ox * step, tap, c, y + static_cast<size_t>(ox) * c, idx + static_cast<size_t>(ox) * c);
        continue;
      }
      if (s.stride != 1 || Relu) {
        for (int ox = 0; ox < ow; ++ox) std::memcpy(run + static_cast<size_t>(ox) * c, src + ox * step, c * sizeof(T));
        v = run;
      }
      if constexpr (Relu)
        for (size_t q = 0; q < n; ++q) run[q] = relu_select(run[q]);
      if (i == 0 && j == 0) {
        std::memcpy(y, v, n * sizeof(T));
        std::fill(idx, idx + n, typename E::Index(0));
      } else {
        E::max_update(v, tap, n, y, idx);
      }
    }
  if constexpr (!std::is_same_v<typename E::Index, uint8_t>)
    for (size_t q = 0; q < n; ++q) argmax[q] = static_cast<uint8_t>(idx[q]);
}

template <typename T, int C, bool Relu>
void pool_rows(const T* x, const PoolShape& s, T* y, uint8_t* argmax, int row0, int row1) {
  using Index = typename PoolElement<T>::Index;
  const int oh = s.oh(), c = s.c;
  const size_t out_row = static_cast<size_t>(s.ow()) * c;
  thread_local std::vector<T> run;
  thread_local std::vector<Index> wide;   // the float argmax's int32 lanes (unused for int8)
  if (run.size() < out_row) run.resize(out_row);
  if (!std::is_same_v<Index, uint8_t> && wide.size() < out_row) wide.resize(out_row);
  for (int row = row0; row < row1; ++row) {
    const int b = row / oh, oy = row % oh;
    const T* in = x + (static_cast<ptrdiff_t>(b) * s.h + static_cast<ptrdiff_t>(oy) * s.stride) * s.w * c;
    uint8_t* a = argmax + row * out_row;
    Index* idx;
    if constexpr (std::is_same_v<Index, uint8_t>) idx = a; else idx = wide.data();
    pool_row<T, C, Relu>(in, s, run.data(), idx, y + row * out_row, a);
  }
}

// The error window `at` sends back: itself, or (gate: the pooled values, float only) gated
template <typename T>
inline T window_error(const T* err, const T* gate, size_t at) {
  if constexpr (std::is_same_v<T, float>) {
    if (gate != nullptr) return relu_gate(err[at], gate[at]);
  }
  return err[at];
}

// One output row of the backward when windows do not overlap (stride >= kernel): for each
// tap, the routed error (E::routed) written to the tap's input cells, so every cell the
// windows cover is written once, branch free.
template <typename T, int C>
void unpool_row(const T* __restrict err, const T* __restrict gate, const uint8_t* __restrict idx, const PoolShape& s,
                T* __restrict out) {
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c, step = static_cast<ptrdiff_t>(s.stride) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const uint8_t tap = static_cast<uint8_t>(i * k + j);
      T* dst = out + i * rs + j * c;
      for (int ox = 0; ox < ow; ++ox, dst += step) {
        const size_t at = static_cast<size_t>(ox) * c;
        const uint8_t* a = idx + at;
        for (int ch = 0; ch < c; ++ch) dst[ch] = PoolElement<T>::routed(window_error(err, gate, at + ch), a[ch] == tap);
      }
    }
}

// Image b of the backward into `out` (its h*w*c elements); gate: see window_error.
template <typename T>
void pool_bwd_image(const T* err, const T* gate, const uint8_t* argmax, const PoolShape& s, const ptrdiff_t* tap_at,
                    int b, T* out) {
  using Sum = typename PoolElement<T>::Sum;
  const int oh = s.oh(), ow = s.ow(), c = s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * c, out_row = static_cast<size_t>(ow) * c;
  if (s.stride >= s.kernel) {
    if (s.stride != s.kernel || s.h != oh * s.stride || s.w != ow * s.stride)   // cells no window covers stay 0
      std::fill(out, out + image, T(0));
    using RowFn = void (*)(const T*, const T*, const uint8_t*, const PoolShape&, T*);
    const RowFn row_fn = c == 1 ? unpool_row<T, 1> : c == 3 ? unpool_row<T, 3> : c == 6 ? unpool_row<T, 6>
                       : c == 16 ? unpool_row<T, 16> : unpool_row<T, 0>;
    for (int oy = 0; oy < oh; ++oy) {
      const size_t at = (static_cast<size_t>(b) * oh + oy) * out_row;
      row_fn(err + at, gate ? gate + at : nullptr, argmax + at, s, out + static_cast<ptrdiff_t>(oy) * s.stride * s.w * c);
    }
    return;
  }
  // Overlapping windows: each error adds to the cell its argmax names. Walked from the
  // last window to the first, a cell gets its terms in (kh, kw) order, NumPy's (float
  // sums depend on the order; int8's are exact in int32 and clipped after).
  thread_local std::vector<int32_t> wide;
  Sum* acc;
  if constexpr (std::is_same_v<Sum, T>) {
    acc = out;
  } else {
    wide.resize(image);
    acc = wide.data();
  }
  std::fill(acc, acc + image, Sum(0));
  for (int oy = oh - 1; oy >= 0; --oy)
    for (int ox = ow - 1; ox >= 0; --ox) {
      const ptrdiff_t at = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
      Sum* corner = acc + (static_cast<ptrdiff_t>(oy) * s.stride * s.w + ox * s.stride) * c;
      for (int ch = 0; ch < c; ++ch) corner[tap_at[argmax[at + ch]] + ch] += window_error(err, gate, at + ch);
    }
  if constexpr (!std::is_same_v<Sum, T>)
    for (size_t i = 0; i < image; ++i) out[i] = clip_s8(acc[i]);
}

template <typename T, bool Relu = false>
void maxpool(const T* x, const PoolShape& s, T* y, uint8_t* argmax) {
  if constexpr (std::is_same_v<T, int8_t>) {
    if (pool_lanes_fit(s)) return maxpool_lanes(x, s, y, argmax);   // tiling windows: byte permutes
  }
  if constexpr (std::is_same_v<T, float>) {
    if (maxpool_f32_pairs(x, s, y, argmax, Relu)) return;   // 2x2 windows, few channels: pixels in the lanes
  }
  using RowsFn = void (*)(const T*, const PoolShape&, T*, uint8_t*, int, int);
  const RowsFn rows_fn = s.c == 1 ? pool_rows<T, 1, Relu> : s.c == 3 ? pool_rows<T, 3, Relu>
                       : s.c == 6 ? pool_rows<T, 6, Relu> : s.c == 16 ? pool_rows<T, 16, Relu> : pool_rows<T, 0, Relu>;
  const int rows = s.n * s.oh();
  const int tasks = tasks_for(static_cast<size_t>(s.n) * s.h * s.w * s.c * sizeof(T), rows);
  parallel_for(tasks, [&](int t) {
    rows_fn(x, s, y, argmax, static_cast<int>(static_cast<long long>(rows) * t / tasks),
            static_cast<int>(static_cast<long long>(rows) * (t + 1) / tasks));
  });
}

template <typename T>
void maxpool_bwd(const T* err, const uint8_t* argmax, const PoolShape& s, T* dx, const T* gate = nullptr) {
  if constexpr (std::is_same_v<T, int8_t>) {
    if (pool_lanes_fit(s)) return maxpool_bwd_lanes(err, argmax, s, dx);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (maxpool_bwd_f32_pairs(err, argmax, s, dx, gate)) return;
  }
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  // Where tap t of a window lands, relative to the window's corner (no division per element).
  ptrdiff_t tap_at[256];
  for (int t = 0; t < s.kernel * s.kernel; ++t)
    tap_at[t] = (static_cast<ptrdiff_t>(t / s.kernel) * s.w + t % s.kernel) * s.c;
  parallel_ranges(s.n, image * s.n * 2 * sizeof(T), [&](int b0, int b1) {
    for (int b = b0; b < b1; ++b) pool_bwd_image(err, gate, argmax, s, tap_at, b, dx + b * image);
  });
}

// The input error of pixels [r0, r1) (n * h * w + y * w + x, c channels each) of a float
// max-pool backward whose windows do not overlap (stride >= kernel), into `buf`: the bands
// of image rows those pixels lie in, each image's part by maxpool_bwd itself on the bands'
// sub-shape (a cell's value depends on its window alone: the same bits), the rows no
// window covers +0.0 as it writes them. Returns where pixel r0's error starts in buf.
const float* unpooled_pixels(const float* err, const float* gate, const uint8_t* argmax, const PoolShape& s, size_t r0,
                             size_t r1, std::vector<float>& buf) {
  const int st = s.stride, oh = s.oh(), ow = s.ow();
  const size_t w = s.w, c = s.c, row = w * c, pooled_image = static_cast<size_t>(oh) * ow * c;
  const size_t first_row = r0 / w, end_row = (r1 + w - 1) / w;   // image rows n * h + y
  const size_t from = first_row / s.h * s.h + (first_row % s.h) / st * st;   // its band's first row
  if (buf.size() < (end_row - from + st) * row) buf.resize((end_row - from + st) * row);
  float* out = buf.data();
  for (size_t at = from; at < end_row;) {
    const size_t n = at / s.h;
    if (at % s.h == 0 && end_row - at >= static_cast<size_t>(s.h)) {   // whole images: one call
      const size_t images = (end_row - at) / s.h;
      const PoolShape whole{static_cast<int>(images), s.h, s.w, s.c, s.kernel, s.stride};
      maxpool_bwd(err + n * pooled_image, argmax + n * pooled_image, whole, out, gate ? gate + n * pooled_image : nullptr);
      out += images * s.h * row;
      at += images * s.h;
      continue;
    }
    const int y = static_cast<int>(at % s.h);
    const int y_end = static_cast<int>(std::min<size_t>(s.h, end_row - n * s.h));
    const int oy0 = y / st, oy1 = std::min(oh, (y_end + st - 1) / st);   // the bands it needs
    int done = y;
    if (oy1 > oy0) {
      const int rows = std::min((oy1 - oy0) * st, s.h - oy0 * st);   // stride > kernel: a last band may pass the image
      const PoolShape band{1, rows, s.w, s.c, s.kernel, s.stride};
      const size_t pooled = n * pooled_image + static_cast<size_t>(oy0) * ow * c;
      maxpool_bwd(err + pooled, argmax + pooled, band, out, gate ? gate + pooled : nullptr);
      done = oy0 * st + rows;
      out += static_cast<size_t>(done - y) * row;
    }
    if (done < y_end) {   // rows below the last window
      std::fill(out, out + static_cast<size_t>(y_end - done) * row, 0.0f);
      out += static_cast<size_t>(y_end - done) * row;
      done = y_end;
    }
    at = n * s.h + done;
  }
  return buf.data() + (r0 - from * w) * c;
}

}  // namespace

void pool_compensation_bwd(const float* err, const float* gate, const uint8_t* argmax, const PoolShape& s,
                           const float* z, const float* scale, float* dz, float* d_scale, float* d_shift) {
  const ErrorRows unpooled = [&](size_t r0, size_t r1) {
    thread_local std::vector<float> buf;
    return unpooled_pixels(err, gate, argmax, s, r0, r1, buf);
  };
  compensation_bwd_rows(&unpooled, nullptr, z, scale, static_cast<size_t>(s.n) * s.h * s.w, s.c, dz, d_scale, d_shift);
}

void maxpool_s8(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax) { maxpool(x, s, y, argmax); }
void maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax) { maxpool(x, s, y, argmax); }

void maxpool_bwd_s8(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx) {
  maxpool_bwd(err, argmax, s, dx);
}
void maxpool_bwd_f32(const float* err, const uint8_t* argmax, const PoolShape& s, float* dx) {
  maxpool_bwd(err, argmax, s, dx);
}

void relu_maxpool_f32(const float* x, const PoolShape& s, float* y, uint8_t* argmax) {
  maxpool<float, true>(x, s, y, argmax);
}
void relu_maxpool_bwd_f32(const float* err, const float* y, const uint8_t* argmax, const PoolShape& s, float* dx) {
  maxpool_bwd(err, argmax, s, dx, y);
}

}  // namespace dsptrain
