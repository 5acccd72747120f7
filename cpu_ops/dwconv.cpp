// The depthwise convolutions' drivers (dwconv.h): each pass reads a source image built row
// by row in each task's kept buffer, so the inner loops (dwconv_rows.h) never test a border:
//   forward, weight gradient: x zero-padded, output (r, o) at source (r * stride, o * stride);
//   backward data: err zero-inserted between its positions (stride) and bordered by
//     kernel - 1 - pad, so dx is a stride-1 sum over the flipped taps, listed in the forward
//     taps' (kh, kw) order (the order the float sums keep).
// Forward and backward data split output rows across threads; the weight gradient splits
// channels, so each channel's sums keep the one order ops_ref states.
#include "dwconv.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "dwconv_rows.h"
#include "gemm.h"
#include "requant.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr int kMaddChannels = 8;   // dw_rows_s8_madd's step

// Which taps can reach which outputs: output rows r with r % period == row and columns with
// column % period == col meet the taps `taps` (indices i * kw + j, in (kh, kw) order) and no
// others. Backward data at stride s has s x s of them: of the zero-inserted error, the taps
// that land on an error position are those with i = r + pad (mod s), j likewise, so each
// phase sums only its own (a quarter of the taps at stride 2) instead of the zeros too.
struct Phase {
  int row, col;
  std::vector<int> taps;
};

// The image a pass reads: `rows` x `width` pixels of `channels` values (a channel slice of
// the tensor's), output row r from source row r * row_step, output column o at o * col_step,
// tap t at off[t] from the window's corner.
struct Source {
  int rows, width, channels, row_step, col_step;
  std::vector<ptrdiff_t> off;
  int period = 1;
  std::vector<Phase> phases;
  ptrdiff_t row_elems() const { return ptrdiff_t(width) * channels; }
};

std::vector<int> all_taps(const DwShape& s) {
  std::vector<int> taps(s.taps());
  for (int t = 0; t < s.taps(); ++t) taps[t] = t;
  return taps;
}

Source padded_source(const DwShape& s, int channels) {
  Source src{s.h + 2 * s.pad, s.w + 2 * s.pad, channels, s.stride, s.stride, {}, 1, {{0, 0, all_taps(s)}}};
  for (int i = 0; i < s.kh; ++i)
    for (int j = 0; j < s.kw; ++j) src.off.push_back((ptrdiff_t(i) * src.width + j) * channels);
  return src;
}

Source inserted_source(const DwShape& s) {
  Source src{s.h + s.kh - 1, s.w + s.kw - 1, s.c, 1, 1, {}, s.stride, {}};
  for (int i = 0; i < s.kh; ++i)
    for (int j = 0; j < s.kw; ++j)
      src.off.push_back((ptrdiff_t(s.kh - 1 - i) * src.width + (s.kw - 1 - j)) * s.c);
  const auto lands = [&](int out, int tap) { return ((out + s.pad - tap) % s.stride + s.stride) % s.stride == 0; };
  for (int row = 0; row < s.stride; ++row)
    for (int col = 0; col < s.stride; ++col) {
      Phase phase{row, col, {}};
      for (int i = 0; i < s.kh; ++i)
        for (int j = 0; j < s.kw; ++j)
          if (lands(row, i) && lands(col, j)) phase.taps.push_back(i * s.kw + j);
      src.phases.push_back(phase);
    }
  return src;
}

// Row R of image n of x zero-padded, channels [c0, c0 + src.channels).
template <typename T>
void fill_padded_row(const T* x, const DwShape& s, const Source& src, int n, int R, int c0, T* dst) {
  std::memset(dst, 0, sizeof(T) * src.row_elems());
  const int r = R - s.pad;
  if (r < 0 || r >= s.h) return;
  const T* row = x + (ptrdiff_t(n) * s.h + r) * s.w * s.c + c0;
  T* out = dst + ptrdiff_t(s.pad) * src.channels;
  if (src.channels == s.c) {
    std::memcpy(out, row, sizeof(T) * s.w * s.c);
    return;
  }
  for (int q = 0; q < s.w; ++q) std::memcpy(out + ptrdiff_t(q) * src.channels, row + ptrdiff_t(q) * s.c, sizeof(T) * src.channels);
}

