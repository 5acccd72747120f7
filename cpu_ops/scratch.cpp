// Scratch bytes of the CPU kernels by buffer (see scratch.h). The algorithm choice comes
// from conv_algorithm() itself; the sizes repeat the `grow`/`resize` calls of the kernels.
// Also the registry of kept buffers that release_scratch() empties.
#include "scratch.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "conv_lanes.h"
#include "conv_panels.h"
#include "conv_wgrad_planes.h"
#include "conv_wgrad_stream.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr size_t kSlack = 64;  // conv_panels.cpp: bytes after the padded source

bool acc64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }  // bindings.h needs_int64
size_t up(size_t n, size_t m) { return (n + m - 1) / m * m; }
std::string elem(bool is64) { return is64 ? ".int64" : ".int32"; }

void add(ScratchList* out, const std::string& name, size_t bytes) {
  for (auto& item : *out)
    if (item.first == name) {
      item.second = std::max(item.second, bytes);
      return;
    }
  out->emplace_back(name, bytes);
}

// gemm_driver.cpp: the packed B of gemm_s8_s32 (calling thread; not when the caller
// packs B itself), the A block of every pool thread (not when A is read in place:
// gemm_packed's a_padded), and for int64 the int32 partial product of each K chunk.
// `a_in_place`: gemm_rows reads A where it lies (no A block).
// gemm_avx2.cpp's pack_a_small on blocks of rows x kc: the rows' sums, and the tiles'
// outlier lists with a row's room to spare and their slots.
void small_a_into(ScratchList* out, int threads, size_t rows, size_t kc, int mr) {
  add(out, "gemm.a_row_sums (per thread)", threads * rows * sizeof(int32_t));
  add(out, "gemm.a_outliers (per thread)", threads * small_a_outlier_words(rows, kc, mr) * sizeof(uint32_t));
}

void gemm_into(ScratchList* out, int m, int n, int k, bool is64, bool a_padded = false, bool packs_b = true,
               bool a_in_place = false) {
  const GemmKernel* kern = gemm_kernel(gemm_isa(active_isa(), std::min(k, kMaxInt32Depth)));
  const int threads = pool_threads();
  if (is64) {
    add(out, "gemm.int64_partial", static_cast<size_t>(m) * n * 4);
    k = std::min(k, kMaxInt32Depth);
  }
  if (packs_b) add(out, "gemm.packed_b", packed_b_bytes(n, k, active_isa()));
  if (a_in_place || (a_padded && !is64 && kern->a_is_rows && k <= kern->kc)) return;
  int m_blocks = static_cast<int>(up((m + kern->mc - 1) / kern->mc, threads));
  m_blocks = std::min(m_blocks, (m + kern->mr - 1) / kern->mr);
  m_blocks = std::max(m_blocks, 1);
  const size_t mc = up((m + m_blocks - 1) / m_blocks, kern->mr);
  const size_t a_bytes = mc * 4 * padded_kgroups(kern, std::min(k, kern->kc)) * kern->a_elem_bytes +
                         (mc / kern->mr + 1) * kSmallATail;  // pack_a_small's row corrections
  add(out, "gemm.a_block (per thread)", threads * (a_bytes + 64));
  if (kern->pack_a_small) small_a_into(out, threads, mc, std::min(k, kern->kc), kern->mr);
}

int a_tiles(const GemmKernel* kern, int rows) { return (rows + (kern->offset_trick ? 1 : 0) + kern->mr - 1) / kern->mr; }

// conv_panels.cpp: conv_pixel_panels with `oc` output channels and `depth_runs` = kh * run_pad.
void pixel_panels_into(ScratchList* out, int oc, int depth_runs, bool is64) {
  const GemmKernel* kern = panel_kernel();
  const size_t kgroups = depth_runs / 4;
  add(out, "panels.a_pack" + elem(is64), kgroups * kern->mr * 4 * kern->a_elem_bytes * a_tiles(kern, oc));
  add(out, "panels.b_panel (per thread)" + elem(is64), static_cast<size_t>(pool_threads()) * kgroups * kern->nr * 4);
}

void padded_into(ScratchList* out, size_t bytes, int wp) {
  add(out, "conv.padded_source", bytes + kSlack);
  add(out, "conv.padded_columns", static_cast<size_t>(wp) * sizeof(int));
}

}  // namespace

