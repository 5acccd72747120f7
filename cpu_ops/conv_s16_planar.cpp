// The int16 convolutions of MLS (conv_exact.h) on channel planes, stride 1, AVX-512 VNNI:
// the output columns lie in the vector lanes and vpdpwssd adds two taps (or two channels)
// per lane, so no patch matrix is built or scattered. Each image is one task's, each sum
// an integer: the same result at any thread count.
#include "conv_s16_planar.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "register_block.h"
#include "scratch.h"
#include "thread_pool.h"

#ifdef DSPTRAIN_X86_PLANAR
#include <immintrin.h>
#define DSPTRAIN_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace dsptrain {
namespace {

// Accumulators e = E .. kN - 1 of a register block (named members of Regs24, so that GCC
// keeps them in registers: register_block.h) zeroed, and copied out to an array.
template <int E, int kN>
DSPTRAIN_AVX512VNNI __attribute__((always_inline)) inline void zero_regs(Regs24<__m512i>& acc) {
  if constexpr (E < kN) {
    reg<E>(acc) = _mm512_setzero_si512();
    zero_regs<E + 1, kN>(acc);
  }
}

template <int E, int kN>
DSPTRAIN_AVX512VNNI __attribute__((always_inline)) inline void copy_regs(Regs24<__m512i>& acc, __m512i* out) {
  if constexpr (E < kN) {
    out[E] = reg<E>(acc);
    copy_regs<E + 1, kN>(acc, out);
  }
}

// One image's weight gradient from channel planes (stride 1): dw[o][a][b][c] += sum over
// the output rows i and columns j of err_plane[o][i][j] * x_plane[c][i + a][j + b]. The
// columns j lie in the lanes (32 int16 per vector, masked past OW), vpdpwssd adds each
// lane pair's two products into int32, so no patch matrix is built; the lanes are summed
// once per image (the caller checks that an image's sums fit int32). After the planar
// weight gradient of Mandheling's DSP kernels (dsp_kernels/conv_planar.c).
// kB taps along the kernel's width (b0 .. b0 + kB) and kOs output channels (o0 ..) of one
// kernel row a and input channel c: kB * kOs int32 accumulators in registers, so each
// row's kOs error vectors and kB input vectors serve kB * kOs vpdpwssd.
// acc[e] += the pair products of error row e - E0 and xv, for e in [E, kEnd)
template <int E, int kEnd, int E0 = E>
DSPTRAIN_AVX512VNNI __attribute__((always_inline)) inline void add_error_products(Regs24<__m512i>& acc, const __m512i* ev,
                                                                                  __m512i xv) {
  if constexpr (E < kEnd) {
    reg<E>(acc) = _mm512_dpwssd_epi32(reg<E>(acc), ev[E - E0], xv);
    add_error_products<E + 1, kEnd, E0>(acc, ev, xv);
  }
}

// acc[b * kOs + r] += the pair products of error row r and the input vector at tap b, b >= B
template <int B, int kOs, int kB>
DSPTRAIN_AVX512VNNI __attribute__((always_inline)) inline void add_tap_products(Regs24<__m512i>& acc, const __m512i* ev,
                                                                                const int16_t* xrow) {
  if constexpr (B < kB) {
    const __m512i xv = _mm512_loadu_si512(xrow + B);
    add_error_products<B * kOs, B * kOs + kOs>(acc, ev, xv);
    add_tap_products<B + 1, kOs, kB>(acc, ev, xrow);
  }
}

template <int kOs, int kB>
DSPTRAIN_AVX512VNNI inline void wgrad_planar_taps(const int16_t* ep, size_t eplane, const int16_t* xrow, int vecs,
                                                  int c, int o0, size_t t0, size_t taps, int64_t* dw) {
  static_assert(kOs * kB <= 24, "at most 24 accumulators");
  Regs24<__m512i> acc;
  zero_regs<0, kB * kOs>(acc);
  const int16_t* e = ep + static_cast<size_t>(o0) * eplane;
  for (int v = 0; v < vecs; ++v, e += 32, xrow += 32) {
    __m512i ev[kOs];
    for (int r = 0; r < kOs; ++r) ev[r] = _mm512_loadu_si512(e + static_cast<size_t>(r) * eplane);
    add_tap_products<0, kOs, kB>(acc, ev, xrow);
  }
  __m512i sums[kB][kOs];
  copy_regs<0, kB * kOs>(acc, &sums[0][0]);
  for (int b = 0; b < kB; ++b)
    for (int r = 0; r < kOs; ++r)
      dw[static_cast<size_t>(o0 + r) * taps + t0 + static_cast<size_t>(b) * c] += _mm512_reduce_add_epi32(sums[b][r]);
}

DSPTRAIN_AVX512VNNI void wgrad_planar_image(const int16_t* ep, size_t eplane, const int16_t* xp, int pw,
                                            const Col2imShape& s, int o, int64_t* dw) {
  const int plane = (s.h + 2 * s.pad) * pw, vecs = static_cast<int>(eplane / 32);
  const size_t taps = static_cast<size_t>(s.kh) * s.kw * s.c;
  // five taps a pass (LeNet's 5x5 kernels) with four channels (20 accumulators), else one
  // tap with eight
  const bool five = s.kw % 5 == 0;
  const int ko = five ? 4 : 8;
  for (int c = 0; c < s.c; ++c)
    for (int a = 0; a < s.kh; ++a)
      for (int b = 0; b < s.kw; b += five ? 5 : 1) {
        const size_t t = (static_cast<size_t>(a) * s.kw + b) * s.c + c;
        const int16_t* xrow = xp + static_cast<size_t>(c) * plane + static_cast<size_t>(a) * pw + b;
        for (int o0 = 0; o0 < o; o0 += ko)
          with_rows(std::min(ko, o - o0), [&](auto os) {
            constexpr int kOs = decltype(os)::value;
            if (five) {
              if constexpr (kOs <= 4) wgrad_planar_taps<kOs, 5>(ep, eplane, xrow, vecs, s.c, o0, t, taps, dw);
            } else {
              wgrad_planar_taps<kOs, 1>(ep, eplane, xrow, vecs, s.c, o0, t, taps, dw);
            }
          });
      }
}

// One image's forward from channel planes (stride 1): 16 output columns j in the int32
// lanes; a lane's pair of int16 is (x[c][i + a][j + b], x[c][i + a][j + b + 1]) from the
// image's pair planes `pp`, times the broadcast weight pair (w[o][a][b][c], w[o][a][b + 1][c])
// (0 past the kernel's width), so vpdpwssd adds two taps per lane and no patch is built;
// results go to y[OH, OW, O] (int64). The caller checks that every sum fits int32.
// dst[l * kO + q] = acc[q] lane l for l < left (int64): the accumulators interleaved, kO
// output vectors of 16 elements each picked from pairs of accumulators by vpermt2d (lanes of
// a pair under their own mask), widened and stored whole (a scalar store per element cost a
// quarter of LeNet's conv1 forward).
template <int kO>
__attribute__((target("avx512f"))) inline void store_interleaved(const __m512i* acc, int left, int64_t* dst) {
  constexpr int kPairs = (kO + 1) / 2;
  struct Tables {
    alignas(64) int32_t idx[kO][16];
    __mmask16 mask[kO][kPairs];
  };
  static const Tables tables = [] {
    Tables t{};
    for (int u = 0; u < kO; ++u)
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * u + l, j = e / kO, q = e % kO;
        t.idx[u][l] = j + 16 * (q % 2);
        t.mask[u][q / 2] = static_cast<__mmask16>(t.mask[u][q / 2] | (1u << l));
      }
    return t;
  }();
  const int total = left * kO;
  for (int u = 0; u < kO && 16 * u < total; ++u) {
    const __m512i idx = _mm512_load_si512(tables.idx[u]);
    __m512i out = _mm512_setzero_si512();
    for (int p = 0; p < kPairs; ++p) {
      const __m512i second = 2 * p + 1 < kO ? acc[2 * p + 1] : _mm512_setzero_si512();
      out = _mm512_mask_mov_epi32(out, tables.mask[u][p], _mm512_permutex2var_epi32(acc[2 * p], idx, second));
    }
    const int here = std::min(16, total - 16 * u);
    const __mmask8 lo = static_cast<__mmask8>((1u << std::min(here, 8)) - 1);
    const __mmask8 hi = static_cast<__mmask8>((1u << std::max(here - 8, 0)) - 1);
    _mm512_mask_storeu_epi64(dst + 16 * u, lo, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(out)));
    if (hi) _mm512_mask_storeu_epi64(dst + 16 * u + 8, hi, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(out, 1)));
  }
}

