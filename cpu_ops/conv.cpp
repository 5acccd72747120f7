// The convolution drivers: pad (and for the transposed convolution dilate) the source
// once, then pick by shape -- im2col + GEMM for wide layers, pixel panels
// (conv_panels.cpp) when the output channels are few. Scratch buffers are per thread and
// only grow, so steady-state training allocates nothing here.
#include "conv.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "conv_lanes.h"
#include "conv_panels.h"
#include "conv_paths.h"
#include "conv_transpose.h"
#include "conv_trimmed.h"
#include "conv_wgrad_planes.h"
#include "conv_wgrad_stream.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// Fills cols[P, kh*kw*ch] (rows `ld` >= kh*kw*ch bytes apart, zero padded) from the
// padded source: one contiguous run per tap row.
void im2col(const PaddedSrc& s, int8_t* cols, ptrdiff_t ld) {
  const int run = s.run();
  const ptrdiff_t kk = static_cast<ptrdiff_t>(s.kh) * run, rs = s.row_stride();
  parallel_ranges(s.n * s.oh, static_cast<size_t>(s.pixels()) * ld, [&](int row0, int row1) {
    for (int row = row0; row < row1; ++row) {
      const int b = row / s.oh, oy = row % s.oh;
      int8_t* dst = cols + static_cast<ptrdiff_t>(row) * s.ow * ld;
      for (int ox = 0; ox < s.ow; ++ox, dst += ld - kk) {
        const int8_t* src = s.d + s.base(b, oy, ox);
        for (int i = 0; i < s.kh; ++i, dst += run) std::memcpy(dst, src + i * rs, run);
        if (ld > kk) std::memset(dst, 0, ld - kk);
      }
    }
  });
}

// i.e. per tap a [O, C] -> [C, O] transpose, in blocks (a plain loop over it reads w
// with a stride of kh*kw*C bytes: 10 ms for a 512x512 3x3 layer).
void flipped_transposed_weights(const int8_t* w, const ConvShape& s, int runp, int8_t* wt) {
  const int run = s.kw * s.o, k = s.kh * runp;
  const ptrdiff_t w_ld = static_cast<ptrdiff_t>(s.kh) * s.kw * s.c;
  parallel_ranges(s.kh * s.kw, static_cast<size_t>(s.o) * s.c * s.kh * s.kw, [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t) {
      const int i = t / s.kw, j = t % s.kw, src_tap = (s.kh - 1 - i) * s.kw + (s.kw - 1 - j);
      transpose_block(w + static_cast<ptrdiff_t>(src_tap) * s.c, w_ld, s.o, s.c, wt + i * runp + j * s.o, k);
    }
  });
  if (runp != run)
    for (int r = 0; r < s.c * s.kh; ++r) std::memset(wt + static_cast<ptrdiff_t>(r) * runp + run, 0, runp - run);
}

// `absmax`, `fused`: as gemm_packed's for int32 (the int64 path leaves them as they were).
template <typename T>
void gemm(MatrixS8 a, MatrixS8 b, int m, int n, int k, T* c, bool a_padded = false, int64_t* absmax = nullptr,
          FusedRequant* fused = nullptr) {
  if constexpr (std::is_same_v<T, int32_t>) {
    gemm_s8_s32(a, b, m, n, k, c, a_padded, absmax, fused);
  } else {
    gemm_s8_s64(a, b, m, n, k, c);
  }
}

std::vector<int8_t>& scratch(int which) {
  thread_local Kept<std::vector<int8_t>> buffers[3];
  return buffers[which];
}

