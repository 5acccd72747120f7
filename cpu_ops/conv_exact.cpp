// MLS's (and AFP's 16-bit errors') exact int16 convolutions: one image's patches at a time
// through the exact int16 product's packing and row kernels (gemm_s16_packed.h), or the
// channel-plane and tap-lane kernels (conv_s16_planar.cpp, conv_s16_taps.cpp) where they fit.
#include "conv_exact.h"

#include <algorithm>
#include <string>
#include <vector>

#include "conv_s16_planar.h"
#include "conv_s16_taps.h"
#include "gemm.h"
#include "gemm_exact.h"
#include "gemm_s16_packed.h"
#include "scratch.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#define DSPTRAIN_X86 1
#endif

namespace dsptrain {

using namespace s16;

// the planar convolutions' shapes and ISA (stride 1, AVX-512 VNNI): the forward and weight
// gradient when output rows fill most of a vector's lanes (16 or more columns; the weight
// gradient's flat walk over narrower rows reduced its lanes once per tap and image, which
// cost more than the patches on LeNet's conv2), the backward data when input rows have 8
// or more columns (LeNet's conv2, 14 of 16)
[[maybe_unused]] static bool planar_isa() {
#ifdef DSPTRAIN_X86
  return row_step_of(active_isa()) == 8 && has_avx512bw();
#else
  return false;
#endif
}
[[maybe_unused]] static bool planar(const Col2imShape& s) { return s.stride == 1 && s.ow >= 16 && planar_isa(); }
[[maybe_unused]] static bool taps_wgrad(const Col2imShape& s) { return !planar(s) && wgrad_taps_fit(s) && planar_isa(); }
[[maybe_unused]] static bool planar_bwd_data(const Col2imShape& s) { return s.stride == 1 && s.w >= 8 && planar_isa(); }

void conv_bwd_data_s16_s64(const int16_t* err, const int16_t* w, const Col2imShape& s, int o, int64_t* dx) {
  const int rows = s.oh * s.ow, taps = s.kh * s.kw * s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  if (o == 0 || rows == 0) {
    std::fill(dx, dx + static_cast<size_t>(s.n) * image, 0);
    return;
  }
  const int m = s.n * rows;
  const double macs = static_cast<double>(m) * taps * o;
  SerialScope serial(small_op(macs));
#ifdef DSPTRAIN_X86
  if (planar_bwd_data(s)) {   // every sum of whole pairs inside int32 (an odd count's last pair padded with 0)?
    const int max_e = max_abs16(err, static_cast<size_t>(m) * o), max_w = max_abs16(w, static_cast<size_t>(o) * taps);
    return conv_bwd_data_s16_planar(err, w, s, o, dx, static_cast<double>(s.kh) * s.kw * (o + 1) * max_e * max_w < 2147483647.0);
  }
#endif
  thread_local Kept<PackedS16> kept;   // the caller's; the workers read it through `packed`
  PackedS16& packed = kept;
  pack(err, false, w, m, taps, o, &packed);
  const int block = pairs_per_block(packed, err, w, m, taps, o);
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    thread_local Kept<std::vector<int64_t>> sums;   // one image's patch sums, reused
    sums.resize(static_cast<size_t>(rows) * taps);
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      product_rows(packed, n * rows, (n + 1) * rows, taps, block, sums.data(), n * rows);
      col2im_add_image(sums.data(), s, dx + n * image);
    }
  });
}

void conv_fwd_s16_s64(const int16_t* x, const int16_t* w, const Col2imShape& s, int o, int64_t* y) {
  const int rows = s.oh * s.ow, taps = s.kh * s.kw * s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c;
  SerialScope serial(small_op(static_cast<double>(s.n) * rows * taps * o));
  const int max_x = max_abs16(x, s.n * image), max_w = max_abs16(w, static_cast<size_t>(o) * taps);
#ifdef DSPTRAIN_X86
  // planes when the rows fill most of a vector's 16 lanes (LeNet's conv1: 28 of 32 in two);
  // operands whose sums could leave int32 take the planes' scalar int64 loop
  if (planar(s)) return conv_fwd_s16_planar(x, w, s, o, y, static_cast<double>(taps + 1) * max_x * max_w < 2147483647.0);
#endif
  std::vector<int16_t> wt(static_cast<size_t>(taps) * o);   // w[O, taps] -> [taps, O]: K-major
  for (int j = 0; j < o; ++j)
    for (int t = 0; t < taps; ++t) wt[static_cast<size_t>(t) * o + j] = w[static_cast<size_t>(j) * taps + t];
  PackedS16 shared;
  pack_b(wt.data(), o, taps, &shared);
  const int block = block_of_max(max_x, max_w, shared.pairs);
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    thread_local Kept<PackedS16> mine;
    thread_local Kept<std::vector<int16_t>> cols, padded;
    mine.b = shared.b;
    mine.panels = shared.panels;
    cols.resize(static_cast<size_t>(rows) * taps);
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      im2col_image(x + n * image, s, cols.data(), padded);
      pack_a(cols.data(), false, rows, taps, &mine);
      product_rows(mine, 0, rows, o, block, y + static_cast<size_t>(n) * rows * o, 0);
    }
  });
}

