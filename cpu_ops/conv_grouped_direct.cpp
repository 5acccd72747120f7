// The grouped conv's direct kernel (conv_grouped_direct.h): int16 frame, lane weights, one
// conv_grouped_lanes.h row per output row and group. grp8 measured the GEMM route's cost on
// 8 groups of 8-30 channels: packing each small product cost about as much as multiplying it.
#include "conv_grouped_direct.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "conv_grouped_lanes.h"
#include "gemm.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// At most this many outputs a group take the lanes (4 vectors share each broadcast); wider
// groups are the GEMM's. bench_grouped's widest groups were faster here than on the GEMM too
// (batch 32, one thread, load 7.4, alternated 3 times: 128 channels 3x3 in 2 groups 2.52-2.79 ms
// a pass against 2.73-3.13, 240 channels 1x1 in 2 and 3 groups 0.80-1.23 against 0.85-1.34).
constexpr int kDirectMaxLanes = 128;
// ... and at most this many a 1x1 stride-1 unpadded weight gradient (grouped_direct_fits).
constexpr int kPairsMaxLanesInPlace = 80;

// A source framed in zeros (fill_frame, conv_grouped.h), as int16, group g's kc channels at
// [g * kc2, g * kc2 + kc) of a pixel (kc2 = kc rounded up to even: a pair never straddles two groups).
struct Frame16 {
  const int16_t* d;
  int hp, wp, kc2;
  ptrdiff_t ps;  // int16s a pixel
  ptrdiff_t pixel(int b, int y, int x) const { return ((static_cast<ptrdiff_t>(b) * hp + y) * wp + x) * ps; }
};

std::vector<int16_t>& frame_buffer() {
  thread_local Kept<std::vector<int16_t>> buffer;
  return buffer;
}
// The int32 kept buffers, per thread: the lane weights, and the weight gradient's pair frame,
// error pairs and sums.
enum Buffer32 { kLaneWeights, kPairFrame, kErrPairs, kSums };
std::vector<int32_t>& buffer32(Buffer32 which) {
  thread_local Kept<std::vector<int32_t>> buffers[4];
  return buffers[which];
}

size_t frame_elems(int n, int hp, int wp, int groups, int kc) {
  return static_cast<size_t>(n) * hp * wp * groups * (kc + (kc & 1));
}

Frame16 frame16(const int8_t* src, int n, int h, int w, int groups, int kc, int top, int left, int step, int hp,
                int wp) {
  const int kc2 = kc + (kc & 1), c = groups * kc;
  const ptrdiff_t ps = static_cast<ptrdiff_t>(groups) * kc2;
  int16_t* d = grow_exact(frame_buffer(), frame_elems(n, hp, wp, groups, kc));
  fill_frame(d, src, n, h, w, c, ps, top, left, step, hp, wp, [=](int16_t* to, const int8_t* in) {
    if (kc2 == kc) {
      for (int i = 0; i < c; ++i) to[i] = in[i];
    } else {
      for (int gi = 0; gi < groups; ++gi)
        for (int k = 0; k < kc; ++k) to[gi * kc2 + k] = in[gi * kc + k];
    }
  });
  return Frame16{d, hp, wp, kc2, ps};
}

// The weights as lane vectors (conv_grouped_lanes.h's wv), group after group:
// weight(g, t, k, l) is group g's weight of tap t, input channel k, output lane l.
struct LaneWeights {
  const int32_t* v;
  int pairs;
  ptrdiff_t per_group;
};

size_t lane_weight_elems(int groups, int taps, int kc, int lanes) {
  const int chunks = (lanes + kGroupedLanes - 1) / kGroupedLanes;
  return static_cast<size_t>(groups) * chunks * taps * ((kc + 1) / 2) * kGroupedLanes;
}

