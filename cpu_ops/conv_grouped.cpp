// Grouped convolutions group by group in one call (conv_grouped.h): the tensor is framed in
// zeros once (as a dense conv's padding pass copies it), each group's patches are gathered from
// its channels of that frame into the GEMM's A, and its product lands in its output channels in
// place (the GEMM's C rows O apart); a 1x1 group reads its A rows in place. bench/bench_grouped.py
// measured the alternatives: one dense product on the block-diagonal weight costs groups x the
// MACs (1.6-4.2x slower on its shapes); the per-group products composed in Python
// (backends/grouped_hooks.py, still the DSP's route) spent up to 2/3 of the time in the channel
// split, the join and the calls' own costs (16x16x64 3x3 groups 8 stride 2 at batch 32: 8.1 ms
// for 3.3 ms of products), and a native call over the dense conv per group (slice copied,
// conv.cpp's paths, result scattered) still copied each operand four times (2.99 ms against
// 1.4 for that shape's backward data, 0.94 against 0.68 for its forward). Groups of few outputs
// on AVX2 leave the GEMM for the lane kernels (conv_grouped_direct.cpp), which pack nothing.
#include "conv_grouped.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "conv_grouped_direct.h"
#include "conv_transpose.h"
#include "gemm.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// n bytes, inlined for the few-channel runs a group's tap is (libc's memcpy costs more than
// an 8-byte run at one call per tap).
inline void copy_run(int8_t* dst, const int8_t* src, int n) {
  if (n >= 64) {
    std::memcpy(dst, src, n);
    return;
  }
  int i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(dst + i, src + i, 8);
  for (; i < n; ++i) dst[i] = src[i];
}

// The scratch: the framed source (1), on the calling thread; per thread, as a group runs on
// one, its patches (0), its other operand (2: flipped taps or err^T) and the int64 products'
// result.
std::vector<int8_t>& operand(int which) {
  thread_local Kept<std::vector<int8_t>> buffers[3];
  return buffers[which];
}
std::vector<int64_t>& wide_result() {
  thread_local Kept<std::vector<int64_t>> buffer;
  return buffer;
}

// One group's patch matrix, in its thread's scratch: rows [0, m) `ld` bytes apart, each `k`
// bytes then zeros, rows [m, rows) zeros (the layout gemm_packed reads in place where its
// kernel can: a_padded). A group's patches are made by the task that multiplies them, while
// they are in its cache, and only a thread's worth is kept (all groups' at once were the size
// of a dense conv's im2col, and no faster).
struct Patches {
  int8_t* d;
  ptrdiff_t ld;
  int m, k;
  MatrixS8 a() const { return MatrixS8{d, ld, 1}; }
  // the same as a K-major B (the weight gradient's): element (kk, pixel) at pixel * ld + kk
  MatrixS8 k_major() const { return MatrixS8{d, 1, ld}; }
};

Patches patch_buffer(int m, int k) {
  const ptrdiff_t ld = a_row_bytes(active_isa(), k), rows = a_rows(active_isa(), m);
  int8_t* d = grow_exact(operand(0), static_cast<size_t>(rows) * ld);
  std::memset(d + m * ld, 0, static_cast<size_t>(rows - m) * ld);
  if (ld > k)
    for (int r = 0; r < m; ++r) std::memset(d + r * ld + k, 0, ld - k);
  return Patches{d, ld, m, k};
}

// A source framed in zeros so every tap of every patch is in range (fill_frame, conv_grouped.h).
struct Frame {
  const int8_t* d;
  int hp, wp, c;
  ptrdiff_t pixel(int b, int y, int x) const { return ((static_cast<ptrdiff_t>(b) * hp + y) * wp + x) * c; }
};

Frame frame(const int8_t* src, int n, int h, int w, int c, int top, int left, int step, int hp, int wp) {
  int8_t* d = grow_exact(operand(1), static_cast<size_t>(n) * hp * wp * c);
  fill_frame(d, src, n, h, w, c, c, top, left, step, hp, wp,
             [c](int8_t* to, const int8_t* from) { std::memcpy(to, from, c); });
  return Frame{d, hp, wp, c};
}