int8_t* grow(std::vector<int8_t>& v, size_t bytes) {
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

// Rows of the transposed convolution's weights w'[c, (i, j, o)] = w[o, kh-1-i, kw-1-j, c],
// taken along c: depth kk = (i * kw + j) * O + o starts at w[o, kh-1-i, kw-1-j, 0].
struct FlippedTaps {
  const int8_t* w;
  const ConvShape& s;
  static const int8_t* row(const void* ctx, int kk, int /*seg*/) {
    const FlippedTaps& t = *static_cast<const FlippedTaps*>(ctx);
    const int tap = kk / t.s.o, o = kk % t.s.o, i = tap / t.s.kw, j = tap % t.s.kw;
    return t.w + ((static_cast<ptrdiff_t>(o) * t.s.kh + (t.s.kh - 1 - i)) * t.s.kw + (t.s.kw - 1 - j)) * t.s.c;
  }
};

// Where output pixel p's patch starts in the padded source (its first tap row).
ptrdiff_t pixel_base(const PaddedSrc& s, int p) {
  const int per_image = s.oh * s.ow, b = p / per_image, oy = p % per_image / s.ow, ox = p % s.ow;
  return s.base(b, oy, ox);
}

// Tap row `seg` of output pixel kk's patch in the padded source: the pieces pack_b_k_rows
// reads the weight gradient's B from.
struct PatchRows {
  const PaddedSrc& s;
  static const int8_t* row(const void* ctx, int kk, int seg) {
    const PaddedSrc& s = static_cast<const PatchRows*>(ctx)->s;
    return s.d + pixel_base(s, kk) + seg * s.row_stride();
  }
};

// The patches of a biased padded source as gemm_rows' A: each pixel's kh tap rows, read
// in place (the implicit GEMM).
ptrdiff_t patch_base(const void* ctx, int p) { return pixel_base(*static_cast<const PaddedSrc*>(ctx), p); }
BiasedRows patch_rows(const PaddedSrc& src) {
  return BiasedRows{reinterpret_cast<const uint8_t*>(src.d), src.kh, src.run(), src.row_stride(), patch_base, &src};
}

// Plain rows `*ctx` bytes apart, as gemm_rows' A.
ptrdiff_t plain_row_base(const void* ctx, int row) { return row * *static_cast<const ptrdiff_t*>(ctx); }

// The patch matrix of `src` (m rows, depth k) in scratch(0), laid out so that the GEMM
// reads it in place where its kernel can (gemm_packed's a_padded): rows a_row_bytes
// apart, zero padded, zero rows up to a_rows.
MatrixS8 patches(const PaddedSrc& src, int m, int k) {
  const ptrdiff_t ld = a_row_bytes(active_isa(), k), rows = a_rows(active_isa(), m);
  int8_t* cols = grow(scratch(0), static_cast<size_t>(rows) * ld);
  im2col(src, cols, ld);
  std::memset(cols + m * ld, 0, static_cast<size_t>(rows - m) * ld);
  return MatrixS8{cols, ld, 1};
}

// w[o, i, j, c] -> dst[o, i, run_pad(kw*c)] with zero padding after each tap row.
void weights_in_runs(const int8_t* w, int o, int kh, int run, int8_t* dst) {
  const int runp = run_pad(run);
  for (int r = 0; r < o * kh; ++r) {
    std::memcpy(dst + static_cast<ptrdiff_t>(r) * runp, w + static_cast<ptrdiff_t>(r) * run, run);
    std::memset(dst + static_cast<ptrdiff_t>(r) * runp + run, 0, runp - run);
  }
}

PaddedSrc forward_source(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf, uint8_t bias = 0) {
  return pad_source(x, s.n, s.h, s.w, s.c, s.pad, s.pad, 1, s.h + 2 * s.pad, s.w + 2 * s.pad, s.oh(), s.ow(), s.kh, s.kw,
                    s.stride, buf, bias);
}

// x's pixels under the output pixels of a strided 1x1 convolution as a GEMM's [P, C] rows,
// in place: ow of them s * C bytes apart, then the next output row s image rows on.
MatrixS8 strided_pixels(const int8_t* x, const ConvShape& s) {
  MatrixS8 a{x, static_cast<ptrdiff_t>(s.stride) * s.c, 1};
  a.group_rows = s.ow();
  a.image_rows = s.oh() * s.ow();
  a.group_stride = static_cast<ptrdiff_t>(s.stride) * s.w * s.c;
  a.image_stride = static_cast<ptrdiff_t>(s.h) * s.w * s.c;
  return a;
}

// Pixel kk of the strided pixels as pack_b_k_rows' depth row (the weight gradient's B).
struct StridedPixelRows {
  MatrixS8 pixels;
  static const int8_t* row(const void* ctx, int kk, int /*seg*/) {
    return static_cast<const StridedPixelRows*>(ctx)->pixels.row(kk);
  }
};

constexpr size_t kPaddedSlack = 64;  // readable bytes after the padded source, as pad_source's

// x[n, h, w, 3] padded and widened to [n, hp, wp, 4], every byte XOR 0x80 (the fourth
// channel and the border hold the biased zero), for gemm_rows.
PaddedSrc widened_source(const int8_t* x, const ConvShape& s, std::vector<int8_t>* buf) {
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad, c = kWideChannels;
  const size_t row = static_cast<size_t>(wp) * c, image = row * hp;
  if (buf->size() < image * s.n + kPaddedSlack) buf->resize(image * s.n + kPaddedSlack);
  int8_t* d = buf->data();
  std::memset(d + image * s.n, 0, kPaddedSlack);
  parallel_ranges(s.n * hp, image * s.n, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      int8_t* out = d + static_cast<size_t>(r) * row;
      std::memset(out, 0x80, row);
      const int y = r % hp - s.pad;
      if (y < 0 || y >= s.h) continue;
      const int8_t* in = x + (static_cast<size_t>(r / hp) * s.h + y) * s.w * s.c;
      for (int i = 0; i < s.w; ++i)
        for (int ch = 0; ch < s.c; ++ch) out[(i + s.pad) * c + ch] = static_cast<int8_t>(in[i * s.c + ch] ^ 0x80);
    }
  });
  return PaddedSrc{d, s.n, hp, wp, c, s.oh(), s.ow(), s.kh, s.kw, s.stride};
}

}  // namespace