template <typename F>
LaneWeights lane_weights(int groups, int taps, int kc, int lanes, F weight) {
  const int pairs = (kc + 1) / 2, chunks = (lanes + kGroupedLanes - 1) / kGroupedLanes;
  const ptrdiff_t per_group = static_cast<ptrdiff_t>(chunks) * taps * pairs * kGroupedLanes;
  int32_t* v = grow_exact(buffer32(kLaneWeights), lane_weight_elems(groups, taps, kc, lanes));
  for (int g = 0; g < groups; ++g)
    for (int ch = 0; ch < chunks; ++ch)
      for (int t = 0; t < taps; ++t)
        for (int p = 0; p < pairs; ++p)
          for (int l8 = 0; l8 < kGroupedLanes; ++l8) {
            const int l = ch * kGroupedLanes + l8;
            const int lo = l < lanes ? weight(g, t, 2 * p, l) : 0;
            const int hi = l < lanes && 2 * p + 1 < kc ? weight(g, t, 2 * p + 1, l) : 0;
            v[g * per_group + ((static_cast<ptrdiff_t>(ch) * taps + t) * pairs + p) * kGroupedLanes + l8] =
                static_cast<int32_t>(static_cast<uint16_t>(lo) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
          }
  return LaneWeights{v, pairs, per_group};
}

// Rows [0, rows) of `count` outputs each, every group: row r's source at f + src_of(r), its
// outputs at out + out_of(r) (+ the group's lanes), pixels xstep / ystep apart.
template <typename Src, typename Out>
void rows_of(const Frame16& f, const std::vector<ptrdiff_t>& taps, const LaneWeights& lw, int groups, int lanes,
             int rows, int count, ptrdiff_t xstep, ptrdiff_t ystep, Src src_of, Out out_of, std::atomic<uint32_t>* absmax) {
  const size_t bytes = static_cast<size_t>(rows) * count * groups * lanes * 4;
  parallel_ranges(rows, bytes, [&](int r0, int r1) {
    uint32_t lanes_most[kGroupedLanes] = {};
    for (int r = r0; r < r1; ++r)
      grouped_lanes_row(f.d + src_of(r), xstep, taps.data(), static_cast<int>(taps.size()), lw.pairs, lw.v, lanes, count,
                        out_of(r), ystep, groups, f.kc2, lw.per_group, absmax ? lanes_most : nullptr);
    if (absmax) {
      const uint32_t most = *std::max_element(lanes_most, lanes_most + kGroupedLanes);
      for (uint32_t seen = absmax->load(); most > seen && !absmax->compare_exchange_weak(seen, most);) {
      }
    }
  });
}

std::vector<ptrdiff_t> frame_taps(const Frame16& f, const std::vector<int>& ti, const std::vector<int>& tj) {
  std::vector<ptrdiff_t> taps;
  for (int i : ti)
    for (int j : tj) taps.push_back(f.pixel(0, i, j));
  return taps;
}

std::vector<int> spaced(int k, int d) {
  std::vector<int> v;
  for (int i = 0; i < k; ++i) v.push_back(i * d);
  return v;
}

// The largest tap count of strided backward data's classes (the lane weights' size).
int most_class_taps(const GroupedConv& g) {
  const ConvShape& s = g.s;
  size_t most = 0;
  for (int ry = 0; ry < std::min(s.stride, s.h); ++ry)
    for (int rx = 0; rx < std::min(s.stride, s.w); ++rx)
      most = std::max(most, class_taps(ry, s.kh, s.stride, s.pad, g.dilation).size() *
                                class_taps(rx, s.kw, s.stride, s.pad, g.dilation).size());
  return static_cast<int>(most);
}

void bwd_data_classes(const int8_t* err, const int8_t* w, const GroupedConv& g, int32_t* dx,
                      std::atomic<uint32_t>* absmax) {
  const ConvShape& s = g.s;
  const int cg = g.cg(), og = g.og(), st = s.stride, d = g.dilation;
  const ClassFrame cf = class_frame(g);
  const Frame16 f = frame16(err, s.n, g.oh(), g.ow(), g.groups, og, cf.top, cf.left, 1, cf.hp, cf.wp);
  grow_exact(buffer32(kLaneWeights), lane_weight_elems(g.groups, most_class_taps(g), og, cg));  // once, the largest class's
  for (int ry = 0; ry < std::min(st, s.h); ++ry)
    for (int rx = 0; rx < std::min(st, s.w); ++rx) {
      // class pixel (yy, xx) = dx pixel (ry + yy*st, rx + xx*st) meets tap (i, j) at frame pixel
      // (yy + (ry + pad - i*d) / st + top, likewise): a 'valid' stride-1 conv over the frame
      const std::vector<int> ti = class_taps(ry, s.kh, st, s.pad, d), tj = class_taps(rx, s.kw, st, s.pad, d);
      std::vector<int> fy, fx;
      for (int i : ti) fy.push_back((ry + s.pad - i * d) / st + cf.top);
      for (int j : tj) fx.push_back((rx + s.pad - j * d) / st + cf.left);
      const int rows_y = (s.h - ry + st - 1) / st, rows_x = (s.w - rx + st - 1) / st, ntj = static_cast<int>(tj.size());
      const LaneWeights lw = lane_weights(g.groups, static_cast<int>(ti.size()) * ntj, og, cg, [&](int gi, int t, int o, int c) {
        return w[((static_cast<ptrdiff_t>(gi * og + o) * s.kh + ti[t / ntj]) * s.kw + tj[t % ntj]) * cg + c];
      });
      rows_of(f, frame_taps(f, fy, fx), lw, g.groups, cg, s.n * rows_y, rows_x, f.ps, static_cast<ptrdiff_t>(st) * s.c,
              [&](int r) { return f.pixel(r / rows_y, r % rows_y, 0); },
              [&](int r) {
                const ptrdiff_t y = static_cast<ptrdiff_t>(r / rows_y) * s.h + ry + (r % rows_y) * st;
                return dx + (y * s.w + rx) * s.c;
              },
              absmax);
    }
}

// max |sums| into *absmax (if given) once every task has added its own.
void take_absmax(const std::atomic<uint32_t>& most, int64_t* absmax) {
  if (absmax) *absmax = most.load();
}

}  // namespace