// A group's patches of a framed source, a 'valid' conv over it: output pixel (oy, ox) of `oh` x
// `ow` (stride `step`) reads tap t at frame pixel (oy*step, ox*step) + taps[t], its channels
// [first, first + run) going to depth t * run.
template <int kRun>  // the run's bytes when fixed (0: `run`), so the copies inline as one or two moves
void patches_of(const Frame& f, int n, int oh, int ow, int step, const std::vector<ptrdiff_t>& taps, int first, int run,
                const Patches& out) {
  if (kRun) run = kRun;
  const int ntaps = static_cast<int>(taps.size());
  parallel_ranges(n * oh, static_cast<size_t>(out.m) * ntaps * run, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const int b = r / oh, oy = r % oh;
      int8_t* dst = out.d + static_cast<ptrdiff_t>(r) * ow * out.ld;
      for (int ox = 0; ox < ow; ++ox, dst += out.ld) {
        const int8_t* base = f.d + f.pixel(b, oy * step, ox * step) + first;
        for (int t = 0; t < ntaps; ++t) {
          if constexpr (kRun > 0) std::memcpy(dst + t * kRun, base + taps[t], kRun);
          else copy_run(dst + t * run, base + taps[t], run);
        }
      }
    }
  });
}

Patches group_patches(const Frame& f, int n, int oh, int ow, int step, const std::vector<ptrdiff_t>& taps, int group,
                      int run) {
  const Patches out = patch_buffer(n * oh * ow, static_cast<int>(taps.size()) * run);
  const int first = group * run;
  switch (run) {
    case 4: patches_of<4>(f, n, oh, ow, step, taps, first, run, out); break;
    case 8: patches_of<8>(f, n, oh, ow, step, taps, first, run, out); break;
    case 16: patches_of<16>(f, n, oh, ow, step, taps, first, run, out); break;
    case 32: patches_of<32>(f, n, oh, ow, step, taps, first, run, out); break;
    default: patches_of<0>(f, n, oh, ow, step, taps, first, run, out);
  }
  return out;
}

// A kh x kw kernel's taps `d` apart in the frame, as offsets from a patch's first.
std::vector<ptrdiff_t> kernel_taps(const Frame& f, int kh, int kw, int d) {
  std::vector<ptrdiff_t> taps;
  for (int i = 0; i < kh; ++i)
    for (int j = 0; j < kw; ++j) taps.push_back(f.pixel(0, i * d, j * d));
  return taps;
}

// x framed by its padding, and its kernel's taps there: group g's patches of it are
// layout.gemm_patches of the group's slice.
struct Framed {
  Frame f;
  std::vector<ptrdiff_t> taps;
};

Framed forward_frame(const int8_t* x, const GroupedConv& g) {
  const ConvShape& s = g.s;
  const Frame f = frame(x, s.n, s.h, s.w, s.c, s.pad, s.pad, 1, s.h + 2 * s.pad, s.w + 2 * s.pad);
  return Framed{f, kernel_taps(f, s.kh, s.kw, g.dilation)};
}

// err spread `stride` apart in a frame of (kh-1)*d - pad zeros: backward data's patches, one row
// per input pixel, are a stride-1 'valid' conv over it (layout.gemm_transposed of each group's
// slice; the taps flipped in the weights).
Framed transposed_frame(const int8_t* err, const GroupedConv& g) {
  const ConvShape& s = g.s;
  const int d = g.dilation, top = (s.kh - 1) * d - s.pad, left = (s.kw - 1) * d - s.pad;
  const Frame f = frame(err, s.n, g.oh(), g.ow(), s.o, top, left, s.stride, s.h + (s.kh - 1) * d, s.w + (s.kw - 1) * d);
  return Framed{f, kernel_taps(f, s.kh, s.kw, d)};
}

// Backward data's B for a group's weight w[og, kh, kw, cg]: wt[c, (i, j, o)] =
// w[o, kh-1-i, kw-1-j, c] (layout.flipped_taps).
void flipped_taps(const int8_t* w, int og, int kh, int kw, int cg, int8_t* wt) {
  const ptrdiff_t depth = static_cast<ptrdiff_t>(kh) * kw * og;
  for (int o = 0; o < og; ++o)
    for (int i = 0; i < kh; ++i)
      for (int j = 0; j < kw; ++j) {
        const int8_t* src = w + ((static_cast<ptrdiff_t>(o) * kh + (kh - 1 - i)) * kw + (kw - 1 - j)) * cg;
        const ptrdiff_t col = (static_cast<ptrdiff_t>(i) * kw + j) * og + o;
        for (int c = 0; c < cg; ++c) wt[c * depth + col] = src[c];
      }
}

