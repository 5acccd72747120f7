// Channels are innermost (NHWC), so the loops run over contiguous bytes and vectorise;
// work is split over output rows (pooling) or images (its backward), and small calls run
// on the caller alone (tasks_for).
#include "pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "rounding.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// One output row, tap by tap in tap order: the tap's input pixels are gathered into a
// contiguous run of OW*C bytes (already one when stride is 1), then one branch-free pass
// over the run updates the row's maxima; strict '>' keeps the first maximum. C > 0 fixes
// the channel count at compile time, so the per-pixel copies are a move or two; with
// other (typically many) channels each pixel is updated in place instead (C == 0).
void max_update(const int8_t* __restrict v, uint8_t tap, size_t n, int8_t* __restrict best, uint8_t* __restrict idx) {
  for (size_t q = 0; q < n; ++q) {
    const bool more = v[q] > best[q];
    best[q] = more ? v[q] : best[q];
    idx[q] = more ? tap : idx[q];
  }
}

template <int C>
void maxpool_row(const int8_t* in, const PoolShape& s, int8_t* __restrict run, int8_t* __restrict y,
                 uint8_t* __restrict argmax) {
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const size_t n = static_cast<size_t>(ow) * c, step = static_cast<size_t>(s.stride) * c;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const int8_t* src = in + i * rs + j * c;
      const int8_t* v = src;
      if (C == 0 && s.stride != 1 && i + j > 0) {  // many channels: update pixel by pixel, no copy
        for (int ox = 0; ox < ow; ++ox)
          max_update(src + ox * step, static_cast<uint8_t>(i * k + j), c, y + static_cast<size_t>(ox) * c,
                     argmax + static_cast<size_t>(ox) * c);
        continue;
      }
      if (s.stride != 1) {
        for (int ox = 0; ox < ow; ++ox) std::memcpy(run + static_cast<size_t>(ox) * c, src + ox * step, c);
        v = run;
      }
      if (i == 0 && j == 0) {
        std::memcpy(y, v, n);
        std::memset(argmax, 0, n);
      } else {
        max_update(v, static_cast<uint8_t>(i * k + j), n, y, argmax);
      }
    }
}

template <int C>
void maxpool_rows(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax, int row0, int row1) {
  const int oh = s.oh(), c = s.c;
  const size_t out_row = static_cast<size_t>(s.ow()) * c;
  thread_local std::vector<int8_t> run;
  if (run.size() < out_row) run.resize(out_row);
  for (int row = row0; row < row1; ++row) {
    const int b = row / oh, oy = row % oh;
    const int8_t* in = x + (static_cast<ptrdiff_t>(b) * s.h + static_cast<ptrdiff_t>(oy) * s.stride) * s.w * c;
    maxpool_row<C>(in, s, run.data(), y + row * out_row, argmax + row * out_row);
  }
}

// One output row of maxpool_bwd_s8 when stride == kernel: for each tap, a select over the
// row's pixels (error where the argmax is that tap, else 0) written to the tap's input
// cells, so every cell of the k input rows is written once, branch free.
// dst[q] = err[q] (clipped to -127) where idx[q] == tap, else 0: masks, not branches,
// and no byte max (SSE2 has none), so it vectorises.
inline __attribute__((always_inline)) void select_tap(const int8_t* __restrict err, const uint8_t* __restrict idx,
                                                      uint8_t tap, size_t n, int8_t* __restrict dst) {
  for (size_t q = 0; q < n; ++q) {
    const int8_t e = static_cast<int8_t>(err[q] + static_cast<int8_t>(err[q] == -128));  // -128 -> -127
    dst[q] = static_cast<int8_t>(e & -static_cast<int8_t>(idx[q] == tap));
  }
}