// kI output rows (i ..) x 16 columns (j0 ..) x kOs output channels (o0 ..): kI * kOs
// accumulators in registers, each broadcast weight pair serving kI rows and each input
// vector kOs channels.
// The (c, a, b pair) steps of a block as one flat list of offsets (input pair planes,
// weight pairs), so that the block's accumulators live in registers through the one loop
// (nested loops over c, a and b pairs had GCC store and reload them each round).
struct FwdSteps {
  std::vector<int32_t> x, w;
};

// acc[r * kO + q] += the pair products of weight pair q and input row r, for r * kO + q >= E
template <int E, int kO, int kI>
DSPTRAIN_AVX512VNNI __attribute__((always_inline)) inline void add_pair_products(Regs24<__m512i>& acc, const int32_t* wq,
                                                                                 const __m512i* xv) {
  if constexpr (E < kO * kI) {
    constexpr int q = E % kO, r = E / kO;
    reg<E>(acc) = _mm512_dpwssd_epi32(reg<E>(acc), _mm512_set1_epi32(wq[q]), xv[r]);
    add_pair_products<E + 1, kO, kI>(acc, wq, xv);
  }
}

template <int kOs, int kI>
DSPTRAIN_AVX512VNNI inline void fwd_planar_block(const int32_t* pp, int pw, const int32_t* wpairs, const FwdSteps& steps,
                                                 const Col2imShape& s, int o, int o0, int i, int j0, int64_t* y) {
  static_assert(kOs * kI <= 24, "at most 24 accumulators");
  const int left = std::min(16, s.ow - j0);
  const __mmask16 mask = static_cast<__mmask16>(left == 16 ? 0xFFFF : (1u << left) - 1);
  Regs24<__m512i> acc;
  zero_regs<0, kOs * kI>(acc);
  const int32_t* xbase = pp + static_cast<size_t>(i) * pw + j0;
  const int32_t* wbase = wpairs + o0;
  const int count = static_cast<int>(steps.x.size());
  for (int k = 0; k < count; ++k) {
    const int32_t* xrow = xbase + steps.x[k];
    __m512i xv[kI];
    for (int r = 0; r < kI; ++r) xv[r] = _mm512_maskz_loadu_epi32(mask, xrow + static_cast<size_t>(r) * pw);
    add_pair_products<0, kOs, kI>(acc, wbase + steps.w[k], xv);
  }
  __m512i sums[kI][kOs];   // out of the registers once, for the stores
  copy_regs<0, kOs * kI>(acc, &sums[0][0]);
  for (int r = 0; r < kI; ++r) {
    if (kOs == o) {   // the block holds every channel: its outputs are left * o consecutive int64
      store_interleaved<kOs>(sums[r], left, y + (static_cast<size_t>(i + r) * s.ow + j0) * o);
      continue;
    }
    alignas(64) int32_t lanes[kOs][16];
    for (int q = 0; q < kOs; ++q) _mm512_store_si512(lanes[q], sums[r][q]);
    for (int l = 0; l < left; ++l) {
      int64_t* dst = y + (static_cast<size_t>(i + r) * s.ow + j0 + l) * o + o0;
      for (int q = 0; q < kOs; ++q) dst[q] = lanes[q][l];
    }
  }
}