// Row a of image n of err with stride - 1 zeros between its positions and kernel - 1 - pad
// around them: position (p, q) of err lands at (k - 1 - pad + p * stride, ...).
template <typename T>
void fill_inserted_row(const T* err, const DwShape& s, const Source& src, int n, int a, T* dst) {
  std::memset(dst, 0, sizeof(T) * src.row_elems());
  const int from_top = a - (s.kh - 1 - s.pad);
  if (from_top < 0 || from_top % s.stride) return;
  const int p = from_top / s.stride;
  if (p >= s.oh()) return;
  const int ow = s.ow(), left = s.kw - 1 - s.pad;
  const T* row = err + (ptrdiff_t(n) * s.oh() + p) * ow * s.c;
  for (int q = 0; q < ow; ++q) {
    const int b = left + q * s.stride;
    if (b >= 0 && b < src.width) std::memcpy(dst + ptrdiff_t(b) * s.c, row + ptrdiff_t(q) * s.c, sizeof(T) * s.c);
  }
}

template <typename T>
std::vector<T>& source_buffer() {
  thread_local Kept<std::vector<T>> buffer;
  return buffer;
}

// fill(n, R, dst) for the source rows of output rows [0, out_h) of every image, split in
// row ranges across the threads; rows(base, n, r) for each output row, then done(u0, u1)
// for each run of consecutive output rows (unit u = n * out_h + r) while they are in cache.
template <typename T, typename Fill, typename Rows, typename Done>
void for_output_rows(const DwShape& s, const Source& src, int out_h, size_t bytes, Fill fill, Rows rows, Done done) {
  parallel_ranges(s.n * out_h, bytes, [&](int begin, int end) {
    std::vector<T>& buf = source_buffer<T>();
    for (int u = begin; u < end;) {
      const int n = u / out_h, r0 = u % out_h, r1 = std::min(out_h, r0 + (end - u));
      const int R0 = r0 * src.row_step, R1 = std::min(src.rows, (r1 - 1) * src.row_step + s.kh);
      if (buf.size() < size_t(R1 - R0) * src.row_elems()) buf.resize(size_t(R1 - R0) * src.row_elems());
      for (int R = R0; R < R1; ++R) fill(n, R, buf.data() + (R - R0) * src.row_elems());
      for (int r = r0; r < r1; ++r) rows(buf.data() + (ptrdiff_t(r) * src.row_step - R0) * src.row_elems(), n, r);
      done(u, u + (r1 - r0));
      u += r1 - r0;
    }
  });
}

bool madd_active(int channels) {
  const Isa isa = active_isa();
  return dw_madd_compiled() && channels >= kMaddChannels &&
         (isa == Isa::kAvx2 || isa == Isa::kAvxVnni || isa == Isa::kAvx512Vnni || isa == Isa::kAmx);
}

// A phase's int8 weights as the loops read them: its taps' offsets and int16 weights by tap
// ([taps][C]), and in tap pairs for the madd loop ([pairs][C8 * 2]; an odd last tap pairs
// with weight 0).
struct TapWeights {
  int row, col;
  std::vector<ptrdiff_t> off, pair_off;
  std::vector<int16_t> taps, pairs;
  int count = 0, c8 = 0, npairs = 0;
};

TapWeights tap_weights(const int8_t* w, const DwShape& s, const Source& src, const Phase& phase, bool madd) {
  TapWeights tw{phase.row, phase.col, {}, {}, {}, {}};
  const int T = tw.count = int(phase.taps.size());
  tw.taps.resize(size_t(T) * s.c);
  for (int t = 0; t < T; ++t) {
    tw.off.push_back(src.off[phase.taps[t]]);
    for (int c = 0; c < s.c; ++c) tw.taps[size_t(t) * s.c + c] = w[ptrdiff_t(c) * s.taps() + phase.taps[t]];
  }
  if (!madd) return tw;
  tw.c8 = s.c / kMaddChannels * kMaddChannels;
  tw.npairs = (T + 1) / 2;
  tw.pairs.assign(size_t(tw.npairs) * tw.c8 * 2, 0);
  for (int p = 0; p < tw.npairs; ++p) {
    const int a = 2 * p, b = 2 * p + 1 < T ? 2 * p + 1 : -1;
    tw.pair_off.push_back(tw.off[a]);
    tw.pair_off.push_back(b >= 0 ? tw.off[b] : tw.off[a]);
    for (int c = 0; c < tw.c8; ++c) {
      tw.pairs[(size_t(p) * tw.c8 + c) * 2] = tw.taps[size_t(a) * s.c + c];
      if (b >= 0) tw.pairs[(size_t(p) * tw.c8 + c) * 2 + 1] = tw.taps[size_t(b) * s.c + c];
    }
  }
  return tw;
}