// c[m, n] (rows ldc apart) = a[m, k] @ b[n, k]^T. int32: the packed GEMM writing C in place;
// int64 (depths past int32's exact range): into scratch, then its rows copied. No max |c| on
// the way: a group's tiles are a few columns wide, and one pass over the whole result
// (requantize's) is faster than the tiles' (16x16x64 3x3, 8 groups, stride 2: 0.5 ms more).
template <typename T>
void product(MatrixS8 a, bool a_padded, MatrixS8 b, int m, int n, int k, T* c, ptrdiff_t ldc) {
  if constexpr (std::is_same_v<T, int32_t>) {
    thread_local Kept<PackedB> packed;
    pack_b(b, n, k, active_isa(), &packed);
    gemm_packed(a, m, packed, c, ldc, a_padded);
  } else {
    int64_t* rows = grow_exact(wide_result(), static_cast<size_t>(m) * n);
    gemm_s8_s64(a, b, m, n, k, rows);
    for (int r = 0; r < m; ++r) std::memcpy(c + r * ldc, rows + static_cast<ptrdiff_t>(r) * n, n * sizeof(T));
  }
}

// A 1x1 stride-1 unpadded group: its A rows are the tensor's pixels, read in place.
bool plain_1x1(const ConvShape& s) { return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0; }

// Strided backward data by residue classes (sub-pixel / polyphase decomposition of the
// transposed conv, as in Shi et al. 2016, "Real-time single image and video super-resolution
// using an efficient sub-pixel CNN"): input row y meets tap i only where y + pad - i*d is a
// multiple of the stride, so the rows of one class y = r (mod stride) share their taps, and
// each class is a GEMM over those taps alone. The spread error's zeros are never multiplied:
// at stride 2 a 3x3 kernel's classes have 4, 2, 2 and 1 taps (9 of 36 patch taps). Each class's
// GEMM has its pixels as the rows: with the weights as A and the pixels as B's panels instead
// (C transposed back), 16x16x64 groups 8 took 1.65-1.71 ms against 1.39 (batch 32, one thread).

// The residue classes (ry, rx) of dx's pixels, the largest product (pixels x taps) first: the
// GEMM's kept buffers (packed B, A blocks) then grow once, not by doubling from class to class
// (which would keep up to twice what the memory plan counts).
std::vector<std::pair<int, int>> residue_classes(const GroupedConv& g) {
  const ConvShape& s = g.s;
  const int st = s.stride;
  auto size = [&](const std::pair<int, int>& r) {
    const long long taps = static_cast<long long>(class_taps(r.first, s.kh, st, s.pad, g.dilation).size()) *
                           class_taps(r.second, s.kw, st, s.pad, g.dilation).size();
    return std::make_pair(taps * ((s.h - r.first + st - 1) / st) * ((s.w - r.second + st - 1) / st), taps);
  };
  std::vector<std::pair<int, int>> classes;
  for (int ry = 0; ry < std::min(st, s.h); ++ry)
    for (int rx = 0; rx < std::min(st, s.w); ++rx) classes.emplace_back(ry, rx);
  std::stable_sort(classes.begin(), classes.end(), [&](const auto& a, const auto& b) { return size(a) > size(b); });
  return classes;
}

template <typename T>
std::vector<T>& class_rows() {
  thread_local Kept<std::vector<T>> buffer;
  return buffer;
}