DSPTRAIN_AVX512VNNI void fwd_planar_image(const int32_t* pp, int pw, const int32_t* wpairs, const FwdSteps& steps,
                                          const Col2imShape& s, int o, int64_t* y) {
  constexpr int kO = 8;
  const int vecs = (s.ow + 15) / 16;
  for (int v = 0; v < vecs; ++v)
    for (int o0 = 0; o0 < o; o0 += kO)
      with_rows(std::min(kO, o - o0), [&](auto os) {
        constexpr int kOs = decltype(os)::value, kI = kOs <= 6 ? 4 : 3;   // at most 24 accumulators
        int i = 0;
        for (; i + kI <= s.oh; i += kI) fwd_planar_block<kOs, kI>(pp, pw, wpairs, steps, s, o, o0, i, v * 16, y);
        for (; i < s.oh; ++i) fwd_planar_block<kOs, 1>(pp, pw, wpairs, steps, s, o, o0, i, v * 16, y);
      });
}

// x's image n as zero-padded channel planes xp[c][(h + 2 pad)][(w + 2 pad)]
void planes_of_image(const int16_t* xi, const Col2imShape& s, int16_t* xp) {
  const int pw = s.w + 2 * s.pad, ph = s.h + 2 * s.pad;
  for (int y = 0; y < s.h; ++y)
    for (int xx = 0; xx < s.w; ++xx)
      for (int c = 0; c < s.c; ++c)
        xp[(static_cast<size_t>(c) * ph + y + s.pad) * pw + xx + s.pad] = xi[(static_cast<size_t>(y) * s.w + xx) * s.c + c];
}

