// Convolutions for few channels, on the GEMM microkernels of the active ISA but with the
// pixels as the wide dimension. im2col + GEMM puts the output channels on the GEMM's
// columns, so with 6 or 16 of them a 64-column tile does 10-25% useful work; here the
// weights are the (short) A rows and panels of nr pixels are the B columns, gathered
// from the padded source straight into the packed layout (no patch matrix, no pack_b).
// The weight gradient turns the same gather around: taps are the columns and the long
// pixel reduction is cut into blocks, one accumulator per task, summed at the end.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "conv_panels.h"
#include "conv_transpose.h"
#include "gemm.h"
#include "gemm_kernels.h"
#include "interleave.h"
#include "scratch.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

namespace dsptrain {
namespace {

constexpr size_t kSlack = 64;  // bytes after the padded source that loads may touch

// int32 arithmetic mod 2^32, as the microkernels' vector adds do (exact whenever the
// true result fits int32, which the depth limits guarantee).
inline int32_t wrap_add(int32_t a, int32_t b) { return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b)); }
inline int32_t wrap_mul(int32_t a, int32_t b) { return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b)); }

// panel[g][j][0..4] = the 4 bytes at src + base[j] + (g / gpr) * rs + (g % gpr) * 4, for
// g < kh * gpr and j < nr: the pixel panel's gather, as dword gathers where there are.
void gather_panel_scalar(const int8_t* src, const int32_t* base, int nr, int kh, int gpr, ptrdiff_t rs,
                         int8_t* panel) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* s = src + base[j];
    int8_t* dst = panel + j * 4;
    for (int i = 0; i < kh; ++i, s += rs)
      for (int g = 0; g < gpr; ++g, dst += nr * 4) std::memcpy(dst, s + g * 4, 4);
  }
}

#ifdef DSPTRAIN_X86
__attribute__((target("avx512f"))) void gather_panel_avx512(const int8_t* src, const int32_t* base, int nr, int kh,
                                                            int gpr, ptrdiff_t rs, int8_t* panel) {
  for (int i = 0; i < kh; ++i)
    for (int g = 0; g < gpr; ++g, panel += nr * 4) {
      const int8_t* s = src + i * rs + g * 4;
      for (int j = 0; j < nr; j += 16) {
        const __m512i idx = _mm512_loadu_si512(base + j);
        _mm512_storeu_si512(panel + j * 4, _mm512_i32gather_epi32(idx, s, 1));
      }
    }
}

__attribute__((target("avx2"))) void gather_panel_avx2(const int8_t* src, const int32_t* base, int nr, int kh,
                                                       int gpr, ptrdiff_t rs, int8_t* panel) {
  for (int i = 0; i < kh; ++i)
    for (int g = 0; g < gpr; ++g, panel += nr * 4) {
      const int* s = reinterpret_cast<const int*>(src + i * rs + g * 4);
      for (int j = 0; j < nr; j += 8) {
        const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + j));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + j * 4), _mm256_i32gather_epi32(s, idx, 1));
      }
    }
}
#endif

using GatherFn = void (*)(const int8_t*, const int32_t*, int, int, int, ptrdiff_t, int8_t*);

GatherFn gather_for(const GemmKernel* kern) {
#ifdef DSPTRAIN_X86
  if (kern->isa == Isa::kAvx512Vnni && kern->nr % 16 == 0) return gather_panel_avx512;
  if ((kern->isa == Isa::kAvxVnni || kern->isa == Isa::kAvx2) && kern->nr % 8 == 0) return gather_panel_avx2;
#endif
  return gather_panel_scalar;
}

// acc[r * ld + j] += tmp[r * nr + j] + corr[j] over an mr x nr tile. Its own function
// with __restrict pointers by value, so the loop vectorises (in the task lambda the
// compiler must assume every int store may alias the captured sizes).
template <typename T>
void accumulate_tile(const int32_t* __restrict tmp, const int32_t* __restrict corr, int mr, int nr,
                     T* __restrict acc, size_t ld) {
  for (int r = 0; r < mr; ++r, acc += ld, tmp += nr)
    for (int j = 0; j < nr; ++j) acc[j] += wrap_add(tmp[j], corr[j]);
}