template <typename T>
void bwd_data_classes(const int8_t* err, const int8_t* w, const GroupedConv& g, T* dx) {
  const ConvShape& s = g.s;
  const int cg = g.cg(), og = g.og(), oh = g.oh(), ow = g.ow(), st = s.stride, d = g.dilation;
  // err framed in zeros so that every class's taps stay in it
  const ClassFrame cf = class_frame(g);
  const int top = cf.top, left = cf.left;
  const Frame f = frame(err, s.n, oh, ow, s.o, top, left, 1, cf.hp, cf.wp);
  for (const auto& [ry, rx] : residue_classes(g)) {
      const std::vector<int> ti = class_taps(ry, s.kh, st, s.pad, d), tj = class_taps(rx, s.kw, st, s.pad, d);
      const int rows_y = (s.h - ry + st - 1) / st, rows_x = (s.w - rx + st - 1) / st, m = s.n * rows_y * rows_x;
      const int ntaps = static_cast<int>(ti.size() * tj.size()), k = ntaps * og;
      T* out = grow_exact(class_rows<T>(), static_cast<size_t>(m) * s.c);
      if (k == 0) {
        std::fill(out, out + static_cast<ptrdiff_t>(m) * s.c, T(0));
      } else {
        // class pixel (yy, xx) = dx pixel (ry + yy*st, rx + xx*st) meets tap (i, j) at frame pixel
        // (yy + (ry + pad - i*d) / st + top, likewise): a 'valid' stride-1 conv over the frame
        std::vector<ptrdiff_t> taps;
        for (int i : ti)
          for (int j : tj) taps.push_back(f.pixel(0, (ry + s.pad - i * d) / st + top, (rx + s.pad - j * d) / st + left));
        for_each_group(g.groups, [&](int group) {
          // B[c, (t, o)] = w[o, i_t, j_t, c] over the class's taps
          const int8_t* wg = w + static_cast<ptrdiff_t>(group) * og * s.kh * s.kw * cg;
          int8_t* wc = grow_exact(operand(2), static_cast<size_t>(cg) * k);
          for (int t = 0; t < ntaps; ++t)
            for (int o = 0; o < og; ++o) {
              const int8_t* src = wg + ((static_cast<ptrdiff_t>(o) * s.kh + ti[t / tj.size()]) * s.kw + tj[t % tj.size()]) * cg;
              for (int c = 0; c < cg; ++c) wc[static_cast<ptrdiff_t>(c) * k + t * og + o] = src[c];
            }
          const Patches patches = group_patches(f, s.n, rows_y, rows_x, 1, taps, group, og);
          product(patches.a(), true, MatrixS8{wc, k, 1}, m, cg, k, out + group * cg, s.c);
        });
      }
      // the class's rows into dx: pixel (b, ry + yy*st, rx + xx*st), all channels
      parallel_ranges(s.n * rows_y, static_cast<size_t>(m) * s.c * sizeof(T), [&](int r0, int r1) {
        for (int r = r0; r < r1; ++r) {
          const ptrdiff_t image_row = static_cast<ptrdiff_t>(r / rows_y) * s.h + ry + (r % rows_y) * st;
          T* to = dx + (image_row * s.w + rx) * s.c;
          const T* from = out + static_cast<ptrdiff_t>(r) * rows_x * s.c;
          for (int xx = 0; xx < rows_x; ++xx, to += st * s.c, from += s.c) std::memcpy(to, from, s.c * sizeof(T));
        }
      });
    }
}

}  // namespace

// fn(group) for every group. With at least as many groups as the pool has threads, the groups
// are the tasks (each group's product then runs inline on its thread: no wake-up per product,
// and the small products do not split; 3 groups on 2 threads still beat splitting each: a
// 240-channel 1x1's weight gradient at batch 32, 0.85 ms on 1 thread, took 0.86 split and 0.57
// as tasks); with fewer, one group after the other, each product splitting over the pool as a
// dense conv's does.
void for_each_group(int groups, const std::function<void(int)>& fn) {
  const int threads = pool_threads();
  if (threads > 1 && groups >= threads) {
    parallel_for(groups, fn);
  } else {
    for (int g = 0; g < groups; ++g) fn(g);
  }
}

std::vector<int> class_taps(int r, int k, int stride, int pad, int d) {
  std::vector<int> taps;
  for (int i = 0; i < k; ++i)
    if (((r + pad - i * d) % stride + stride) % stride == 0) taps.push_back(i);
  return taps;
}