template <typename T>
void conv2d_fwd(const int8_t* x, const int8_t* w, const ConvShape& s, T* y, int64_t* absmax, FusedRequant* fused) {
  if (absmax) *absmax = -1;
  const int oh = s.oh(), ow = s.ow(), k = s.kh * s.kw * s.c, m = s.n * oh * ow;
  if (is_1x1(s)) {
    gemm(MatrixS8{x, k, 1}, MatrixS8{w, k, 1}, m, s.o, k, y, false, absmax, fused);
    return;
  }
  if (is_1x1_strided(s)) {   // the GEMM's A rows are the strided pixels, read in place by the A packing
    gemm(strided_pixels(x, s), MatrixS8{w, k, 1}, m, s.o, k, y, false, absmax, fused);
    return;
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (fwd_implicit(s)) {
      const PaddedSrc src = forward_source(x, s, &scratch(2), 0x80);
      thread_local Kept<PackedB> packed;
      pack_b(MatrixS8{w, k, 1}, s.o, k, active_isa(), &packed);
      if (fwd_trimmed(s)) gemm_rows_trimmed(src, fwd_window(s), packed, y, absmax, fused);
      else gemm_rows(patch_rows(src), m, packed, y, s.o, absmax, fused);
      return;
    }
    if (fwd_implicit_c4(s)) {
      const PaddedSrc src = widened_source(x, s, &scratch(2));
      const int k4 = s.kh * s.kw * kWideChannels;
      int8_t* w4 = grow(scratch(1), static_cast<size_t>(s.o) * k4);
      weights_in_runs(w, s.o, s.kh * s.kw, s.c, w4);   // each tap's 3 channels in a 4-byte run, the 4th zero
      thread_local Kept<PackedB> packed;
      pack_b(MatrixS8{w4, k4, 1}, s.o, k4, active_isa(), &packed);
      gemm_rows(patch_rows(src), m, packed, y, s.o, absmax, fused);
      return;
    }
  }
  const bool lanes = std::is_same_v<T, int32_t> && fwd_panels(s) && fwd_lanes(s);
  const PaddedSrc src = forward_source(x, s, &scratch(2), lanes && lanes_biased(s.c, s.kw, s.o) ? 0x80 : 0);
  if (fwd_panels(s)) {
    const int run = s.kw * s.c;
    int8_t* w_runs = grow(scratch(1), static_cast<size_t>(s.o) * s.kh * run_pad(run));
    weights_in_runs(w, s.o, s.kh, run, w_runs);
    if constexpr (std::is_same_v<T, int32_t>) {
      if (lanes) {
        conv_lanes(src, w_runs, s.o, s.pad, s.pad + s.h, y, absmax, fused);   // padded rows [pad, pad + h) hold x
        return;
      }
    }
    conv_pixel_panels(src, w_runs, s.o, y);
    return;
  }
  gemm(patches(src, m, k), MatrixS8{w, k, 1}, m, s.o, k, y, true, absmax, fused);
}