// out[j * ld + r] = tmp[r * nr + j] + corr[j] for r < rows, j < cols (restrict, as above).
template <typename T>
void store_transposed(const int32_t* __restrict tmp, const int32_t* __restrict corr, int rows, int nr, int cols,
                      T* __restrict out, int ld) {
  for (int j = 0; j < cols; ++j, out += ld)
    for (int r = 0; r < rows; ++r) out[r] = wrap_add(tmp[r * nr + j], corr[j]);
}

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Walks output pixels p, p+1, ... of `s`, yielding each one's base offset.
struct PixelWalk {
  const PaddedSrc& s;
  int b, oy, ox;
  PixelWalk(const PaddedSrc& src, ptrdiff_t p) : s(src) {
    const ptrdiff_t per_image = static_cast<ptrdiff_t>(s.oh) * s.ow;
    b = static_cast<int>(p / per_image);
    oy = static_cast<int>(p % per_image / s.ow);
    ox = static_cast<int>(p % s.ow);
  }
  ptrdiff_t next() {
    const ptrdiff_t at = s.base(b, oy, ox);
    if (++ox == s.ow) {
      ox = 0;
      if (++oy == s.oh) oy = 0, ++b;
    }
    return at;
  }
};

// For the offset trick (A packed as u8 = a + 128, corrected by -128 * column sums of B):
// row `row` of the packed A set to u8 ones, so the microkernel's own output row `row` is
// the column sums of B. Adds a tile when `row` starts one (the other rows go unused).
void set_ones_row(const GemmKernel* kern, uint8_t* a_pack, int row, int kgroups) {
  const int mr = kern->mr;
  uint8_t* tile = a_pack + static_cast<size_t>(row / mr) * kgroups * mr * 4;
  if (row % mr == 0) std::memset(tile, 1, static_cast<size_t>(kgroups) * mr * 4);
  for (int g = 0; g < kgroups; ++g) std::memset(tile + (g * mr + row % mr) * 4, 1, 4);
}

// Whether the offset trick's column sums come from a ones row (kernels without colsum).
bool ones_row(const GemmKernel* kern) { return kern->offset_trick && kern->colsum == nullptr; }

// Whether `bytes` bytes at `p` hold no negative value (an OR of them all: a vectorised pass).
bool nonnegative(const int8_t* p, size_t bytes) {
  uint8_t any = 0;
  for (size_t i = 0; i < bytes; ++i) any |= static_cast<uint8_t>(p[i]);
  return (any & 0x80) == 0;
}
// Packed A tiles for `rows` rows, plus the ones row (at index `rows`) if there is one.
int a_tiles(const GemmKernel* kern, int rows) { return (rows + (ones_row(kern) ? 1 : 0) + kern->mr - 1) / kern->mr; }

// corr[0..nr) = -128 * column sums of a packed B panel, where the kernel computes them.
void colsum_correction(const GemmKernel* kern, const int8_t* panel, int kgroups, int32_t* corr) {
  if (!kern->offset_trick || kern->colsum == nullptr) return;
  kern->colsum(panel, kgroups, corr);
  for (int j = 0; j < kern->nr; ++j) corr[j] = wrap_mul(corr[j], -128);
}

}  // namespace

bool wgrad_panels_read_rows(const GemmKernel* kern) {
  return kern->micro_rows != nullptr && kern->offset_trick && kern->colsum != nullptr && kern->k_align == 1;
}