// err row e = (y + pad - i*d) / stride runs from -top to (h - 1 + pad) / stride (columns alike)
ClassFrame class_frame(const GroupedConv& g) {
  const ConvShape& s = g.s;
  const int d = g.dilation, st = s.stride;
  const int top = std::max(0, ((s.kh - 1) * d - s.pad + st - 1) / st), left = std::max(0, ((s.kw - 1) * d - s.pad + st - 1) / st);
  const int bottom = std::max(0, (s.h - 1 + s.pad) / st - (g.oh() - 1)), right = std::max(0, (s.w - 1 + s.pad) / st - (g.ow() - 1));
  return ClassFrame{top, left, top + g.oh() + bottom, left + g.ow() + right};
}

const char* grouped_algorithm(ConvPass pass, const GroupedConv& g) {
  if (grouped_direct_fits(pass, g)) {
    if (pass == ConvPass::kBackwardWeight) return "pixel_pair_lanes";
    return pass == ConvPass::kForward || g.s.stride == 1 ? "direct_lanes" : "residue_class_lanes";
  }
  if (plain_1x1(g.s)) return "gemm_1x1_in_place";
  if (pass == ConvPass::kBackwardData && g.s.stride > 1) return "residue_class_gemms";
  return "group_patches_gemm";
}

template <typename T>
void conv2d_grouped_fwd(const int8_t* x, const int8_t* w, const GroupedConv& g, T* y, int64_t* absmax) {
  const ConvShape& s = g.s;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (grouped_direct_fits(ConvPass::kForward, g)) {
      grouped_direct_fwd(x, w, g, y, absmax);
      return;
    }
  }
  const int cg = g.cg(), og = g.og(), k = s.kh * s.kw * cg, m = s.n * g.oh() * g.ow();
  const Framed src = plain_1x1(s) ? Framed{} : forward_frame(x, g);
  for_each_group(g.groups, [&](int group) {
    const MatrixS8 wg{w + static_cast<ptrdiff_t>(group) * og * k, k, 1};
    if (plain_1x1(s)) {
      product(MatrixS8{x + group * cg, s.c, 1}, false, wg, m, og, k, y + group * og, s.o);
      return;
    }
    const Patches patches = group_patches(src.f, s.n, g.oh(), g.ow(), s.stride, src.taps, group, cg);
    product(patches.a(), true, wg, m, og, k, y + group * og, s.o);
  });
}

template <typename T>
void conv2d_grouped_bwd_data(const int8_t* err, const int8_t* w, const GroupedConv& g, T* dx, int64_t* absmax) {
  const ConvShape& s = g.s;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (grouped_direct_fits(ConvPass::kBackwardData, g)) {
      grouped_direct_bwd_data(err, w, g, dx, absmax);
      return;
    }
  }
  if (s.stride > 1) {
    bwd_data_classes(err, w, g, dx);
    return;
  }
  const int cg = g.cg(), og = g.og(), k = s.kh * s.kw * og, m = s.n * s.h * s.w;
  const Framed src = plain_1x1(s) ? Framed{} : transposed_frame(err, g);
  for_each_group(g.groups, [&](int group) {
    const int8_t* wg = w + static_cast<ptrdiff_t>(group) * og * s.kh * s.kw * cg;
    if (plain_1x1(s)) {  // dx_g[P, cg] = err_g[P, og] @ w_g[og, cg]: err's rows in place, B = w_g's transpose
      product(MatrixS8{err + group * og, s.o, 1}, false, MatrixS8{wg, 1, cg}, m, cg, og, dx + group * cg, s.c);
      return;
    }
    int8_t* wt = grow_exact(operand(2), static_cast<size_t>(cg) * k);
    flipped_taps(wg, og, s.kh, s.kw, cg, wt);
    const Patches patches = group_patches(src.f, s.n, s.h, s.w, 1, src.taps, group, og);
    product(patches.a(), true, MatrixS8{wt, k, 1}, m, cg, k, dx + group * cg, s.c);
  });
}

