// im2col + GEMM convolutions. The patch matrix lives in a per-thread scratch buffer
// that only grows, so steady-state training allocates nothing here.
#include "conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Where the patches come from: output pixel (oy, ox), tap (i, j) reads source pixel
// ((oy*step - pad + i) / dilation, ...) when that division is exact and in range, else 0.
// Forward conv: step = stride, dilation 1. Transposed conv: step 1, dilation = stride.
struct PatchGeom {
  int n, src_h, src_w, ch;  // source tensor [n, src_h, src_w, ch]
  int out_h, out_w, kh, kw;
  int step, pad, dilation;
};

// Fills cols[n*out_h*out_w, kh*kw*ch].
void im2col(const int8_t* src, const PatchGeom& g, int8_t* cols) {
  const ptrdiff_t kk = static_cast<ptrdiff_t>(g.kh) * g.kw * g.ch;
  parallel_for(g.n * g.out_h, [&](int row) {
    const int b = row / g.out_h, oy = row % g.out_h;
    for (int ox = 0; ox < g.out_w; ++ox) {
      int8_t* dst = cols + (static_cast<ptrdiff_t>(row) * g.out_w + ox) * kk;
      for (int i = 0; i < g.kh; ++i) {
        const int sy_num = oy * g.step - g.pad + i;
        const int sy = sy_num / g.dilation;
        const bool row_ok = sy_num >= 0 && sy_num % g.dilation == 0 && sy < g.src_h;
        for (int j = 0; j < g.kw; ++j, dst += g.ch) {
          const int sx_num = ox * g.step - g.pad + j;
          const int sx = sx_num / g.dilation;
          if (row_ok && sx_num >= 0 && sx_num % g.dilation == 0 && sx < g.src_w) {
            std::memcpy(dst, src + ((static_cast<ptrdiff_t>(b) * g.src_h + sy) * g.src_w + sx) * g.ch, g.ch);
          } else {
            std::memset(dst, 0, g.ch);
          }
        }
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
  thread_local std::vector<int8_t> buffers[2];
  return buffers[which];
}

int8_t* grow(std::vector<int8_t>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

}  // namespace

template <typename T>
void conv2d_fwd(const int8_t* x, const int8_t* w, const ConvShape& s, T* y) {
  const int oh = s.oh(), ow = s.ow(), k = s.kh * s.kw * s.c, m = s.n * oh * ow;
  const int8_t* a = x;
  if (!(s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0)) {
    int8_t* cols = grow(scratch(0), static_cast<size_t>(m) * k);
    im2col(x, PatchGeom{s.n, s.h, s.w, s.c, oh, ow, s.kh, s.kw, s.stride, s.pad, 1}, cols);
    a = cols;
  }
  gemm(MatrixS8{a, k, 1}, MatrixS8{w, k, 1}, m, s.o, k, y);
}

template <typename T>
void conv2d_bwd_data(const int8_t* err, const int8_t* w, const ConvShape& s, T* dx) {
  const int oh = s.oh(), ow = s.ow(), k = s.kh * s.kw * s.o, m = s.n * s.h * s.w;
  // w'[c, i, j, o] = w[o, kh-1-i, kw-1-j, c]: the flipped, transposed kernel.
  int8_t* wt = grow(scratch(1), static_cast<size_t>(s.c) * k);
  for (int o = 0; o < s.o; ++o)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j)
        for (int c = 0; c < s.c; ++c)
          wt[((static_cast<ptrdiff_t>(c) * s.kh + (s.kh - 1 - i)) * s.kw + (s.kw - 1 - j)) * s.o + o] =
              w[((static_cast<ptrdiff_t>(o) * s.kh + i) * s.kw + j) * s.c + c];
  int8_t* cols = grow(scratch(0), static_cast<size_t>(m) * k);
  im2col(err, PatchGeom{s.n, oh, ow, s.o, s.h, s.w, s.kh, s.kw, 1, s.kh - 1 - s.pad, s.stride}, cols);
  gemm(MatrixS8{cols, k, 1}, MatrixS8{wt, k, 1}, m, s.c, k, dx);
}

template <typename T>
void conv2d_bwd_weight(const int8_t* err, const int8_t* x, const ConvShape& s, T* dw) {
  // dw^T[KK, O] = cols^T[KK, P] x err^T[O, P]^T: cols is read transposed by the A
  // packing (cache friendly within a K block), err transposed once up front, and the
  // small [KK, O] result transposed at the end.
  const int oh = s.oh(), ow = s.ow(), p = s.n * oh * ow, kk = s.kh * s.kw * s.c;
  int8_t* cols = grow(scratch(0), static_cast<size_t>(p) * kk);
  im2col(x, PatchGeom{s.n, s.h, s.w, s.c, oh, ow, s.kh, s.kw, s.stride, s.pad, 1}, cols);
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