template <int C>
void pool_bwd_row(const int8_t* __restrict err, const uint8_t* __restrict idx, const PoolShape& s,
                  int8_t* __restrict out) {
  const int c = C > 0 ? C : s.c, ow = s.ow(), k = s.kernel;
  const ptrdiff_t rs = static_cast<ptrdiff_t>(s.w) * c, step = static_cast<ptrdiff_t>(k) * c;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const uint8_t tap = static_cast<uint8_t>(i * k + j);
      int8_t* dst = out + i * rs + j * c;
      for (int ox = 0; ox < ow; ++ox, dst += step) select_tap(err + ox * c, idx + ox * c, tap, C > 0 ? C : c, dst);
    }
}
using RowBwdFn = void (*)(const int8_t*, const uint8_t*, const PoolShape&, int8_t*);

// Image b of maxpool_bwd_s8 into `out` (its h*w*c bytes).
void maxpool_bwd_image(const int8_t* err, const uint8_t* argmax, const PoolShape& s, const ptrdiff_t* tap_at, int b,
                       int8_t* out) {
  const int oh = s.oh(), ow = s.ow(), c = s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * c;
  if (s.stride == s.kernel) {  // windows tile the image: every covered cell written once
    if (s.h != oh * s.stride || s.w != ow * s.stride) std::memset(out, 0, image);
    const RowBwdFn row_fn = c == 1 ? pool_bwd_row<1> : c == 3 ? pool_bwd_row<3> : c == 6 ? pool_bwd_row<6>
                          : c == 16 ? pool_bwd_row<16> : pool_bwd_row<0>;
    const size_t out_row = static_cast<size_t>(ow) * c;
    for (int oy = 0; oy < oh; ++oy) {
      const size_t at = (static_cast<size_t>(b) * oh + oy) * out_row;
      row_fn(err + at, argmax + at, s, out + static_cast<ptrdiff_t>(oy) * s.stride * s.w * c);
    }
    return;
  }
  if (s.stride > s.kernel) {  // disjoint windows: each input cell gets at most one error
    std::memset(out, 0, image);
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const ptrdiff_t at = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
        int8_t* corner = out + (static_cast<ptrdiff_t>(oy) * s.stride * s.w + ox * s.stride) * c;
        for (int ch = 0; ch < c; ++ch) corner[tap_at[argmax[at + ch]] + ch] = std::max<int8_t>(err[at + ch], -127);
      }
    return;
  }
  thread_local std::vector<int32_t> acc;
  acc.assign(image, 0);
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      const ptrdiff_t at = ((static_cast<ptrdiff_t>(b) * oh + oy) * ow + ox) * c;
      int32_t* corner = acc.data() + (static_cast<ptrdiff_t>(oy) * s.stride * s.w + ox * s.stride) * c;
      for (int ch = 0; ch < c; ++ch) corner[tap_at[argmax[at + ch]] + ch] += err[at + ch];
    }
  }
  for (size_t i = 0; i < image; ++i) out[i] = clip_s8(acc[i]);
}

}  // namespace

void maxpool_s8(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax) {
  using RowsFn = void (*)(const int8_t*, const PoolShape&, int8_t*, uint8_t*, int, int);
  const RowsFn rows_fn = s.c == 1 ? maxpool_rows<1> : s.c == 3 ? maxpool_rows<3> : s.c == 6 ? maxpool_rows<6>
                       : s.c == 16 ? maxpool_rows<16> : maxpool_rows<0>;
  const int rows = s.n * s.oh();
  const int tasks = tasks_for(static_cast<size_t>(s.n) * s.h * s.w * s.c, rows);
  parallel_for(tasks, [&](int t) {
    rows_fn(x, s, y, argmax, static_cast<int>(static_cast<long long>(rows) * t / tasks),
            static_cast<int>(static_cast<long long>(rows) * (t + 1) / tasks));
  });
}

void maxpool_bwd_s8(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx) {
  const int c = s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * c;
  // Where tap t of a window lands, relative to the window's corner (no division per element).
  ptrdiff_t tap_at[256];
  for (int t = 0; t < s.kernel * s.kernel; ++t)
    tap_at[t] = (static_cast<ptrdiff_t>(t / s.kernel) * s.w + t % s.kernel) * c;
  parallel_ranges(s.n, image * s.n * 2, [&](int b0, int b1) {
    for (int b = b0; b < b1; ++b) maxpool_bwd_image(err, argmax, s, tap_at, b, dx + b * image);
  });
}

}  // namespace dsptrain