bool grouped_direct_fits(ConvPass pass, const GroupedConv& g) {
  const ConvShape& s = g.s;
  if (!grouped_lanes_compiled() || active_isa() != Isa::kAvx2) return false;
  if (pass == ConvPass::kBackwardWeight) {
    // a 1x1 stride-1 unpadded one of wide groups keeps the GEMM reading x and err in place (240
    // channels at batch 32, one thread, alternated: 30 and 80 outputs a group 0.47-0.48 and 0.80
    // ms here against 0.60-0.62 and 0.91-1.07; 120 outputs 1.21 and 1.75 against 1.09 and 1.49)
    const bool in_place = s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0 && g.og() > kPairsMaxLanesInPlace;
    return !in_place && static_cast<long long>(s.n) * g.oh() * g.ow() * 127LL * 127LL < (1LL << 31) &&
           g.og() <= kDirectMaxLanes;  // int32 sums over N*OH*OW pixels
  }
  const bool forward = pass == ConvPass::kForward;
  const long long depth = static_cast<long long>(s.kh) * s.kw * (forward ? g.cg() : g.og());
  if (depth * 127LL * 127LL >= (1LL << 31)) return false;  // int64 sums: the GEMM's
  return (forward ? g.og() : g.cg()) <= kDirectMaxLanes;
}

void grouped_direct_fwd(const int8_t* x, const int8_t* w, const GroupedConv& g, int32_t* y, int64_t* absmax) {
  std::atomic<uint32_t> most{0};
  const ConvShape& s = g.s;
  const int cg = g.cg(), og = g.og(), oh = g.oh(), ow = g.ow(), taps = s.kh * s.kw;
  const Frame16 f = frame16(x, s.n, s.h, s.w, g.groups, cg, s.pad, s.pad, 1, s.h + 2 * s.pad, s.w + 2 * s.pad);
  const LaneWeights lw = lane_weights(g.groups, taps, cg, og, [&](int gi, int t, int c, int o) {
    return w[(static_cast<ptrdiff_t>(gi * og + o) * taps + t) * cg + c];
  });
  rows_of(f, frame_taps(f, spaced(s.kh, g.dilation), spaced(s.kw, g.dilation)), lw, g.groups, og, s.n * oh, ow,
          s.stride * f.ps, s.o, [&](int r) { return f.pixel(r / oh, (r % oh) * s.stride, 0); },
          [&](int r) { return y + static_cast<ptrdiff_t>(r) * ow * s.o; }, absmax ? &most : nullptr);
  take_absmax(most, absmax);
}