void max_into(std::atomic<int64_t>& m, int64_t v) {
  int64_t seen = m.load(std::memory_order_relaxed);
  while (v > seen && !m.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {}
}

// One int8 pass that writes [N, out_h, out_w, C] int32 rows: forward or backward data.
template <typename Fill>
void run_s8_rows(const int8_t* w, const DwShape& s, const Source& src, int out_h, int out_w, size_t bytes,
                 Fill fill, int32_t* y, int64_t* absmax, FusedRequant* fused) {
  const bool madd = madd_active(s.c);
  std::vector<TapWeights> phases;
  for (const Phase& phase : src.phases) phases.push_back(tap_weights(w, s, src, phase, madd));
  const int C = s.c, period = src.period;
  const ptrdiff_t xstep = ptrdiff_t(src.col_step) * period * C, row = ptrdiff_t(out_w) * C;
  std::atomic<int64_t> peak{0};
  for_output_rows<int8_t>(s, src, out_h, bytes, fill, [&](const int8_t* base, int n, int r) {
    int32_t* yr = y + (ptrdiff_t(n) * out_h + r) * row;
    for (const TapWeights& tw : phases) {
      const int count = (out_w - tw.col + period - 1) / period;
      if (tw.row != r % period || count <= 0) continue;
      const int8_t* b = base + ptrdiff_t(tw.col) * src.col_step * C;
      int32_t* yc = yr + ptrdiff_t(tw.col) * C;
      const int c8 = madd ? tw.c8 : 0;
      if (c8) dw_rows_s8_madd(b, xstep, tw.pair_off.data(), tw.npairs, tw.pairs.data(), ptrdiff_t(c8) * 2, c8, count, yc, ptrdiff_t(period) * C);
      if (c8 < C) dw_rows_s8(b + c8, xstep, tw.off.data(), tw.count, tw.taps.data() + c8, C, C - c8, count, yc + c8, ptrdiff_t(period) * C);
    }
  }, [&](int u0, int u1) {
    if (fused) max_into(peak, shift_round_absmax_range(y, size_t(u0) * row, size_t(u1) * row, fused->shift, fused->mode,
                                                       fused->key, fused->out));
    else if (absmax) max_into(peak, absmax_block(y + ptrdiff_t(u0) * row, 1, int((u1 - u0) * row), 0));
  });
  if (fused) fused->applied = true;
  if (absmax) *absmax = peak.load();
}

// The weight gradient's sums of channel block [c0, c0 + cw) over all images into
// total[t * C + c0 + c] (A: int32, int64 or float). Float (per_image): each image's sums from
// zero, added to the total in image order, as ops_ref states. int8: exact, so the partial
// int32 sums run on across images and go to the total only before `flush_positions` more
// output positions could overflow them (with tiny images, a flush per image cost as much as
// the products: MobileNetV2's 1x1 and 2x2 layers).
template <typename T, typename A, typename S, typename Rows>
void wgrad_block(const T* x, const T* err, const DwShape& s, int c0, int cw, bool per_image, long long flush_positions,
                 A* total, Rows rows) {
  const Source src = padded_source(s, cw);
  const int T_ = s.taps(), oh = s.oh(), ow = s.ow();
  std::vector<T>& buf = source_buffer<T>();
  if (buf.size() < size_t(src.rows) * src.row_elems()) buf.resize(size_t(src.rows) * src.row_elems());
  std::vector<S> part(size_t(T_) * cw);
  long long pending = 0;   // output positions in `part`
  const auto flush = [&] {
    for (int t = 0; t < T_; ++t)
      for (int c = 0; c < cw; ++c) total[ptrdiff_t(t) * s.c + c0 + c] += A(part[size_t(t) * cw + c]);
    std::fill(part.begin(), part.end(), S(0));
    pending = 0;
  };
  for (int n = 0; n < s.n; ++n) {
    for (int R = 0; R < src.rows; ++R) fill_padded_row(x, s, src, n, R, c0, buf.data() + R * src.row_elems());
    for (int r = 0; r < oh; ++r) {
      if (!per_image && pending > 0 && pending + ow > flush_positions) flush();
      const T* e = err + (ptrdiff_t(n) * oh + r) * ow * s.c + c0;
      rows(buf.data() + ptrdiff_t(r) * s.stride * src.row_elems(), ptrdiff_t(s.stride) * cw, src.off.data(), e, part.data());
      pending += ow;
    }
    if (per_image) flush();
  }
  if (pending > 0) flush();
}

// Channel blocks of 8 (whole cache lines of int8 for 8 blocks) across the threads.
template <typename Block>
void for_channel_blocks(const DwShape& s, size_t bytes, Block block) {
  const int blocks = (s.c + kMaddChannels - 1) / kMaddChannels;
  parallel_ranges(blocks, bytes, [&](int b0, int b1) {
    const int c0 = b0 * kMaddChannels, c1 = std::min(s.c, b1 * kMaddChannels);
    block(c0, c1 - c0);
  });
}

template <typename A>
void transpose_taps(const std::vector<A>& total, const DwShape& s, A* dw) {
  const int T = s.taps();
  for (int c = 0; c < s.c; ++c)
    for (int t = 0; t < T; ++t) dw[ptrdiff_t(c) * T + t] = total[size_t(t) * s.c + c];
}

template <typename A>
void wgrad_s8(const int8_t* err, const int8_t* x, const DwShape& s, A* dw) {
  const int T = s.taps(), ow = s.ow();
  const bool madd = madd_active(s.c);
  // positions whose int32 sums cannot overflow: each adds at most 128 * 128
  const long long flush_positions = ((1LL << 31) - 1) / 16384;
  std::vector<A> total(size_t(T) * s.c, A(0));
  const size_t bytes = size_t(s.n) * (size_t(s.h) * s.w + size_t(s.oh()) * ow) * s.c;
  for_channel_blocks(s, bytes, [&](int c0, int cw) {
    const int c8 = madd ? cw / kMaddChannels * kMaddChannels : 0;
    wgrad_block<int8_t, A, int32_t>(x, err, s, c0, cw, false, flush_positions, total.data(),
        [&](const int8_t* base, ptrdiff_t xstep, const ptrdiff_t* off, const int8_t* e, int32_t* part) {
          if (c8) dw_wgrad_rows_s8_madd(base, xstep, off, T, e, s.c, c8, ow, part, cw);
          if (c8 < cw) dw_wgrad_rows_s8(base + c8, xstep, off, T, e + c8, s.c, cw - c8, ow, part + c8, cw);
        });
  });
  transpose_taps(total, s, dw);
}

size_t pass_bytes(const DwShape& s, int element_bytes) {
  return size_t(s.n) * (size_t(s.h) * s.w + size_t(s.oh()) * s.ow()) * s.c * element_bytes;
}

}  // namespace