template <typename T>
void conv2d_bwd_data(const int8_t* err, const int8_t* w, const ConvShape& s, T* dx, int64_t* absmax,
                     FusedRequant* fused) {
  if (absmax) *absmax = -1;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (bwd_broadcast(s)) {   // conv_lanes.cpp: the error broadcast into dx rows
      conv_bwd_broadcast(err, w, s, dx, absmax, fused);
      return;
    }
  }
  if (is_1x1(s)) {   // dx[pixels, C] = err[pixels, O] @ w[O, C]: err read in place, w as its transpose's panels
    gemm(MatrixS8{err, s.o, 1}, MatrixS8{w, 1, s.c}, s.n * s.h * s.w, s.c, s.o, dx, false, absmax, fused);
    return;
  }
  if (is_1x1_strided(s)) {
    // dx is zero but at the strided pixels, which get err[P, O] @ w[O, C]: the GEMM runs on
    // the P = n*oh*ow error rows alone (a quarter of the dilated error's at stride 2), into
    // a [P, C] scratch whose rows then land s * C apart in the zeroed dx.
    const int p = s.n * s.oh() * s.ow();
    const size_t row_bytes = static_cast<size_t>(s.c) * sizeof(T);
    T* rows = reinterpret_cast<T*>(grow(scratch(0), static_cast<size_t>(p) * row_bytes));
    gemm(MatrixS8{err, s.o, 1}, MatrixS8{w, 1, s.c}, p, s.c, s.o, rows, false, absmax, nullptr);
    const int oh = s.oh(), ow = s.ow();
    parallel_ranges(s.n * s.h, static_cast<size_t>(s.n) * s.h * s.w * row_bytes, [&](int r0, int r1) {
      for (int r = r0; r < r1; ++r) {   // image row r of dx
        T* out = dx + static_cast<ptrdiff_t>(r) * s.w * s.c;
        std::memset(out, 0, static_cast<size_t>(s.w) * row_bytes);
        const int y = r % s.h;
        if (y % s.stride != 0 || y / s.stride >= oh) continue;
        const T* in = rows + (static_cast<ptrdiff_t>(r / s.h) * oh + y / s.stride) * ow * s.c;
        for (int ox = 0; ox < ow; ++ox)
          std::memcpy(out + static_cast<ptrdiff_t>(ox) * s.stride * s.c, in + static_cast<ptrdiff_t>(ox) * s.c, row_bytes);
      }
    });
    return;
  }
  // A stride-1 convolution of the zero-dilated, padded error with the flipped,
  // transposed kernel w'[c, i, j, o] = w[o, kh-1-i, kw-1-j, c].
  const int oh = s.oh(), ow = s.ow(), run = s.kw * s.o, m = s.n * s.h * s.w;
  const bool panels = bwd_data_panels(s);
  const int runp = panels ? run_pad(run) : run, k = s.kh * runp;
  const bool implicit = std::is_same_v<T, int32_t> && bwd_data_implicit(s);
  const bool lanes = std::is_same_v<T, int32_t> && panels && bwd_data_lanes(s);
  const bool biased = implicit || (lanes && lanes_biased(s.o, s.kw, s.c));
  const PaddedSrc src = pad_source(err, s.n, oh, ow, s.o, s.kh - 1 - s.pad, s.kw - 1 - s.pad, s.stride, s.h + s.kh - 1, s.w + s.kw - 1, s.h, s.w,
                                   s.kh, s.kw, 1, &scratch(2), biased ? 0x80 : 0);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (bwd_data_packs_w(s, panels)) {
      // The GEMM's B straight from w: depth kk = (i, j, o) of w' is w[o, kh-1-i, kw-1-j, :],
      // a contiguous row over c, so pack_b_k_rows interleaves it with no transposed copy.
      thread_local Kept<PackedB> packed;
      const FlippedTaps taps{w, s};
      pack_b_k_rows(s.c, k, active_isa(), FlippedTaps::row, &taps, &packed);
      if (implicit && bwd_data_trimmed(s)) gemm_rows_trimmed(src, bwd_data_window(s), packed, dx, absmax, fused);
      else if (implicit) gemm_rows(patch_rows(src), m, packed, dx, s.c, absmax, fused);
      else gemm_packed(patches(src, m, k), m, packed, dx, s.c, true, absmax, fused);
      return;
    }
  }
  int8_t* wt = grow(scratch(1), static_cast<size_t>(s.c) * k);
  flipped_transposed_weights(w, s, runp, wt);
  if (panels) {
    if constexpr (std::is_same_v<T, int32_t>) {
      if (lanes) {   // padded rows of the error: kh-1-pad + stride * (0 .. oh-1)
        const int first = s.kh - 1 - s.pad;
        conv_lanes(src, wt, s.c, first, first + (oh - 1) * s.stride + 1, dx, absmax, fused);
        return;
      }
    }
    conv_pixel_panels(src, wt, s.c, dx);
    return;
  }
  gemm(patches(src, m, k), MatrixS8{wt, k, 1}, m, s.c, k, dx, true, absmax, fused);
}