void grouped_direct_bwd_data(const int8_t* err, const int8_t* w, const GroupedConv& g, int32_t* dx, int64_t* absmax) {
  const ConvShape& s = g.s;
  std::atomic<uint32_t> most{0};
  if (s.stride > 1) {
    bwd_data_classes(err, w, g, dx, absmax ? &most : nullptr);
    take_absmax(most, absmax);
    return;
  }
  // stride 1: the transposed conv is a 'valid' conv over err framed by (k-1)*d - pad, taps flipped
  const int cg = g.cg(), og = g.og(), d = g.dilation, taps = s.kh * s.kw;
  const Frame16 f = frame16(err, s.n, g.oh(), g.ow(), g.groups, og, (s.kh - 1) * d - s.pad, (s.kw - 1) * d - s.pad, 1,
                            s.h + (s.kh - 1) * d, s.w + (s.kw - 1) * d);
  const LaneWeights lw = lane_weights(g.groups, taps, og, cg, [&](int gi, int t, int o, int c) {
    const int i = s.kh - 1 - t / s.kw, j = s.kw - 1 - t % s.kw;
    return w[((static_cast<ptrdiff_t>(gi * og + o) * s.kh + i) * s.kw + j) * cg + c];
  });
  rows_of(f, frame_taps(f, spaced(s.kh, d), spaced(s.kw, d)), lw, g.groups, cg, s.n * s.h, s.w, f.ps, s.c,
          [&](int r) { return f.pixel(r / s.h, r % s.h, 0); },
          [&](int r) { return dx + static_cast<ptrdiff_t>(r) * s.w * s.c; }, absmax ? &most : nullptr);
  take_absmax(most, absmax);
}

