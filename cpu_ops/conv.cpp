// The convolution drivers: pad (and for the transposed convolution dilate) the source
// once, then pick by shape -- im2col + GEMM for wide layers, pixel panels
// (conv_panels.cpp) when the output channels are few. Scratch buffers are per thread and
// only grow, so steady-state training allocates nothing here.
#include "conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "conv_impl.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Fills cols[P, kh*kw*ch] from the padded source: one contiguous run per tap row.
void im2col(const PaddedSrc& s, int8_t* cols) {
  const int run = s.run();
  const ptrdiff_t kk = static_cast<ptrdiff_t>(s.kh) * run, rs = s.row_stride();
  parallel_ranges(s.n * s.oh, static_cast<size_t>(s.pixels()) * kk, [&](int row0, int row1) {
    for (int row = row0; row < row1; ++row) {
      const int b = row / s.oh, oy = row % s.oh;
      int8_t* dst = cols + static_cast<ptrdiff_t>(row) * s.ow * kk;
      for (int ox = 0; ox < s.ow; ++ox) {
        const int8_t* src = s.d + s.base(b, oy, ox);
        for (int i = 0; i < s.kh; ++i, dst += run) std::memcpy(dst, src + i * rs, run);
      }
    }
  });
}

// dst[cols, rows] = src[rows, cols]^T, in cache-sized blocks.
template <typename T>
void transpose(const T* src, ptrdiff_t rows, ptrdiff_t cols, T* dst) {
  constexpr ptrdiff_t kBlock = 64;
  const int row_blocks = static_cast<int>((rows + kBlock - 1) / kBlock);
  parallel_for(row_blocks, [&](int rb) {
    const ptrdiff_t r0 = rb * kBlock, r1 = std::min(rows, r0 + kBlock);
    for (ptrdiff_t c0 = 0; c0 < cols; c0 += kBlock)
      for (ptrdiff_t r = r0; r < r1; ++r)
        for (ptrdiff_t c = c0; c < std::min(cols, c0 + kBlock); ++c) dst[c * rows + r] = src[r * cols + c];
  });
}

template <typename T>
void gemm(MatrixS8 a, MatrixS8 b, int m, int n, int k, T* c) {
  if constexpr (std::is_same_v<T, int32_t>) {
    gemm_s8_s32(a, b, m, n, k, c);
  } else {
    gemm_s8_s64(a, b, m, n, k, c);
  }
}

std::vector<int8_t>& scratch(int which) {
  thread_local std::vector<int8_t> buffers[3];
  return buffers[which];
}

int8_t* grow(std::vector<int8_t>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

// Share of useful work in a tile of `tile` rows or columns holding `n`.
double fill(int n, int tile) { return static_cast<double>(n) / ((n + tile - 1) / tile * tile); }

// Pixel panels when the output channels fill the GEMM's short side (mr) clearly better
// than its wide one (nr), and the padded depth keeps int32 accumulators exact.
bool use_pixel_panels(int out_channels, int depth, long long padded_bytes) {
  const GemmKernel* k = gemm_kernel(active_isa());
  return depth <= kMaxInt32Depth && padded_bytes < (1LL << 31) - 4096 &&  // int32 gather offsets
         fill(out_channels, k->mr) > fill(out_channels, k->nr) + 0.1;
}

long long fwd_bytes(const ConvShape& s) { return 1LL * s.n * (s.h + 2 * s.pad) * (s.w + 2 * s.pad) * s.c; }
long long bwd_bytes(const ConvShape& s) { return 1LL * s.n * (s.h + s.kh - 1) * (s.w + s.kw - 1) * s.o; }

// The panel weight gradient while its per-task accumulators stay small.
bool use_wgrad_panels(const ConvShape& s) {
  const long long taps = static_cast<long long>(s.kh) * run_pad(s.kw * s.c);
  return taps * s.o <= 300 * 1024;
}

// w[o, i, j, c] -> dst[o, i, run_pad(kw*c)] with zero padding after each tap row.
void weights_in_runs(const int8_t* w, int o, int kh, int run, int8_t* dst) {
  const int runp = run_pad(run);
  for (int r = 0; r < o * kh; ++r) {
    std::memcpy(dst + static_cast<ptrdiff_t>(r) * runp, w + static_cast<ptrdiff_t>(r) * run, run);
    std::memset(dst + static_cast<ptrdiff_t>(r) * runp + run, 0, runp - run);
  }
}

PaddedSrc forward_source(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf) {
  return pad_source(x, s.n, s.h, s.w, s.c, s.pad, s.pad, 1, s.h + 2 * s.pad, s.w + 2 * s.pad, s.oh(), s.ow(), s.kh, s.kw,
                    s.stride, buf);
}

}  // namespace