PaddedSrc pad_source(const int8_t* src, int n, int h, int w, int ch, int off_y, int off_x, int dil, int hp, int wp,
                     int oh, int ow, int kh, int kw, int step, std::vector<int8_t>* buf, uint8_t bias) {
  const size_t row = static_cast<size_t>(wp) * ch, image = row * hp;
  const auto copy = [bias](int8_t* dst, const int8_t* from, size_t bytes) {
    if (bias == 0) {
      std::memcpy(dst, from, bytes);
      return;
    }
    for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<int8_t>(from[i] ^ bias);
  };
  int8_t* d = grow(*buf, image * n + kSlack);
  std::memset(d + image * n, 0, kSlack);
  // Source column of padded column x' (or -1): computed once, shared by all rows.
  thread_local Kept<std::vector<int>> col_src;
  int* cs = grow(col_src, static_cast<size_t>(wp));
  for (int x = 0; x < wp; ++x) {
    const int num = x - off_x;
    cs[x] = num >= 0 && num % dil == 0 && num / dil < w ? num / dil : -1;
  }
  parallel_ranges(n * hp, image * n, [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const int b = r / hp, y = r % hp, num = y - off_y;
      int8_t* out = d + static_cast<size_t>(r) * row;
      if (!(num >= 0 && num % dil == 0 && num / dil < h)) {
        std::memset(out, bias, row);
        continue;
      }
      const int8_t* in = src + (static_cast<size_t>(b) * h + num / dil) * w * ch;
      if (dil == 1) {  // [zeros | the source row | zeros]
        const int x0 = std::max(off_x, 0), x1 = std::min(wp, off_x + w);
        std::memset(out, bias, static_cast<size_t>(x0) * ch);
        copy(out + static_cast<size_t>(x0) * ch, in + static_cast<size_t>(x0 - off_x) * ch,
             static_cast<size_t>(std::max(x1 - x0, 0)) * ch);
        std::memset(out + static_cast<size_t>(std::max(x1, x0)) * ch, bias, static_cast<size_t>(wp - std::max(x1, x0)) * ch);
        continue;
      }
      for (int x = 0; x < wp; ++x) {
        if (cs[x] < 0) std::memset(out + static_cast<size_t>(x) * ch, bias, ch);
        else copy(out + static_cast<size_t>(x) * ch, in + static_cast<size_t>(cs[x]) * ch, ch);
      }
    }
  });
  return PaddedSrc{d, n, hp, wp, ch, oh, ow, kh, kw, step};
}

template <typename T>
void conv_pixel_panels(const PaddedSrc& s, const int8_t* w_runs, int oc, T* out) {
  const GemmKernel* kern = panel_kernel();
  const int mr = kern->mr, nr = kern->nr, runp = run_pad(s.run()), groups_per_run = runp / 4;
  const int kgroups = s.kh * groups_per_run, tiles = a_tiles(kern, oc);
  const ptrdiff_t pixels = s.pixels(), rs = s.row_stride();
  const size_t a_tile_bytes = static_cast<size_t>(kgroups) * mr * 4 * kern->a_elem_bytes;
  thread_local Kept<std::vector<uint8_t>> a_buf;
  uint8_t* a_pack = grow(a_buf, a_tile_bytes * tiles);
  kern->pack_a(MatrixS8{w_runs, kgroups * 4, 1}, oc, kgroups * 4, a_pack);
  if (ones_row(kern)) set_ones_row(kern, a_pack, oc, kgroups);
  const GatherFn gather = gather_for(kern);

  const ptrdiff_t panels = (pixels + nr - 1) / nr;
  const int tasks = static_cast<int>(std::min<ptrdiff_t>(panels, 8 * pool_threads()));
  parallel_for(tasks, [&](int task) {
    thread_local Kept<std::vector<int8_t>> b_buf;
    int8_t* panel = grow(b_buf, static_cast<size_t>(kgroups) * nr * 4);
    alignas(64) int32_t tmp[8 * 64];
    alignas(64) int32_t zeros[64] = {}, corr[64] = {};
    alignas(64) int32_t base[64];
    const ptrdiff_t first = panels * task / tasks, last = panels * (task + 1) / tasks;
    PixelWalk walk(s, first * nr);
    for (ptrdiff_t pn = first; pn < last; ++pn) {
      const ptrdiff_t p0 = pn * nr;
      const int valid = static_cast<int>(std::min<ptrdiff_t>(nr, pixels - p0));
      for (int j = 0; j < valid; ++j) base[j] = static_cast<int32_t>(walk.next());
      for (int j = valid; j < nr; ++j) base[j] = base[0];  // in bounds; results dropped
      gather(s.d, base, nr, s.kh, groups_per_run, rs, panel);
      colsum_correction(kern, panel, kgroups, corr);
      for (int t = tiles - 1; t >= 0; --t) {  // the ones row, if any, is in the last tile
        kern->micro(a_pack + t * a_tile_bytes, panel, kgroups, tmp, nr, mr, nr, false, zeros);
        if (ones_row(kern) && t == tiles - 1)
          for (int j = 0; j < nr; ++j) corr[j] = wrap_mul(tmp[(oc % mr) * nr + j], -128);
        store_transposed(tmp, corr, std::min(mr, oc - t * mr), nr, valid, out + p0 * oc + t * mr, oc);
      }
    }
  });
}