template <typename T>
void conv2d_bwd_weight(const int8_t* err, const int8_t* x, const ConvShape& s, T* dw) {
  const WgradPath path = wgrad_path(s);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (path == WgradPath::kStrided1x1) {   // dw[O, C] = err^T[O, P] @ pixels[P, C], B packed from x in place
      const int p = s.n * s.oh() * s.ow();
      int8_t* err_t = grow(scratch(1), static_cast<size_t>(s.o) * p);
      transpose(err, p, s.o, err_t, 0, p);
      thread_local Kept<PackedB> packed;
      const StridedPixelRows rows{strided_pixels(x, s)};
      pack_b_k_rows(s.c, p, active_isa(), StridedPixelRows::row, &rows, &packed);
      gemm_packed(MatrixS8{err_t, p, 1}, s.o, packed, dw, s.c);
      return;
    }
    if (path == WgradPath::kPlanes) {   // conv_wgrad_planes.cpp: few source channels, taps as the GEMM's rows
      conv_wgrad_planes(x, err, s, dw);
      return;
    }
  }
  const PaddedSrc src = forward_source(x, s, &scratch(2));
  if constexpr (std::is_same_v<T, int32_t>) {
    if (path == WgradPath::kLanes) {
      conv_wgrad_lanes(src, err, s.o, dw);
      return;
    }
    if (path == WgradPath::kOutputLanes) {
      conv_wgrad_olanes(src, err, s.o, dw);
      return;
    }
  }
  if (path == WgradPath::kPanels) {
    conv_wgrad_panels(src, err, s.o, dw);
    return;
  }
  // dw[O, KK] = err^T[O, P] x patches[P, KK]: err transposed once up front (the A rows),
  // the patches a k-major B, interleaved four pixels at a time; the result is already in
  // dw's layout. With int32 accumulators the patches are packed straight from the padded
  // source (each pixel's kh tap rows are the pieces of its depth row: no im2col).
  // Where the kernel reads A in place, err^T is stored biased (a + 128) and read as rows
  // by gemm_rows (no A packing), kWgradRowSlack bytes after it for the last row's group.
  // The trimmed stream reads err^T position by position (transpose_by_position), biased and in place.
  const int p = s.n * s.oh() * s.ow(), kk = s.kh * s.kw * s.c;
  const bool trimmed = path == WgradPath::kStreamTrimmed;   // int32 only (wgrad_path)
  const bool rows_a = trimmed || (std::is_same_v<T, int32_t> && wgrad_packs_source(s) && reads_a_in_place(p));
  const ptrdiff_t ld = rows_a ? wgrad_row_stride(p) : p;
  int8_t* err_t = grow(scratch(1), static_cast<size_t>(s.o) * ld + kWgradRowSlack);
  if (trimmed) transpose_by_position(err, s.n, s.oh() * s.ow(), s.o, err_t, ld, 0x80);
  else transpose(err, p, s.o, err_t, rows_a ? 0x80 : 0, ld);
  if constexpr (std::is_same_v<T, int32_t>) {
    if (trimmed) {
      const SourceWindow window = fwd_window(s);
      conv_wgrad_stream(src, reinterpret_cast<const uint8_t*>(err_t), ld, s.o, dw, &window);
      return;
    }
    if (path == WgradPath::kStream) {   // conv_wgrad_stream.cpp: B packed panel by panel as it is used (rows_a holds)
      conv_wgrad_stream(src, reinterpret_cast<const uint8_t*>(err_t), ld, s.o, dw);
      return;
    }
    if (wgrad_packs_source(s)) {
      thread_local Kept<PackedB> packed;
      const PatchRows rows{src};
      pack_b_k_rows(kk, p, active_isa(), PatchRows::row, &rows, &packed, s.kh);
      if (rows_a) {
        gemm_rows(BiasedRows{reinterpret_cast<const uint8_t*>(err_t), 1, p, 0, plain_row_base, &ld}, s.o, packed, dw, kk);
      } else {
        gemm_packed(MatrixS8{err_t, p, 1}, s.o, packed, dw, kk);
      }
      return;
    }
  }
  int8_t* cols = grow(scratch(0), static_cast<size_t>(p) * kk);
  im2col(src, cols, kk);
  gemm(MatrixS8{err_t, p, 1}, MatrixS8{cols, 1, kk}, s.o, kk, p, dw);
}

template void conv2d_fwd<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*, FusedRequant*);
template void conv2d_fwd<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*, int64_t*, FusedRequant*);
template void conv2d_bwd_data<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*,
                                       FusedRequant*);
template void conv2d_bwd_data<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*, int64_t*,
                                       FusedRequant*);
template void conv2d_bwd_weight<int32_t>(const int8_t*, const int8_t*, const ConvShape&, int32_t*);
template void conv2d_bwd_weight<int64_t>(const int8_t*, const int8_t*, const ConvShape&, int64_t*);

}  // namespace dsptrain