const char* conv_algorithm(ConvPass pass, const ConvShape& s) {
  switch (pass) {
    case ConvPass::kForward:
      if (s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0) return "gemm_1x1";
      return use_pixel_panels(s.o, s.kh * run_pad(s.kw * s.c), fwd_bytes(s)) ? "pixel_panels" : "im2col_gemm";
    case ConvPass::kBackwardData:
      return use_pixel_panels(s.c, s.kh * run_pad(s.kw * s.o), bwd_bytes(s)) ? "pixel_panels" : "im2col_gemm";
    case ConvPass::kBackwardWeight:
      return use_wgrad_panels(s) ? "wgrad_panels" : "im2col_gemm";
  }
  return "?";
}

template <typename T>
void conv2d_fwd(const int8_t* x, const int8_t* w, const ConvShape& s, T* y) {
  const int oh = s.oh(), ow = s.ow(), k = s.kh * s.kw * s.c, m = s.n * oh * ow;
  if (s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0) {
    gemm(MatrixS8{x, k, 1}, MatrixS8{w, k, 1}, m, s.o, k, y);
    return;
  }
  const PaddedSrc src = forward_source(x, s, &scratch(2));
  if (use_pixel_panels(s.o, s.kh * run_pad(s.kw * s.c), fwd_bytes(s))) {
    const int run = s.kw * s.c;
    int8_t* w_runs = grow(scratch(1), static_cast<size_t>(s.o) * s.kh * run_pad(run));
    weights_in_runs(w, s.o, s.kh, run, w_runs);
    conv_pixel_panels(src, w_runs, s.o, y);
    return;
  }
  int8_t* cols = grow(scratch(0), static_cast<size_t>(m) * k);
  im2col(src, cols);
  gemm(MatrixS8{cols, k, 1}, MatrixS8{w, k, 1}, m, s.o, k, y);
}

template <typename T>
void conv2d_bwd_data(const int8_t* err, const int8_t* w, const ConvShape& s, T* dx) {
  // A stride-1 convolution of the zero-dilated, padded error with the flipped,
  // transposed kernel w'[c, i, j, o] = w[o, kh-1-i, kw-1-j, c].
  const int oh = s.oh(), ow = s.ow(), run = s.kw * s.o, m = s.n * s.h * s.w;
  const bool panels = use_pixel_panels(s.c, s.kh * run_pad(run), bwd_bytes(s));
  const int runp = panels ? run_pad(run) : run, k = s.kh * runp;
  int8_t* wt = grow(scratch(1), static_cast<size_t>(s.c) * k);
  for (int c = 0; c < s.c; ++c) {  // a few KB: not worth waking the pool
    int8_t* row = wt + static_cast<ptrdiff_t>(c) * k;
    for (int i = 0; i < s.kh; ++i) {
      int8_t* dst = row + i * runp;
      for (int j = 0; j < s.kw; ++j)
        for (int o = 0; o < s.o; ++o)
          dst[j * s.o + o] = w[((static_cast<ptrdiff_t>(o) * s.kh + (s.kh - 1 - i)) * s.kw + (s.kw - 1 - j)) * s.c + c];
      std::memset(dst + run, 0, runp - run);
    }
  }
  const PaddedSrc src = pad_source(err, s.n, oh, ow, s.o, s.kh - 1 - s.pad, s.kw - 1 - s.pad, s.stride, s.h + s.kh - 1, s.w + s.kw - 1, s.h, s.w,
                                   s.kh, s.kw, 1, &scratch(2));
  if (panels) {
    conv_pixel_panels(src, wt, s.c, dx);
    return;
  }
  int8_t* cols = grow(scratch(0), static_cast<size_t>(m) * k);
  im2col(src, cols);
  gemm(MatrixS8{cols, k, 1}, MatrixS8{wt, k, 1}, m, s.c, k, dx);
}

template <typename T>
void conv2d_bwd_weight(const int8_t* err, const int8_t* x, const ConvShape& s, T* dw) {
  const PaddedSrc src = forward_source(x, s, &scratch(2));
  if (use_wgrad_panels(s)) {
    conv_wgrad_panels(src, err, s.o, dw);
    return;
  }
  // dw^T[KK, O] = cols^T[KK, P] x err^T[O, P]^T: cols is read transposed by the A
  // packing (cache friendly within a K block), err transposed once up front, and the
  // small [KK, O] result transposed at the end.
  const int p = s.n * s.oh() * s.ow(), kk = s.kh * s.kw * s.c;
  int8_t* cols = grow(scratch(0), static_cast<size_t>(p) * kk);
  im2col(src, cols);
  int8_t* err_t = grow(scratch(1), static_cast<size_t>(s.o) * p);
  transpose(err, p, s.o, err_t);
  thread_local std::vector<T> dw_t;
  if (dw_t.size() < static_cast<size_t>(kk) * s.o) dw_t.resize(static_cast<size_t>(kk) * s.o);
  gemm(MatrixS8{cols, 1, kk}, MatrixS8{err_t, p, 1}, kk, s.o, p, dw_t.data());
  transpose(dw_t.data(), kk, s.o, dw);
}

template void conv2d_fwd<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*);
template void conv2d_fwd<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*);
template void conv2d_bwd_data<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*);
template void conv2d_bwd_data<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*);
template void conv2d_bwd_weight<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*);
template void conv2d_bwd_weight<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*);

}  // namespace dsptrain
