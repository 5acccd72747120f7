#include "conv_f32.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "conv_f32_trim.h"
#include "gemm_f32.h"
#include "scratch.h"
#include "thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_F32_AVX512 1
#endif

namespace dsptrain {
namespace {

constexpr size_t kBlockBytes = 128 * 1024;   // a block of patches: well inside L2
constexpr int kDotBelowChannels = 12;        // the dot kernel wins for few output channels
constexpr int kDotFromTaps = 64;             // and deep patches (LeNet conv1 forward, 25 taps: broadcast)
constexpr int kMinBlockRows = 32;            // small images share a block: rows of the product per weight read

struct Geometry {
  const ConvShape& s;
  int oh, ow, pixels, taps;   // taps: KH*KW*C, one patch row
  size_t image, out_image;
  int images_per_block;        // whole images per block of patches when several fit, else 1
  explicit Geometry(const ConvShape& shape)
      : s(shape), oh(shape.oh()), ow(shape.ow()), pixels(oh * ow), taps(shape.kh * shape.kw * shape.c),
        image(static_cast<size_t>(shape.h) * shape.w * shape.c), out_image(static_cast<size_t>(oh) * ow * shape.o) {
    // small images (ResNet-18's layer3 and layer4 on 32x32 input: 2x2 and 1x1 pixels) go
    // several to a block, so that each read of the weights serves at least kMinBlockRows rows
    const int fit = std::max(kMinBlockRows, static_cast<int>(kBlockBytes / (sizeof(float) * taps)));
    images_per_block = std::max(1, std::min(shape.n, fit / std::max(1, pixels)));
  }
  // output pixels per block, so that a block of patches fits kBlockBytes (or holds the
  // images of one block)
  int block() const {
    if (images_per_block > 1) return images_per_block * pixels;
    return std::max(1, std::min(pixels, static_cast<int>(kBlockBytes / (sizeof(float) * taps))));
  }
  int image_blocks() const { return (s.n + images_per_block - 1) / images_per_block; }
  bool direct() const { return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0; }
  double macs() const { return double(s.n) * pixels * taps * s.o; }
};

// A copy of one image with its zero border, so that every tap row of a patch is one
// contiguous run of KW*C floats (the int8 drivers' PaddedSrc does the same).
struct Padded {
  const float* d;
  int wp, c, stride;
  ptrdiff_t at(int i, int j) const { return (static_cast<ptrdiff_t>(i) * wp + j) * c; }
};

Padded pad_image(const float* x, const ConvShape& s, std::vector<float>& buf) {
  if (s.pad == 0) return {x, s.w, s.c, s.stride};
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
  buf.assign(static_cast<size_t>(hp) * wp * s.c, 0.0f);
  for (int i = 0; i < s.h; ++i)
    std::copy_n(x + static_cast<ptrdiff_t>(i) * s.w * s.c, static_cast<size_t>(s.w) * s.c,
                buf.data() + (static_cast<ptrdiff_t>(i + s.pad) * wp + s.pad) * s.c);
  return {buf.data(), wp, s.c, s.stride};
}

// cols[p - p0, taps] = the patches of output pixels [p0, p1). Runs are short (5 floats
// for LeNet's first layer): copied by a plain loop, which GCC must not turn into a
// memcpy call per run (that call cost more than the product), or on AVX-512 by masked
// vector moves.
__attribute__((optimize("no-tree-loop-distribute-patterns")))
void gather_portable(const Padded& x, const Geometry& g, int p0, int p1, float* cols) {
  const int run = g.s.kw * g.s.c;
  for (int p = p0; p < p1; ++p) {
    const int i = p / g.ow, j = p % g.ow;
    float* dst = cols + static_cast<ptrdiff_t>(p - p0) * g.taps;
    for (int a = 0; a < g.s.kh; ++a, dst += run) {
      const float* src = x.d + x.at(i * x.stride + a, j * x.stride);
      for (int t = 0; t < run; ++t) dst[t] = src[t];
    }
  }
}

#ifdef DSPTRAIN_F32_AVX512
__attribute__((target("avx512f"))) void gather_avx512(const Padded& x, const Geometry& g, int p0, int p1, float* cols) {
  const int run = g.s.kw * g.s.c, full = run / 16;
  const __mmask16 tail = __mmask16((1u << (run % 16)) - 1u);
  for (int p = p0; p < p1; ++p) {
    const int i = p / g.ow, j = p % g.ow;
    float* dst = cols + static_cast<ptrdiff_t>(p - p0) * g.taps;
    for (int a = 0; a < g.s.kh; ++a, dst += run) {
      const float* src = x.d + x.at(i * x.stride + a, j * x.stride);
      for (int v = 0; v < full; ++v) _mm512_storeu_ps(dst + 16 * v, _mm512_loadu_ps(src + 16 * v));
      if (tail) _mm512_mask_storeu_ps(dst + 16 * full, tail, _mm512_maskz_loadu_ps(tail, src + 16 * full));
    }
  }
}
#endif

void gather(const Padded& x, const Geometry& g, int p0, int p1, float* cols) {
#ifdef DSPTRAIN_F32_AVX512
  if (f32_avx512()) return gather_avx512(x, g, p0, p1, cols);
#endif
  gather_portable(x, g, p0, p1, cols);
}

// dx (one image) += the patch sums dcols of output pixels [p0, p1), padding dropped.
void scatter(const float* dcols, const Geometry& g, int p0, int p1, float* dx) {
  const ConvShape& s = g.s;
  for (int p = p0; p < p1; ++p) {
    const int i = p / g.ow, j = p % g.ow;
    const float* src = dcols + static_cast<ptrdiff_t>(p - p0) * g.taps;
    for (int a = 0; a < s.kh; ++a) {
      const int y = i * s.stride + a - s.pad;
      if (y < 0 || y >= s.h) continue;
      for (int b = 0; b < s.kw; ++b) {
        const int xx = j * s.stride + b - s.pad;
        if (xx < 0 || xx >= s.w) continue;
        float* d = dx + (static_cast<ptrdiff_t>(y) * s.w + xx) * s.c;
        const float* v = src + (a * s.kw + b) * s.c;
        for (int ch = 0; ch < s.c; ++ch) d[ch] += v[ch];
      }
    }
  }
}

// Over images, on the pool when the product is large enough to pay for waking it.
template <typename F>
void over_images(const Geometry& g, int units, F fn) {
  SerialScope serial(small_op(g.macs()));
  parallel_ranges(units, static_cast<size_t>(g.s.n) * (g.image + g.out_image) * sizeof(float), fn);
}

std::vector<float>& block_buffer(size_t floats) {
  thread_local Kept<std::vector<float>> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf;
}

std::vector<float>& pad_buffer() {
  thread_local Kept<std::vector<float>> buf;
  return buf;
}

// The blocks of patch rows (output pixels counted over the batch, P = n * pixels + p) of
// images [n0, n1): images_per_block whole images at a time when several share a block,
// else each image in blocks of g.block() pixels. fn(P0, P1).
template <typename F>
void blocks_of(const Geometry& g, int n0, int n1, F fn) {
  if (g.images_per_block > 1) {
    for (int n = n0; n < n1; n += g.images_per_block) fn(n * g.pixels, std::min(n1, n + g.images_per_block) * g.pixels);
    return;
  }
  const int block = g.block();
  for (int n = n0; n < n1; ++n)
    for (int p0 = 0; p0 < g.pixels; p0 += block) fn(n * g.pixels + p0, n * g.pixels + std::min(g.pixels, p0 + block));
}

// The padded copy of one image at a time, kept while a thread's blocks stay in it.
struct PaddedImages {
  const float* x;
  const Geometry& g;
  int current = -1;
  Padded padded{};
  const Padded& of(int n) {
    if (n != current) padded = pad_image(x + n * g.image, g.s, pad_buffer()), current = n;
    return padded;
  }
};

// cols[P - P0, taps] = the patches of rows [P0, P1), across image boundaries.
void gather_rows(PaddedImages& images, int P0, int P1, float* cols) {
  const Geometry& g = images.g;
  for (int n = P0 / g.pixels; n * g.pixels < P1; ++n) {
    const int p0 = std::max(P0, n * g.pixels) - n * g.pixels, p1 = std::min(P1, (n + 1) * g.pixels) - n * g.pixels;
    gather(images.of(n), g, p0, p1, cols + static_cast<ptrdiff_t>(n * g.pixels + p0 - P0) * g.taps);
  }
}

// The backward data pass of a stride-1 convolution is the forward convolution of the
// error, padded by K-1-pad, with the flipped weights moved to [C, KH, KW, O]: no scatter
// (square kernels: ConvShape has one padding for both sides). Only for "same" padding:
// with less, the padded error has more pixels than the patches (LeNet's conv2: 196 vs
// 100), and the product plus scatter costs less.
bool bwd_data_as_forward(const ConvShape& s) {
  return s.stride == 1 && s.kh == s.kw && s.pad <= s.kh - 1 && 2 * s.pad >= s.kh - 1;
}

// few output channels and a deep patch: the dot kernel on w as it is ([O, taps] is B as
// [N,K]); else w moved to [taps, O] for the broadcast kernel
bool forward_by_dot(const Geometry& g) { return g.s.o <= kDotBelowChannels && g.taps >= kDotFromTaps; }

// t[cols, rows] = m[rows, cols]^T, in tiles that stay in L1 (a plain loop over a
// 2304 x 256 weight strides through a whole page per element).
void transpose(const float* m, int rows, int cols, float* t) {
  constexpr int kTile = 16;
  for (int r0 = 0; r0 < rows; r0 += kTile)
    for (int c0 = 0; c0 < cols; c0 += kTile)
      for (int r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int c = c0; c < std::min(cols, c0 + kTile); ++c)
          t[static_cast<size_t>(c) * rows + r] = m[static_cast<size_t>(r) * cols + c];
}

// The three passes over every tap of the kernel; the public ones below drop dead taps first.
// `wt`: the weights as [taps, O] when the forward runs the broadcast kernel, else as [O, taps].
void forward_moved(const float* x, const float* wt, const ConvShape& s, float* y) {
  const Geometry g(s);
  const bool dot = forward_by_dot(g);
  const float* b = wt;
  const int ldb = dot ? g.taps : s.o;
  if (g.direct()) {   // x is the patches already: one product over the batch, rows split over the pool
    gemm_f32({x, g.taps, b, ldb, y, s.o, s.n * g.pixels, s.o, g.taps, false, dot});
    return;
  }
  over_images(g, g.image_blocks(), [&](int u0, int u1) {
    PaddedImages images{x, g};
    float* cols = block_buffer(static_cast<size_t>(g.block()) * g.taps).data();
    blocks_of(g, u0 * g.images_per_block, std::min(s.n, u1 * g.images_per_block), [&](int P0, int P1) {
      gather_rows(images, P0, P1, cols);
      gemm_f32_serial({cols, g.taps, b, ldb, y + static_cast<ptrdiff_t>(P0) * s.o, s.o, P1 - P0, s.o, g.taps, false, dot});
    });
  });
}

void forward(const float* x, const float* w, const ConvShape& s, float* y) {
  const Geometry g(s);
  if (forward_by_dot(g)) return forward_moved(x, w, s, y);
  std::vector<float> wt(static_cast<size_t>(g.taps) * s.o);
  transpose(w, s.o, g.taps, wt.data());
  forward_moved(x, wt.data(), s, y);
}

void backward_data(const float* err, const float* w, const ConvShape& s, float* dx) {
  const Geometry g(s);
  if (bwd_data_as_forward(s)) {
    const ConvShape t{s.n, g.oh, g.ow, s.o, s.c, s.kh, s.kw, 1, s.kh - 1 - s.pad};
    std::vector<float> flipped(static_cast<size_t>(g.taps) * s.o);
    if (forward_by_dot(Geometry(t))) {   // [C, KH, KW, O], flipped
      for (int o = 0; o < s.o; ++o)
        for (int a = 0; a < s.kh; ++a)
          for (int b = 0; b < s.kw; ++b)
            for (int c = 0; c < s.c; ++c)
              flipped[((static_cast<size_t>(c) * s.kh + (s.kh - 1 - a)) * s.kw + (s.kw - 1 - b)) * s.o + o] =
                  w[((static_cast<size_t>(o) * s.kh + a) * s.kw + b) * s.c + c];
    } else {   // the broadcast kernel's [KH, KW, O, C], flipped: rows of w as they are
      float* dst = flipped.data();
      for (int a = s.kh - 1; a >= 0; --a)
        for (int b = s.kw - 1; b >= 0; --b)
          for (int o = 0; o < s.o; ++o, dst += s.c)
            std::copy_n(w + ((static_cast<size_t>(o) * s.kh + a) * s.kw + b) * s.c, s.c, dst);
    }
    return forward_moved(err, flipped.data(), t, dx);
  }
  if (g.direct()) {
    gemm_f32({err, s.o, w, g.taps, dx, g.taps, s.n * g.pixels, g.taps, s.o, false});
    return;
  }
  // each thread scatters into whole images of its own
  over_images(g, g.image_blocks(), [&](int u0, int u1) {
    const int n0 = u0 * g.images_per_block, n1 = std::min(s.n, u1 * g.images_per_block);
    std::fill(dx + n0 * g.image, dx + n1 * g.image, 0.0f);
    float* dcols = block_buffer(static_cast<size_t>(g.block()) * g.taps).data();
    blocks_of(g, n0, n1, [&](int P0, int P1) {
      gemm_f32_serial({err + static_cast<ptrdiff_t>(P0) * s.o, s.o, w, g.taps, dcols, g.taps, P1 - P0, g.taps, s.o, false});
      for (int n = P0 / g.pixels; n * g.pixels < P1; ++n) {
        const int p0 = std::max(P0, n * g.pixels) - n * g.pixels, p1 = std::min(P1, (n + 1) * g.pixels) - n * g.pixels;
        scatter(dcols + static_cast<ptrdiff_t>(n * g.pixels + p0 - P0) * g.taps, g, p0, p1, dx + n * g.image);
      }
    });
  });
}

// Small images (several to a block) whose patches of the whole batch fit kBatchBytes: the
// weight gradient as one product, dw[O, taps] = err^T [O, N*pixels] x patches [N*pixels, taps],
// its rows split over the pool. Every element is one thread's sum over the whole batch in
// order, so C is written once (not once per group of images) at any thread count.
constexpr size_t kBatchBytes = 4u << 20;

bool wgrad_in_one_product(const Geometry& g) {
  return g.images_per_block > 1 && !g.direct() &&
         static_cast<size_t>(g.s.n) * g.pixels * (g.taps + g.s.o) * sizeof(float) <= kBatchBytes;
}

void backward_weight_batch(const float* err, const float* x, const Geometry& g, float* dw) {
  const ConvShape& s = g.s;
  const int rows = s.n * g.pixels;
  std::vector<float>& buf = block_buffer(static_cast<size_t>(rows) * (g.taps + s.o));
  float *cols = buf.data(), *err_t = cols + static_cast<size_t>(rows) * g.taps;
  over_images(g, s.n, [&](int n0, int n1) {
    PaddedImages images{x, g};
    gather_rows(images, n0 * g.pixels, n1 * g.pixels, cols + static_cast<size_t>(n0) * g.pixels * g.taps);
  });
  transpose(err, rows, s.o, err_t);
  gemm_f32({err_t, rows, cols, g.taps, dw, g.taps, s.o, g.taps, rows, false});
}

void backward_weight(const float* err, const float* x, const ConvShape& s, float* dw) {
  const Geometry g(s);
  if (wgrad_in_one_product(g)) return backward_weight_batch(err, x, g, dw);
  const size_t dw_size = static_cast<size_t>(s.o) * g.taps;
  // fixed groups of images, each summed on one thread, then the groups added in order
  // (sizes set by the shape alone, so every thread count gives the same floats); small
  // images go in bigger groups, so that each product sums over more rows
  const int per_group = std::max(8, g.images_per_block / 2);
  const int groups = (s.n + per_group - 1) / per_group;
  std::vector<float> partial(groups * dw_size, 0.0f);
  const int block = g.block();
  over_images(g, groups, [&](int q0, int q1) {
    std::vector<float>& buf = block_buffer(static_cast<size_t>(block) * (g.taps + s.o));
    float *cols = buf.data(), *err_t = cols + static_cast<size_t>(block) * g.taps;
    PaddedImages images{x, g};
    for (int q = q0; q < q1; ++q) {
      float* part = partial.data() + q * dw_size;
      const int n_end = std::min(s.n, (q + 1) * per_group);
      blocks_of(g, q * per_group, n_end, [&](int P0, int P1) {
        const int rows = P1 - P0;
        for (int p = 0; p < rows; ++p)   // err^T of the block: A of the GEMM, [O, rows]
          for (int o = 0; o < s.o; ++o) err_t[static_cast<size_t>(o) * rows + p] = err[static_cast<ptrdiff_t>(P0 + p) * s.o + o];
        const float* b = cols;
        if (g.direct()) b = x + static_cast<ptrdiff_t>(P0) * g.taps;
        else gather_rows(images, P0, P1, cols);
        gemm_f32_serial({err_t, rows, b, g.taps, part, g.taps, s.o, g.taps, rows, true});
      });
    }
  });
  std::fill(dw, dw + dw_size, 0.0f);
  for (int q = 0; q < groups; ++q)
    for (size_t i = 0; i < dw_size; ++i) dw[i] += partial[q * dw_size + i];
}

}  // namespace

void conv2d_f32(const float* x, const float* w, const ConvShape& s, float* y) {
  LiveTaps live;
  if (!live_taps(s, &live)) return forward(x, w, s, y);
  forward(x, slice_live_taps(w, s, live).data(), live.s, y);
}

void conv2d_bwd_data_f32(const float* err, const float* w, const ConvShape& s, float* dx) {
  LiveTaps live;
  if (!live_taps(s, &live)) return backward_data(err, w, s, dx);
  backward_data(err, slice_live_taps(w, s, live).data(), live.s, dx);
}

void conv2d_bwd_weight_f32(const float* err, const float* x, const ConvShape& s, float* dw) {
  LiveTaps live;
  if (!live_taps(s, &live)) return backward_weight(err, x, s, dw);
  std::vector<float> dw_live(static_cast<size_t>(s.o) * live.s.kh * live.s.kw * s.c);
  backward_weight(err, x, live.s, dw_live.data());
  place_live_taps(dw_live.data(), s, live, dw);
}

// The sizes block_buffer() and pad_buffer() grow to in each pass, on every pool thread.
ScratchList conv_f32_scratch(ConvPass pass, const ConvShape& s) {
  LiveTaps live;
  if (live_taps(s, &live)) return conv_f32_scratch(pass, live.s);
  if (pass == ConvPass::kBackwardData && bwd_data_as_forward(s)) {
    const ConvShape t{s.n, s.oh(), s.ow(), s.o, s.c, s.kh, s.kw, 1, s.kh - 1 - s.pad};
    return conv_f32_scratch(ConvPass::kForward, t);
  }
  const Geometry g(s);
  if (g.direct() && pass != ConvPass::kBackwardWeight) return {};
  if (pass == ConvPass::kBackwardWeight && wgrad_in_one_product(g))   // on the calling thread
    return {{"conv_f32.batch_patches", static_cast<size_t>(s.n) * g.pixels * (g.taps + s.o) * sizeof(float)}};
  const size_t threads = static_cast<size_t>(pool_threads()), block = static_cast<size_t>(g.block());
  const size_t floats = block * (g.taps + (pass == ConvPass::kBackwardWeight ? s.o : 0));
  ScratchList out{{"conv_f32.patch_block (per thread)", threads * floats * sizeof(float)}};
  if (s.pad > 0 && pass != ConvPass::kBackwardData)
    out.emplace_back("conv_f32.padded_image (per thread)",
                     threads * static_cast<size_t>(s.h + 2 * s.pad) * (s.w + 2 * s.pad) * s.c * sizeof(float));
  return out;
}

}  // namespace dsptrain