void dwconv2d_fwd(const int8_t* x, const int8_t* w, const DwShape& s, int32_t* y, int64_t* absmax,
                  FusedRequant* fused) {
  const Source src = padded_source(s, s.c);
  run_s8_rows(w, s, src, s.oh(), s.ow(), pass_bytes(s, 5), [&](int n, int R, int8_t* dst) {
    fill_padded_row(x, s, src, n, R, 0, dst);
  }, y, absmax, fused);
}

void dwconv2d_bwd_data(const int8_t* err, const int8_t* w, const DwShape& s, int32_t* dx, int64_t* absmax,
                       FusedRequant* fused) {
  const Source src = inserted_source(s);
  run_s8_rows(w, s, src, s.h, s.w, pass_bytes(s, 5), [&](int n, int R, int8_t* dst) {
    fill_inserted_row(err, s, src, n, R, dst);
  }, dx, absmax, fused);
}

void dwconv2d_bwd_weight(const int8_t* err, const int8_t* x, const DwShape& s, int32_t* dw) { wgrad_s8(err, x, s, dw); }
void dwconv2d_bwd_weight(const int8_t* err, const int8_t* x, const DwShape& s, int64_t* dw) { wgrad_s8(err, x, s, dw); }

// ---------------------------------------------------------------- float32
namespace {

template <typename Fill>
void run_f32_rows(const float* w, const DwShape& s, const Source& src, int out_h, int out_w, Fill fill, float* y) {
  struct PhaseWeights {
    int row, col;
    std::vector<ptrdiff_t> off;
    std::vector<float> w;   // [taps][C]
  };
  const int C = s.c, period = src.period;
  std::vector<PhaseWeights> phases;
  for (const Phase& phase : src.phases) {
    PhaseWeights pw{phase.row, phase.col, {}, std::vector<float>(phase.taps.size() * C)};
    for (size_t t = 0; t < phase.taps.size(); ++t) {
      pw.off.push_back(src.off[phase.taps[t]]);
      for (int c = 0; c < C; ++c) pw.w[t * C + c] = w[ptrdiff_t(c) * s.taps() + phase.taps[t]];
    }
    phases.push_back(std::move(pw));
  }
  const ptrdiff_t xstep = ptrdiff_t(src.col_step) * period * C, row = ptrdiff_t(out_w) * C;
  for_output_rows<float>(s, src, out_h, pass_bytes(s, 8), fill, [&](const float* base, int n, int r) {
    float* yr = y + (ptrdiff_t(n) * out_h + r) * row;
    for (const PhaseWeights& pw : phases) {
      const int count = (out_w - pw.col + period - 1) / period;
      if (pw.row != r % period || count <= 0) continue;
      dw_rows_f32(base + ptrdiff_t(pw.col) * src.col_step * C, xstep, pw.off.data(), int(pw.off.size()), pw.w.data(), C, C,
                  count, yr + ptrdiff_t(pw.col) * C, ptrdiff_t(period) * C);
    }
  }, [](int, int) {});
}

}  // namespace