template <typename T>
void conv2d_grouped_bwd_weight(const int8_t* err, const int8_t* x, const GroupedConv& g, T* dw) {
  const ConvShape& s = g.s;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (grouped_direct_fits(ConvPass::kBackwardWeight, g)) {
      grouped_direct_bwd_weight(err, x, g, dw);
      return;
    }
  }
  const int cg = g.cg(), og = g.og(), k = s.kh * s.kw * cg, p = s.n * g.oh() * g.ow();
  const Framed src = plain_1x1(s) ? Framed{} : forward_frame(x, g);
  for_each_group(g.groups, [&](int group) {
    // dw_g[og, K] = err_g^T[og, P] @ patches_g[P, K]: err's group columns transposed once (A
    // rows), the patches a K-major B; dw_g's rows are contiguous in dw.
    int8_t* err_t = grow_exact(operand(2), static_cast<size_t>(og) * p);
    transpose_block(err + group * og, s.o, p, og, err_t, p);
    const MatrixS8 a{err_t, p, 1};
    if (plain_1x1(s)) {
      product(a, false, MatrixS8{x + group * cg, 1, s.c}, og, k, p, dw + static_cast<ptrdiff_t>(group) * og * k, k);
      return;
    }
    const Patches patches = group_patches(src.f, s.n, g.oh(), g.ow(), s.stride, src.taps, group, cg);
    product(a, false, patches.k_major(), og, k, p, dw + static_cast<ptrdiff_t>(group) * og * k, k);
  });
}

// ---------------------------------------------------------------- kept scratch (scratch.h)
namespace {

bool acc64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }  // bindings.h needs_int64

// Adds `items`, a buffer named twice keeping the larger size (the buffers only grow).
void merge(ScratchList* out, const ScratchList& items) {
  for (const auto& [name, bytes] : items) {
    auto at = std::find_if(out->begin(), out->end(), [&](const auto& item) { return item.first == name; });
    if (at == out->end()) out->emplace_back(name, bytes);
    else at->second = std::max(at->second, bytes);
  }
}

// One group's product c[m, n] = a[m, k] b[n, k]^T (product() above) on `holders` threads: the
// B each packs, the GEMM's own A blocks (gemm_scratch's, without the B it does not pack
// here), or for int64 sums gemm_s8_s64's buffers and the rows before their copy.
void product_into(ScratchList* out, int holders, int m, int n, int k, bool is64) {
  ScratchList gemm = gemm_scratch(m, n, k, false);
  if (!is64) {
    gemm.erase(std::remove_if(gemm.begin(), gemm.end(), [](const auto& item) { return item.first == "gemm.packed_b"; }),
               gemm.end());
    gemm.emplace_back("grouped.packed_b (per thread)", holders * packed_b_bytes(n, k, active_isa()));
  } else {
    gemm.emplace_back("grouped.int64_result (per thread)", holders * static_cast<size_t>(m) * n * sizeof(int64_t));
  }
  merge(out, gemm);
}

// A group's patches [m, k] on each of `holders` threads (patch_buffer).
size_t patch_bytes(int holders, int m, int k) {
  return holders * static_cast<size_t>(a_rows(active_isa(), m)) * a_row_bytes(active_isa(), k);
}

}  // namespace