// pp[e] = (xp[e], xp[e + 1]) as one 32-bit word, e < count (xp readable to count + 16)
__attribute__((target("avx512f,avx512bw"))) void pair_planes_avx512(const int16_t* xp, size_t count, int32_t* pp) {
  size_t e = 0;
  for (; e + 16 <= count; e += 16) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + e)));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + e + 1)));
    _mm512_storeu_si512(pp + e, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
  for (; e < count; ++e) pp[e] = pair_word(xp[e], xp[e + 1]);
}

void pair_planes(const int16_t* xp, size_t count, int32_t* pp) {
  if (has_avx512bw()) return pair_planes_avx512(xp, count, pp);
  for (size_t e = 0; e < count; ++e) pp[e] = pair_word(xp[e], xp[e + 1]);
}

// src[rows][o] -> dst[q * plane + r] (an image row's NHWC error into channel planes), 32
// rows at a time on AVX-512 for o <= 32: the 32 rows are o vectors; output channel q's
// lane l is element l * o + q, which vpermt2w picks from the pair of vectors holding it
// (the lanes of each pair under their own mask). The element loop cost more than the
// products on LeNet's conv1 (six channels: a strided scalar copy of every error element).
// The permutes and masks depend on o alone: built once per call of the convolution.
class RowsToPlanes {
 public:
  explicit RowsToPlanes(int o) : o_(o), vector_(o <= 32 && has_avx512bw()) {
    if (!vector_) return;
    for (int q = 0; q < o; ++q)
      for (int l = 0; l < 32; ++l) {
        const int e = l * o + q;
        idx_[q][l] = static_cast<int16_t>(e % 64);
        masks_[q][e / 64] |= 1u << l;
      }
  }

  void operator()(const int16_t* src, int rows, int16_t* dst, size_t plane) const {
    if (vector_) return run_avx512(src, rows, dst, plane);
    for (int r = 0; r < rows; ++r)
      for (int q = 0; q < o_; ++q) dst[static_cast<size_t>(q) * plane + r] = src[static_cast<size_t>(r) * o_ + q];
  }

 private:
  __attribute__((target("avx512f,avx512bw"))) void run_avx512(const int16_t* src, int rows, int16_t* dst,
                                                               size_t plane) const {
    const int pairs = (o_ + 1) / 2;
    alignas(64) int16_t tail[32 * 32] = {};
    __m512i in[32 + 1];
    for (int r0 = 0; r0 < rows; r0 += 32) {
      const int left = std::min(32, rows - r0);
      const int16_t* block = src + static_cast<size_t>(r0) * o_;
      if (left < 32) {
        std::memcpy(tail, block, static_cast<size_t>(left) * o_ * sizeof(int16_t));
        block = tail;
      }
      for (int v = 0; v < o_; ++v) in[v] = _mm512_loadu_si512(block + 32 * v);
      in[o_] = _mm512_setzero_si512();
      const __mmask32 store = left == 32 ? ~0u : (1u << left) - 1;
      for (int q = 0; q < o_; ++q) {
        const __m512i idx = _mm512_load_si512(idx_[q]);
        __m512i out = _mm512_setzero_si512();
        for (int p = 0; p < pairs; ++p)
          out = _mm512_mask_mov_epi16(out, masks_[q][p], _mm512_permutex2var_epi16(in[2 * p], idx, in[2 * p + 1]));
        _mm512_mask_storeu_epi16(dst + static_cast<size_t>(q) * plane + r0, store, out);
      }
    }
  }

  int o_;
  bool vector_;
  alignas(64) int16_t idx_[32][32] = {};
  __mmask32 masks_[32][16] = {};
};

}  // namespace