template <typename T>
void conv_wgrad_panels(const PaddedSrc& s, const int8_t* err, int oc, T* dw) {
  const GemmKernel* kern = panel_kernel();
  const int mr = kern->mr, nr = kern->nr, run = s.run(), runp = run_pad(run);
  const int taps = s.kh * runp, tiles = a_tiles(kern, oc), panels = (taps + nr - 1) / nr;
  const ptrdiff_t pixels = s.pixels(), rs = s.row_stride();
  constexpr int kBlock = 256;  // pixels per block: 64 groups of 4
  constexpr int kGroups = kBlock / 4;
  const ptrdiff_t blocks = (pixels + kBlock - 1) / kBlock;
  const int tasks = static_cast<int>(std::min<ptrdiff_t>(blocks, 4 * pool_threads()));
  const size_t ld = static_cast<size_t>(panels) * nr, acc_size = static_cast<size_t>(tiles) * mr * ld;
  thread_local Kept<std::vector<T>> acc_buf;
  T* acc_all = grow(acc_buf, acc_size * tasks);
  std::fill(acc_all, acc_all + acc_size * tasks, T{0});
  const size_t a_bytes = static_cast<size_t>(tiles) * kGroups * mr * 4 * kern->a_elem_bytes;
  const size_t panel_bytes = static_cast<size_t>(kGroups) * nr * 4;
  thread_local Kept<std::vector<int32_t>> tap_buf;  // where tap t's dword goes in a group's panels
  int32_t* tap_off = grow(tap_buf, static_cast<size_t>(taps));
  for (int t = 0; t < taps; ++t) tap_off[t] = static_cast<int32_t>((t / nr) * panel_bytes + (t % nr) * 4);
  // Where the kernel reads A in place, err^T is transposed once, biased (a + 128), and each
  // block's rows are read from it by micro_rows: packing A strided by oc per block (a byte
  // at a time) took 42 % of VGG-11's conv1 weight gradient and 11 % of conv2's.
  const bool rows_a = wgrad_panels_read_rows(kern);
  const ptrdiff_t err_ld = rows_a ? wgrad_row_stride(static_cast<int>(pixels)) : 0;
  thread_local Kept<std::vector<int8_t>> err_t_buf;
  int8_t* err_t = rows_a ? grow(err_t_buf, static_cast<size_t>(oc) * err_ld + kWgradRowSlack) : nullptr;
  if (rows_a) transpose(err, pixels, oc, err_t, 0x80, err_ld);

  parallel_for(tasks, [&](int task) {
    thread_local Kept<std::vector<uint8_t>> a_buf;
    thread_local Kept<std::vector<int8_t>> b_buf, zero_buf;
    uint8_t* a_pack = rows_a ? nullptr : grow(a_buf, a_bytes);
    std::vector<const uint8_t*> a_rows(rows_a ? static_cast<size_t>(tiles) * mr : 0);
    int8_t* b_pack = grow(b_buf, panel_bytes * panels);
    if (taps % nr)  // the last panel's columns past the taps: never written below, zero for the sign test
      for (int g = 0; g < kGroups; ++g)
        std::memset(b_pack + (panels - 1) * panel_bytes + (static_cast<size_t>(g) * nr + taps % nr) * 4, 0,
                    static_cast<size_t>(nr - taps % nr) * 4);
    // Whether the block's panels (their first kgroups groups: a short last block leaves the
    // rest from the one before) hold no negative value.
    const auto panels_nonnegative = [&](int kgroups) {
      for (int pn = 0; pn < panels; ++pn)
        if (!nonnegative(b_pack + pn * panel_bytes, static_cast<size_t>(kgroups) * nr * 4)) return false;
      return true;
    };
    const int8_t* zero_row = grow(zero_buf, static_cast<size_t>(runp) + 16);
    alignas(64) int32_t tmp[8 * 64];
    alignas(64) int32_t zeros[64] = {}, corr[64] = {};
    T* acc = acc_all + acc_size * task;
    const ptrdiff_t first = blocks * task / tasks, last = blocks * (task + 1) / tasks;
    PixelWalk walk(s, first * kBlock);
    for (ptrdiff_t blk = first; blk < last; ++blk) {
      const ptrdiff_t p0 = blk * kBlock;
      const int valid = static_cast<int>(std::min<ptrdiff_t>(kBlock, pixels - p0));
      const int kgroups = (valid + 3) / 4;
      const APiece piece{0, kgroups};  // the block's pixels past `valid` meet zero B columns
      for (int g = 0; g < kgroups; ++g) {  // B[tap, pixel], 4 pixels a dword
        const int8_t* rows[4];
        for (int q = 0; q < 4; ++q) rows[q] = g * 4 + q < valid ? s.d + walk.next() : zero_row;
        for (int i = 0; i < s.kh; ++i) {
          const int8_t* at[4] = {rows[0] + (rows[0] == zero_row ? 0 : i * rs), rows[1] + (rows[1] == zero_row ? 0 : i * rs),
                                 rows[2] + (rows[2] == zero_row ? 0 : i * rs), rows[3] + (rows[3] == zero_row ? 0 : i * rs)};
          interleave4(at, runp, tap_off + i * runp, b_pack + g * nr * 4);
        }
      }
      // A (the errors): biased rows read in place, or packed for the kernel the block can
      // take (AVX2: vpmaddubsw where the patches hold no negative value, a ReLU's output,
      // or the errors lie within [-64, 64] but for a few outliers; else the int16 kernel).
      const MatrixS8 err_block{err + p0 * oc, 1, oc};
      const bool unsigned_b = !rows_a && kern->micro_b_unsigned && panels_nonnegative(kgroups);
      SmallAOutliers outliers;
      const bool small_a = !rows_a && !unsigned_b && kern->pack_a_small && panels >= kSmallAMinPanels &&
                           kern->pack_a_small(err_block, oc, valid, a_pack, &outliers);
      size_t a_tile_bytes = static_cast<size_t>(kgroups) * mr * 4 * kern->a_elem_bytes;
      MicroFn micro = kern->micro;
      if (rows_a) {  // row o of the block: err^T's row o from pixel p0 (rows past oc repeat row 0)
        for (int r = 0; r < tiles * mr; ++r)
          a_rows[r] = reinterpret_cast<const uint8_t*>(err_t) + (r < oc ? r : 0) * err_ld + p0;
      } else if (unsigned_b) {
        kern->pack_a_bytes(err_block, oc, valid, a_pack);
        a_tile_bytes = static_cast<size_t>(kgroups) * mr * 4;
        micro = kern->micro_b_unsigned;
      } else if (small_a) {
        a_tile_bytes = static_cast<size_t>(kgroups) * mr * 4 + kSmallATail;
        micro = kern->micro_small_a;
      } else {
        kern->pack_a(err_block, oc, valid, a_pack);
        if (ones_row(kern)) set_ones_row(kern, a_pack, oc, kgroups);
      }
      if (!rows_a)
        count_block(unsigned_b ? BlockKernel::kBUnsigned : small_a ? BlockKernel::kSmallA : BlockKernel::kSigned);
      // The byte kernels' pair form (AVX2: 6 x 16, two panels a call) where the ISA has it;
      // it has no offset trick, so no column corrections (corr stays zero).
      const MicroPairFn pair = unsigned_b ? kern->micro_pair_b_unsigned : small_a ? kern->micro_pair_small_a : nullptr;
      int pn = 0;
      if (pair && !kern->offset_trick && panels >= 2) count_pair_block();
      for (; pair && !kern->offset_trick && pn + 1 < panels; pn += 2) {
        const int8_t* panel = b_pack + pn * panel_bytes;
        for (int t = tiles - 1; t >= 0; --t) {
          pair(a_pack + t * a_tile_bytes, panel, panel + panel_bytes, kgroups, tmp, 2 * nr, mr, 2 * nr, false);
          if (small_a && outliers.total > 0 && outliers.count(t) > 0)
            kern->add_outliers(outliers.of(t), outliers.count(t), panel, panel_bytes, 2, nr, tmp, 2 * nr, t * mr);
          accumulate_tile(tmp, corr, mr, 2 * nr, acc + static_cast<size_t>(t) * mr * ld + pn * nr, ld);
        }
      }
      for (; pn < panels; ++pn) {
        const int8_t* panel = b_pack + pn * panel_bytes;
        colsum_correction(kern, panel, kgroups, corr);
        for (int t = tiles - 1; t >= 0; --t) {  // the ones row, if any, is in the last tile
          if (rows_a) kern->micro_rows(a_rows.data() + t * mr, &piece, 1, panel, tmp, nr, mr, nr, false, zeros);
          else micro(a_pack + t * a_tile_bytes, panel, kgroups, tmp, nr, mr, nr, false, zeros);
          if (small_a && outliers.total > 0 && outliers.count(t) > 0)
            kern->add_outliers(outliers.of(t), outliers.count(t), panel, panel_bytes, 1, nr, tmp, nr, t * mr);
          if (ones_row(kern) && t == tiles - 1)
            for (int j = 0; j < nr; ++j) corr[j] = wrap_mul(tmp[(oc % mr) * nr + j], -128);
          accumulate_tile(tmp, corr, mr, nr, acc + static_cast<size_t>(t) * mr * ld + pn * nr, ld);
        }
      }
    }
  });
  // Sum the tasks' accumulators and drop the run padding: dw[o, i, j, c].
  const int per_o = s.kh * run;
  parallel_ranges(oc, static_cast<size_t>(oc) * ld * tasks * sizeof(T), [&](int o0, int o1) {
    for (int o = o0; o < o1; ++o)
      for (int i = 0; i < s.kh; ++i) {
        T* d = dw + static_cast<size_t>(o) * per_o + i * run;
        const T* a = acc_all + static_cast<size_t>(o) * ld + i * runp;
        for (int r = 0; r < run; ++r) d[r] = a[r];
        for (int task = 1; task < tasks; ++task)
          for (int r = 0; r < run; ++r) d[r] += a[acc_size * task + r];
      }
  });
}

template void conv_pixel_panels<int32_t>(const PaddedSrc&, const int8_t*, int, int32_t*);
template void conv_pixel_panels<int64_t>(const PaddedSrc&, const int8_t*, int, int64_t*);
template void conv_wgrad_panels<int32_t>(const PaddedSrc&, const int8_t*, int, int32_t*);
template void conv_wgrad_panels<int64_t>(const PaddedSrc&, const int8_t*, int, int64_t*);

}  // namespace dsptrain