// The weight gradient: the images taken two by two (an odd last one with zeros), x framed by its
// padding as pairs P[g][b/2][fy][fx][k] = (x[b][fy][fx][g*cg + k], x[b+1][..]) (int16 each, zero
// outside x) and err as E[g][b/2][oy][ox][l] = (err[b][oy][ox][g*og + l], err[b+1][..]) (zero past
// the group's outputs, to a whole lane vector): each (tap, channel) sum of a group's outputs is
// then one vpmaddwd per pixel of an image pair, reading P in place at the tap. Pairing two images'
// same pixel keeps P the int16 frame's size (pairing a row's adjacent output pixels instead
// copied each input twice: 16x16x64 groups 8 stride 2, 30% of the time in that copy). A group's
// pairs are made by the task that sums them, while they are in its cache.
void grouped_direct_bwd_weight(const int8_t* err, const int8_t* x, const GroupedConv& g, int32_t* dw) {
  const ConvShape& s = g.s;
  const int cg = g.cg(), og = g.og(), oh = g.oh(), ow = g.ow(), st = s.stride, d = g.dilation, c = s.c, o = s.o;
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad, taps = s.kh * s.kw, images = (s.n + 1) / 2;
  const int chunks = (og + kGroupedLanes - 1) / kGroupedLanes, og8 = chunks * kGroupedLanes, rows = images * oh;
  const ptrdiff_t group_frame = static_cast<ptrdiff_t>(images) * hp * wp * cg, group_err = static_cast<ptrdiff_t>(rows) * ow * og8;
  std::vector<ptrdiff_t> row_src(rows), row_err(rows), off;
  for (int r = 0; r < rows; ++r) {
    row_src[r] = ((static_cast<ptrdiff_t>(r / oh) * hp + (r % oh) * st) * wp) * cg;
    row_err[r] = static_cast<ptrdiff_t>(r) * ow * og8;
  }
  for (int i = 0; i < s.kh; ++i)
    for (int j = 0; j < s.kw; ++j)
      for (int k = 0; k < cg; ++k) off.push_back((static_cast<ptrdiff_t>(i) * d * wp + j * d) * cg + k);
  const int nk = taps * cg;
  for_each_group(g.groups, [&](int group) {
    int32_t* p = grow_exact(buffer32(kPairFrame), group_frame);
    for (int r = 0; r < images * hp; ++r) {
      int32_t* out = p + static_cast<ptrdiff_t>(r) * wp * cg;
      const int y = r % hp - s.pad, b = 2 * (r / hp);
      if (y < 0 || y >= s.h) {
        std::memset(out, 0, static_cast<size_t>(wp) * cg * sizeof(int32_t));
        continue;
      }
      const int8_t* in = x + (static_cast<ptrdiff_t>(b) * s.h + y) * s.w * c + group * cg;
      grouped_pairs(in, b + 1 < s.n ? in + static_cast<ptrdiff_t>(s.h) * s.w * c : nullptr, c, s.w, -s.pad, wp, cg, out, cg);
    }
    int32_t* e = grow_exact(buffer32(kErrPairs), group_err);
    for (int r = 0; r < rows; ++r) {
      const int b = 2 * (r / oh);
      const int8_t* in = err + (static_cast<ptrdiff_t>(b) * oh + r % oh) * ow * o + group * og;
      grouped_pairs(in, b + 1 < s.n ? in + static_cast<ptrdiff_t>(oh) * ow * o : nullptr, o, ow, 0, ow, og,
                    e + static_cast<ptrdiff_t>(r) * ow * og8, og8);
    }
    int32_t* sums = grow_exact(buffer32(kSums), static_cast<size_t>(nk) * og8);
    grouped_wgrad_lanes(p, row_src.data(), st * cg, e, row_err.data(), og8, rows, ow, off.data(), nk, chunks, sums);
    for (int l = 0; l < og; ++l)
      for (int k = 0; k < nk; ++k) dw[(static_cast<ptrdiff_t>(group) * og + l) * nk + k] = sums[static_cast<size_t>(k) * og8 + l];
  });
}

ScratchList grouped_direct_scratch(ConvPass pass, const GroupedConv& g) {
  const ConvShape& s = g.s;
  const int cg = g.cg(), og = g.og(), d = g.dilation;
  size_t frame = 0, weights = 0;
  if (pass == ConvPass::kBackwardWeight) {
    const size_t images = (s.n + 1) / 2, og8 = (og + kGroupedLanes - 1) / kGroupedLanes * kGroupedLanes;
    const size_t holders = pool_threads() > 1 && g.groups >= pool_threads() ? std::min(pool_threads(), g.groups) : 1;
    return {{"grouped.pair_frame (per thread)", holders * images * (s.h + 2 * s.pad) * (s.w + 2 * s.pad) * cg * 4},
            {"grouped.err_pairs (per thread)", holders * images * g.oh() * g.ow() * og8 * 4},
            {"grouped.wgrad_sums (per thread)", holders * s.kh * s.kw * cg * og8 * 4}};
  }
  if (pass == ConvPass::kForward) {
    frame = frame_elems(s.n, s.h + 2 * s.pad, s.w + 2 * s.pad, g.groups, cg);
    weights = lane_weight_elems(g.groups, s.kh * s.kw, cg, og);
  } else if (s.stride > 1) {
    const ClassFrame cf = class_frame(g);
    frame = frame_elems(s.n, cf.hp, cf.wp, g.groups, og);
    weights = lane_weight_elems(g.groups, most_class_taps(g), og, cg);
  } else {
    frame = frame_elems(s.n, s.h + (s.kh - 1) * d, s.w + (s.kw - 1) * d, g.groups, og);
    weights = lane_weight_elems(g.groups, s.kh * s.kw, og, cg);
  }
  return {{"grouped.frame16", frame * sizeof(int16_t)}, {"grouped.lane_weights", weights * sizeof(int32_t)}};
}

}  // namespace dsptrain