void conv_fwd_s16_planar(const int16_t* x, const int16_t* w, const Col2imShape& s, int o, int64_t* y, bool int32_sums) {
  const int pw = s.w + 2 * s.pad, ph = s.h + 2 * s.pad, bpairs = (s.kw + 1) / 2;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c, plane = static_cast<size_t>(ph) * pw;
  std::vector<int32_t> wpairs(static_cast<size_t>(s.c) * s.kh * bpairs * o);   // [c][a][b pair][o]
  for (int c = 0; c < s.c; ++c)
    for (int a = 0; a < s.kh; ++a)
      for (int bp = 0; bp < bpairs; ++bp)
        for (int q = 0; q < o; ++q) {
          const auto tap = [&](int b) {
            return b < s.kw ? w[((static_cast<size_t>(q) * s.kh + a) * s.kw + b) * s.c + c] : int16_t{0};
          };
          wpairs[((static_cast<size_t>(c) * s.kh + a) * bpairs + bp) * o + q] = pair_word(tap(2 * bp), tap(2 * bp + 1));
        }
  FwdSteps steps;
  for (int c = 0; c < s.c; ++c)
    for (int a = 0; a < s.kh; ++a)
      for (int bp = 0; bp < bpairs; ++bp) {
        steps.x.push_back(static_cast<int32_t>(c * plane + static_cast<size_t>(a) * pw + 2 * bp));
        steps.w.push_back(static_cast<int32_t>(((static_cast<size_t>(c) * s.kh + a) * bpairs + bp) * o));
      }
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    thread_local Kept<std::vector<int16_t>> xp;
    thread_local Kept<std::vector<int32_t>> pp;
    xp.assign(s.c * plane + 64, 0);   // zero border; read one element past a row's end
    pp.resize(s.c * plane + 32);
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      planes_of_image(x + n * image, s, xp.data());
      pair_planes(xp.data(), s.c * plane, pp.data());
      int64_t* yi = y + static_cast<size_t>(n) * s.oh * s.ow * o;
      if (int32_sums) {
        fwd_planar_image(pp.data(), pw, wpairs.data(), steps, s, o, yi);
        continue;
      }
      for (int i = 0; i < s.oh; ++i)   // int64 sums, one output at a time
        for (int j = 0; j < s.ow; ++j)
          for (int q = 0; q < o; ++q) {
            int64_t sum = 0;
            for (int c = 0; c < s.c; ++c)
              for (int a = 0; a < s.kh; ++a)
                for (int b = 0; b < s.kw; ++b)
                  sum += static_cast<int64_t>(xp[c * plane + static_cast<size_t>(i + a) * pw + j + b]) *
                         w[((static_cast<size_t>(q) * s.kh + a) * s.kw + b) * s.c + c];
            yi[(static_cast<size_t>(i) * s.ow + j) * o + q] = sum;
          }
    }
  });
}

void conv_wgrad_s16_planar(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw,
                           bool int32_sums) {
  const int rows = s.oh * s.ow, taps = s.kh * s.kw * s.c;
  const int pw = s.w + 2 * s.pad, ph = s.h + 2 * s.pad;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c, ot = static_cast<size_t>(o) * taps;
  const size_t eplane = wgrad_error_plane(s);
  const RowsToPlanes to_planes(o);
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  std::vector<int64_t> partial(static_cast<size_t>(tasks) * ot, 0);
  parallel_for(tasks, [&](int t) {
    thread_local Kept<std::vector<int16_t>> ep, xp;
    ep.assign(static_cast<size_t>(o) * eplane, 0);            // columns past ow and the tail stay 0
    xp.assign(static_cast<size_t>(s.c) * ph * pw + 64, 0);   // zero border; 64 readable past the end
    int64_t* mine = partial.data() + static_cast<size_t>(t) * ot;
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      const int16_t* e = err + static_cast<size_t>(n) * rows * o;
      for (int i = 0; i < s.oh; ++i) to_planes(e + static_cast<size_t>(i) * s.ow * o, s.ow, ep.data() + static_cast<size_t>(i) * pw, eplane);
      planes_of_image(x + n * image, s, xp.data());
      if (int32_sums) {
        wgrad_planar_image(ep.data(), eplane, xp.data(), pw, s, o, mine);
        continue;
      }
      for (int q = 0; q < o; ++q)   // int64 sums
        for (int c = 0; c < s.c; ++c)
          for (int a = 0; a < s.kh; ++a)
            for (int b = 0; b < s.kw; ++b) {
              int64_t sum = 0;
              for (int i = 0; i < s.oh; ++i)
                for (int j = 0; j < s.ow; ++j)
                  sum += static_cast<int64_t>(ep[q * eplane + static_cast<size_t>(i) * pw + j]) *
                         xp[(static_cast<size_t>(c) * ph + i + a) * pw + j + b];
              mine[static_cast<size_t>(q) * taps + (static_cast<size_t>(a) * s.kw + b) * s.c + c] += sum;
            }
    }
  });
  std::copy(partial.begin(), partial.begin() + ot, dw);
  for (int t = 1; t < tasks; ++t)
    for (size_t i = 0; i < ot; ++i) dw[i] += partial[static_cast<size_t>(t) * ot + i];
}

size_t wgrad_error_plane(const Col2imShape& s) {
  return (static_cast<size_t>(s.oh) * (s.w + 2 * s.pad) + 31) / 32 * 32;
}

}  // namespace dsptrain
#endif  // DSPTRAIN_X86_PLANAR