void dwconv2d_fwd_f32(const float* x, const float* w, const DwShape& s, float* y) {
  const Source src = padded_source(s, s.c);
  run_f32_rows(w, s, src, s.oh(), s.ow(), [&](int n, int R, float* dst) { fill_padded_row(x, s, src, n, R, 0, dst); }, y);
}

void dwconv2d_bwd_data_f32(const float* err, const float* w, const DwShape& s, float* dx) {
  const Source src = inserted_source(s);
  run_f32_rows(w, s, src, s.h, s.w, [&](int n, int R, float* dst) { fill_inserted_row(err, s, src, n, R, dst); }, dx);
}

void dwconv2d_bwd_weight_f32(const float* err, const float* x, const DwShape& s, float* dw) {
  const int T = s.taps(), ow = s.ow();
  std::vector<float> total(size_t(T) * s.c, 0.0f);
  for_channel_blocks(s, pass_bytes(s, 4), [&](int c0, int cw) {
    wgrad_block<float, float, float>(x, err, s, c0, cw, true, 0, total.data(),
        [&](const float* base, ptrdiff_t xstep, const ptrdiff_t* off, const float* e, float* part) {
          dw_wgrad_rows_f32(base, xstep, off, T, e, s.c, cw, ow, part, cw);
        });
  });
  transpose_taps(total, s, dw);
}

const char* dwconv_path(DwPass, const DwShape& s) { return madd_active(s.c) ? "madd_pairs" : "rows"; }

DwScratch dwconv_scratch(DwPass pass, const DwShape& s, int element_bytes) {
  // each pool thread keeps its own source buffer: the weight gradient's holds one padded
  // image (of its channels), the others' at most one image's source rows (for_output_rows
  // fills image by image)
  const size_t threads = size_t(pool_threads());
  if (pass == DwPass::kBackwardWeight)
    return {threads * size_t(s.h + 2 * s.pad) * (s.w + 2 * s.pad) * s.c * element_bytes, 0};
  const Source src = pass == DwPass::kForward ? padded_source(s, s.c) : inserted_source(s);
  return {threads * size_t(src.rows) * src.row_elems() * element_bytes, 0};
}

}  // namespace dsptrain