void conv_wgrad_s16_s64(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw) {
  const int rows = s.oh * s.ow, taps = s.kh * s.kw * s.c;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c, ot = static_cast<size_t>(o) * taps;
  SerialScope serial(small_op(static_cast<double>(s.n) * rows * taps * o));
  const int max_e = max_abs16(err, static_cast<size_t>(s.n) * rows * o), max_x = max_abs16(x, s.n * image);
  const int block = block_of_max(max_e, max_x, (rows + 1) / 2);
#ifdef DSPTRAIN_X86
  // an image's sums fit int32 (else the kernels below take their scalar loop)
  const bool sums_fit_int32 = static_cast<double>(rows) * max_e * max_x < 2147483647.0;
  // channel planes for stride-1 convolutions with rows of 16 or more outputs (planar)
  if (planar(s)) return conv_wgrad_s16_planar(err, x, s, o, dw, sums_fit_int32);
  // else a kernel row's taps in the lanes when they fill them (LeNet's conv2: 30 in two vectors)
  if (taps_wgrad(s)) return conv_wgrad_s16_taps(err, x, s, o, dw, sums_fit_int32);
#endif
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  std::vector<int64_t> partial(static_cast<size_t>(tasks) * ot, 0);
  parallel_for(tasks, [&](int t) {
    thread_local Kept<PackedS16> packed;
    thread_local Kept<std::vector<int16_t>> cols, padded;
    thread_local Kept<std::vector<int64_t>> sums;
    cols.resize(static_cast<size_t>(rows) * taps);
    sums.resize(ot);
    int64_t* mine = partial.data() + static_cast<size_t>(t) * ot;
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      im2col_image(x + n * image, s, cols.data(), padded);
      pack(err + static_cast<size_t>(n) * rows * o, true, cols.data(), o, taps, rows, &packed);
      product_rows(packed, 0, o, taps, block, sums.data(), 0);
      for (size_t i = 0; i < ot; ++i) mine[i] += sums[i];
    }
  });
  std::copy(partial.begin(), partial.begin() + ot, dw);
  for (int t = 1; t < tasks; ++t)
    for (size_t i = 0; i < ot; ++i) dw[i] += partial[static_cast<size_t>(t) * ot + i];
}

// conv_bwd_data_s16_s64: on the planar path the error's pair planes per pool thread; else
// err and w packed as matmul_s16 packs them (its own buffers) and one image's patch sums
// on every pool thread.
ScratchList conv_bwd_data_s16_scratch(const Col2imShape& s, int o) {
  ScratchList out;
  const size_t threads = pool_threads();
#ifdef DSPTRAIN_X86
  if (planar_bwd_data(s) && o > 0 && s.oh * s.ow > 0) {
    out.emplace_back("conv2d_bwd_data_s16.error_pair_planes (per thread)", threads * bwd_data_planes(s, o).words * sizeof(int32_t));
    return out;
  }
#endif
  const int image_rows = s.oh * s.ow, m = s.n * image_rows, taps = s.kh * s.kw * s.c;
  for (const auto& [name, bytes] : matmul_s16_scratch(m, taps, o, false))
    out.emplace_back("conv2d_bwd_data_s16" + name.substr(name.find('.')), bytes);
  out.emplace_back("conv2d_bwd_data_s16.image_sums (per thread)", threads * image_rows * taps * sizeof(int64_t));
  return out;
}

// conv_fwd_s16_s64 and conv_wgrad_s16_s64, per pool thread: the planar paths' channel
// planes (and the forward's pair planes, the weight gradient's error planes), else one
// image's patches, its padded copy, the packed operands (and the weight gradient's sums).
ScratchList conv_s16_scratch(bool weight_gradient, const Col2imShape& s, int o) {
  const size_t threads = pool_threads(), rows = static_cast<size_t>(s.oh) * s.ow;
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c;
  const size_t plane = static_cast<size_t>(s.h + 2 * s.pad) * (s.w + 2 * s.pad);
  const std::string name = weight_gradient ? "conv2d_bwd_weight_s16" : "conv2d_s16";
  ScratchList out;
  const auto add = [&](const char* buffer, size_t bytes) { out.emplace_back(name + "." + buffer + " (per thread)", threads * bytes); };
  if (weight_gradient && taps_wgrad(s)) return conv_wgrad_s16_taps_scratch(s, o);
  if (planar(s)) {
    add("channel_planes", (s.c * plane + 64) * sizeof(int16_t));
#ifdef DSPTRAIN_X86
    if (weight_gradient) add("error_planes", o * wgrad_error_plane(s) * sizeof(int16_t));
#endif
    if (!weight_gradient) add("pair_planes", (s.c * plane + 32) * sizeof(int32_t));
    return out;
  }
  add("patches", rows * taps * sizeof(int16_t));
  add("padded_image", (s.c * plane + 32) * sizeof(int16_t));
  if (weight_gradient) {
    const size_t pairs = (rows + 1) / 2, panels = (taps + kPanel - 1) / kPanel;
    add("packed_b", panels * pairs * kPanel * 2 * sizeof(int16_t));
    add("a_pairs", o * pairs * sizeof(int32_t));
    add("sums", o * taps * sizeof(int64_t));
  } else {
    const size_t pairs = (taps + 1) / 2, panels = (o + kPanel - 1) / kPanel;
    add("packed_b", panels * pairs * kPanel * 2 * sizeof(int16_t));
    if (taps % 2) add("a_pairs", rows * pairs * sizeof(int32_t));
  }
  return out;
}

}  // namespace dsptrain