ScratchList conv_scratch(ConvPass pass, const ConvShape& s, bool requant) {
  // Buffers declared inside a template (run_requant, conv2d_bwd_weight<T>, the panel
  // kernels<T>) are one per instantiation: hence the entry point / element type in names.
  ScratchList out;
  const std::string algo = conv_algorithm(pass, s);
  const int oh = s.oh(), ow = s.ow();
  const size_t pixels = static_cast<size_t>(s.n) * oh * ow;
  if (pass == ConvPass::kForward) {
    const bool is64 = acc64(static_cast<long long>(s.kh) * s.kw * s.c);
    const int k = s.kh * s.kw * s.c;
    if (requant) add(&out, "requant.acc.conv2d" + elem(is64), pixels * s.o * (is64 ? 8 : 4));
    if (algo == "gemm_1x1" || algo == "gemm_1x1_strided") {   // x's pixels read in place by the A packing
      gemm_into(&out, static_cast<int>(pixels), s.o, k, is64);
      return out;
    }
    const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
    padded_into(&out, static_cast<size_t>(s.n) * hp * wp * s.c, wp);
    if (algo == "pixel_panels" || algo == "lanes") {   // conv_lanes: the weights in runs, no panels
      add(&out, "conv.weights", static_cast<size_t>(s.o) * s.kh * run_pad(s.kw * s.c));
      if (algo == "pixel_panels") pixel_panels_into(&out, s.o, s.kh * run_pad(s.kw * s.c), is64);
    } else if (algo == "implicit_gemm" || algo == "implicit_gemm_trimmed") {  // gemm_rows(_trimmed): the weights packed, nothing for A
      add(&out, "conv.fwd_packed_w", packed_b_bytes(s.o, k, active_isa()));
    } else if (algo == "implicit_gemm_c4") {  // the same on x and w widened to 4 channels
      const int k4 = s.kh * s.kw * 4;
      padded_into(&out, static_cast<size_t>(s.n) * hp * wp * 4, wp);
      add(&out, "conv.weights", static_cast<size_t>(s.o) * k4);
      add(&out, "conv.fwd_c4_packed_w", packed_b_bytes(s.o, k4, active_isa()));
    } else {
      add(&out, "conv.im2col", static_cast<size_t>(a_rows(active_isa(), pixels)) * a_row_bytes(active_isa(), k));
      gemm_into(&out, static_cast<int>(pixels), s.o, k, is64, true);
    }
    return out;
  }
  if (pass == ConvPass::kBackwardData) {
    const bool is64 = acc64(static_cast<long long>(s.o) * s.kh * s.kw);
    const size_t m = static_cast<size_t>(s.n) * s.h * s.w;
    if (requant) add(&out, "requant.acc.conv2d_bwd_data" + elem(is64), m * s.c * (is64 ? 8 : 4));
    if (algo == "gemm_1x1") {   // the GEMM on err in place
      gemm_into(&out, static_cast<int>(m), s.c, s.o, is64);
      return out;
    }
    if (algo == "gemm_1x1_strided") {   // the GEMM on err in place into [P, C] rows, then spread into dx
      add(&out, "conv.im2col", pixels * s.c * (is64 ? 8 : 4));
      gemm_into(&out, static_cast<int>(pixels), s.c, s.o, is64);
      return out;
    }
    if (algo == "err_broadcast") {   // conv_lanes.cpp: the weights as broadcast vectors (kept)
      add(&out, "conv.bwd_broadcast_weights", bwd_broadcast_kept_bytes(s));
      return out;
    }
    const bool panels = algo == "pixel_panels" || algo == "lanes";
    const int run = s.kw * s.o, k = s.kh * (panels ? run_pad(run) : run);
    const bool packs_w = !is64 && !panels && pack_b_k_rows_fits(s.c, k, active_isa());  // conv_paths.cpp bwd_data_packs_w
    if (!packs_w) add(&out, "conv.weights", static_cast<size_t>(s.c) * k);
    const int hp = s.h + s.kh - 1, wp = s.w + s.kw - 1;
    padded_into(&out, static_cast<size_t>(s.n) * hp * wp * s.o, wp);
    if (panels) {
      if (algo == "pixel_panels") pixel_panels_into(&out, s.c, k, is64);
    } else if (algo == "implicit_gemm" || algo == "implicit_gemm_trimmed") {
      add(&out, "conv.bwd_data_packed_w", packed_b_bytes(s.c, k, active_isa()));
    } else {
      add(&out, "conv.im2col", static_cast<size_t>(a_rows(active_isa(), m)) * a_row_bytes(active_isa(), k));
      gemm_into(&out, static_cast<int>(m), s.c, k, is64, true, !packs_w);
      if (packs_w) add(&out, "conv.bwd_data_packed_w", packed_b_bytes(s.c, k, active_isa()));
    }
    return out;
  }
  // The weight gradient: accumulates over the pixels.
  const bool is64 = acc64(static_cast<long long>(pixels));
  const size_t bytes = is64 ? 8 : 4;
  if (algo == "wgrad_planes") {   // conv_wgrad_planes.cpp: the channel planes, each chunk's dw^T, packed error
    add(&out, "wgrad.planes", wgrad_planes_source_bytes(s));
    add(&out, "wgrad.planes_partial", wgrad_planes_partial_bytes(s));
    add(&out, "wgrad.planes_packed_err (per thread)", pool_threads() * wgrad_planes_packed_bytes(s));
    return out;
  }
  if (algo == "gemm_1x1_strided") {   // err^T, B packed from x's strided pixels in place (int32 only)
    add(&out, "conv.weights", static_cast<size_t>(s.o) * pixels);
    add(&out, "conv.wgrad_packed_pixels", packed_b_bytes(s.c, static_cast<int>(pixels), active_isa()));
    gemm_into(&out, s.o, s.c, static_cast<int>(pixels), false, false, false);
    return out;
  }
  const int hp = s.h + 2 * s.pad, wp = s.w + 2 * s.pad;
  padded_into(&out, static_cast<size_t>(s.n) * hp * wp * s.c, wp);
  if (algo == "wgrad_lanes") return out;   // conv_lanes.cpp: the padded source and the stack
  if (algo == "wgrad_olanes") {   // conv_lanes.cpp: the source as channel runs, the error as vectors, the tasks' sums
    add(&out, "wgrad.runs_and_error_vectors", wgrad_olanes_kept_bytes(s.n, hp, wp, s.c, s.kw, s.ow(), s.oh()));
    add(&out, "wgrad.sums", wgrad_olanes_sums_bytes(s.kh, s.kw, s.c));
    return out;
  }
  if (algo == "wgrad_panels") {
    const GemmKernel* kern = panel_kernel();
    const int threads = pool_threads(), runp = run_pad(s.kw * s.c), taps = s.kh * runp;
    const size_t tiles = a_tiles(kern, s.o), panels = (taps + kern->nr - 1) / kern->nr;
    const size_t blocks = (pixels + 255) / 256, tasks = std::min<size_t>(blocks, 4 * threads);
    add(&out, "wgrad.acc" + elem(is64), tiles * kern->mr * panels * kern->nr * tasks * bytes);
    add(&out, "wgrad.tap_offsets" + elem(is64), static_cast<size_t>(taps) * 4);
    if (wgrad_panels_read_rows(kern)) {  // err^T, biased, read in place (conv_panels.cpp)
      add(&out, "wgrad.err_t" + elem(is64), static_cast<size_t>(s.o) * wgrad_row_stride(static_cast<int>(pixels)) + kWgradRowSlack);
    } else {
      add(&out, "wgrad.a_pack (per thread)" + elem(is64), threads * tiles * 64 * kern->mr * 4 * kern->a_elem_bytes);
      if (kern->pack_a_small)  // gemm_avx2.cpp's, shared with gemm_packed
        small_a_into(&out, threads, s.o, std::min<ptrdiff_t>(pixels, 256), kern->mr);
    }
    add(&out, "wgrad.b_pack (per thread)" + elem(is64), threads * static_cast<size_t>(64) * kern->nr * 4 * panels);
    add(&out, "wgrad.zero_row (per thread)" + elem(is64), threads * static_cast<size_t>(runp + 16));
    return out;
  }
  const int kk = s.kh * s.kw * s.c;
  if (algo == "wgrad_stream" || algo == "wgrad_stream_trimmed") {   // conv_wgrad_stream.cpp: err^T biased in place, one panel block per thread
    add(&out, "conv.weights", static_cast<size_t>(s.o) * wgrad_row_stride(static_cast<int>(pixels)) + kWgradRowSlack);
    add(&out, "wgrad.stream_panel (per thread)", pool_threads() * wgrad_stream_panel_bytes());
    return out;
  }
  const bool packs_source = !is64 && wgrad_packs_source(s);
  const bool rows_a = packs_source && gemm_kernel(gemm_isa(active_isa(), static_cast<int>(pixels)))->micro_rows;
  add(&out, "conv.weights", static_cast<size_t>(s.o) * (rows_a ? wgrad_row_stride(static_cast<int>(pixels)) : pixels) +
                                kWgradRowSlack);
  if (packs_source) {
    add(&out, "conv.wgrad_packed_patches", packed_b_bytes(kk, static_cast<int>(pixels), active_isa()));
  } else {
    add(&out, "conv.im2col", pixels * kk);
  }
  gemm_into(&out, s.o, kk, static_cast<int>(pixels), is64, false, !packs_source, rows_a);
  return out;
}

ScratchList gemm_scratch(int m, int n, int k, bool requant) {
  ScratchList out;
  const bool is64 = acc64(k);
  if (requant) add(&out, "requant.acc.gemm" + elem(is64), static_cast<size_t>(m) * n * (is64 ? 8 : 4));
  gemm_into(&out, m, n, k, is64);
  return out;
}

// ---------------------------------------------------------------- the registry of kept buffers
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<void*, scratch_detail::Dropper>> buffers;
};

// Never destroyed: pool workers' thread_local buffers leave it while the pool is joined
// during static destruction, which may come after this function's statics are gone.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

namespace scratch_detail {

void enrol(void* buffer, Dropper drop) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.buffers.emplace_back(buffer, drop);
}

void leave(void* buffer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& v = r.buffers;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const auto& item) { return item.first == buffer; }), v.end());
}

}  // namespace scratch_detail

size_t release_scratch() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  size_t bytes = 0;
  for (auto& [buffer, drop] : r.buffers) bytes += drop(buffer);
  return bytes;
}

}  // namespace dsptrain