ScratchList grouped_scratch(ConvPass pass, const GroupedConv& g, bool requant) {
  const ConvShape& s = g.s;
  const int threads = pool_threads(), cg = g.cg(), og = g.og(), oh = g.oh(), ow = g.ow(), d = g.dilation;
  const int holders = threads > 1 && g.groups >= threads ? std::min(threads, g.groups) : 1;  // for_each_group
  const size_t in_pixels = static_cast<size_t>(s.n) * s.h * s.w, pixels = static_cast<size_t>(s.n) * oh * ow;
  const bool plain = plain_1x1(s);
  ScratchList out;
  if (grouped_direct_fits(pass, g)) {  // int32 sums
    out = grouped_direct_scratch(pass, g);
    if (pass == ConvPass::kBackwardWeight) return out;
    if (requant && pass == ConvPass::kForward) out.emplace_back("requant.acc.conv2d_grouped.int32", pixels * s.o * 4);
    if (requant && pass == ConvPass::kBackwardData)
      out.emplace_back("requant.acc.conv2d_grouped_bwd_data.int32", in_pixels * s.c * 4);
    return out;
  }
  auto frame_of = [&](int hp, int wp, int c) {
    merge(&out, {{"grouped.frame", static_cast<size_t>(s.n) * hp * wp * c}});
  };
  if (pass == ConvPass::kForward) {
    const int k = s.kh * s.kw * cg;
    const bool is64 = acc64(k);
    if (requant) merge(&out, {{"requant.acc.conv2d_grouped" + std::string(is64 ? ".int64" : ".int32"), pixels * s.o * (is64 ? 8 : 4)}});
    if (!plain) {
      frame_of(s.h + 2 * s.pad, s.w + 2 * s.pad, s.c);
      merge(&out, {{"grouped.patches (per thread)", patch_bytes(holders, static_cast<int>(pixels), k)}});
    }
    product_into(&out, holders, static_cast<int>(pixels), og, k, is64);
    return out;
  }
  if (pass == ConvPass::kBackwardWeight) {
    const int k = s.kh * s.kw * cg, p = static_cast<int>(pixels);
    const bool is64 = acc64(p);
    if (!plain) {
      frame_of(s.h + 2 * s.pad, s.w + 2 * s.pad, s.c);
      merge(&out, {{"grouped.patches (per thread)", patch_bytes(holders, p, k)}});
    }
    merge(&out, {{"grouped.operand (per thread)", holders * static_cast<size_t>(og) * p}});
    product_into(&out, holders, og, k, p, is64);
    return out;
  }
  const bool is64 = acc64(static_cast<long long>(s.kh) * s.kw * og);
  if (requant)
    merge(&out, {{"requant.acc.conv2d_grouped_bwd_data" + std::string(is64 ? ".int64" : ".int32"), in_pixels * s.c * (is64 ? 8 : 4)}});
  if (plain) {
    product_into(&out, holders, static_cast<int>(in_pixels), cg, og, is64);
    return out;
  }
  if (s.stride == 1) {
    const int k = s.kh * s.kw * og;
    frame_of(s.h + (s.kh - 1) * d, s.w + (s.kw - 1) * d, s.o);
    merge(&out, {{"grouped.patches (per thread)", patch_bytes(holders, static_cast<int>(in_pixels), k)},
                 {"grouped.operand (per thread)", holders * static_cast<size_t>(cg) * k}});
    product_into(&out, holders, static_cast<int>(in_pixels), cg, k, is64);
    return out;
  }
  const int st = s.stride;  // bwd_data_classes
  const ClassFrame cf = class_frame(g);
  frame_of(cf.hp, cf.wp, s.o);
  for (const auto& [ry, rx] : residue_classes(g)) {
      const int rows_y = (s.h - ry + st - 1) / st, rows_x = (s.w - rx + st - 1) / st, m = s.n * rows_y * rows_x;
      const int k = static_cast<int>(class_taps(ry, s.kh, st, s.pad, d).size() * class_taps(rx, s.kw, st, s.pad, d).size()) * og;
      merge(&out, {{"grouped.class_rows" + std::string(is64 ? ".int64" : ".int32"), static_cast<size_t>(m) * s.c * (is64 ? 8 : 4)}});
      if (k == 0) continue;
      merge(&out, {{"grouped.patches (per thread)", patch_bytes(holders, m, k)},
                   {"grouped.operand (per thread)", holders * static_cast<size_t>(cg) * k}});
      product_into(&out, holders, m, cg, k, is64);
    }
  return out;
}

template void conv2d_grouped_fwd<int32_t>(const int8_t*, const int8_t*, const GroupedConv&, int32_t*, int64_t*);
template void conv2d_grouped_fwd<int64_t>(const int8_t*, const int8_t*, const GroupedConv&, int64_t*, int64_t*);
template void conv2d_grouped_bwd_data<int32_t>(const int8_t*, const int8_t*, const GroupedConv&, int32_t*, int64_t*);
template void conv2d_grouped_bwd_data<int64_t>(const int8_t*, const int8_t*, const GroupedConv&, int64_t*, int64_t*);
template void conv2d_grouped_bwd_weight<int32_t>(const int8_t*, const int8_t*, const GroupedConv&, int32_t*);
template void conv2d_grouped_bwd_weight<int64_t>(const int8_t*, const int8_t*, const GroupedConv&, int64_t*);

}  // namespace dsptrain
