// The weight gradient of an int16 convolution as a GEMM over the batch's pixels with no
// patch matrix: dw[o][a][b][c] = sum over pixels p of err[p][o] * x_pad[i_p + a][j_p + b][c].
// For one kernel row a, the taps (b, c) of pixel p are kw * c consecutive elements of the
// padded NHWC row i_p + a, so a vector of 16 taps is one load. vpdpwssd adds two pixels
// per int32 lane: the taps of pixels (p, p + 1) interleaved by one vpermt2w, times the
// broadcast pair (err[p][o], err[p + 1][o]); the lanes are taps, so an image's sums leave
// the registers once, as they are (no horizontal sums, no packed copy of the patches).
// Images split over the threads, per-task int64 partials added in task order: the same
// result at any thread count.
#include "conv_s16_taps.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "conv_s16_planar.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

struct TapsGeometry {
  int run = 0, vectors = 0, pairs = 0, pw = 0, ph = 0;   // taps of a kernel row, their vectors, pixel pairs of a row
  size_t image_words = 0, pair_words = 0;                 // the padded image (int16) and the pair words (int32)
};

TapsGeometry geometry(const Col2imShape& s, int o) {
  TapsGeometry g;
  g.run = s.kw * s.c;
  g.vectors = (g.run + 15) / 16;
  g.pairs = (s.ow + 1) / 2;
  g.pw = s.w + 2 * s.pad;
  g.ph = s.h + 2 * s.pad;
  // a vector reads up to 15 elements past a run, and an odd row's last pair its missing pixel
  g.image_words = static_cast<size_t>(g.ph) * g.pw * s.c + 16 + static_cast<size_t>(s.stride) * s.c + 32;
  g.pair_words = static_cast<size_t>(s.oh) * g.pairs * o;
  return g;
}

}  // namespace

bool wgrad_taps_fit(const Col2imShape& s) { return s.kw * s.c >= 16; }

ScratchList conv_wgrad_s16_taps_scratch(const Col2imShape& s, int o) {
  const TapsGeometry g = geometry(s, o);
  const size_t threads = pool_threads();
  return {{"conv2d_bwd_weight_s16.padded_image (per thread)", threads * g.image_words * sizeof(int16_t)},
          {"conv2d_bwd_weight_s16.error_pairs (per thread)", threads * g.pair_words * sizeof(int32_t)}};
}

#if defined(__x86_64__) || defined(_M_X64)
}  // namespace dsptrain
#include <immintrin.h>
namespace dsptrain {
namespace {

#define DSPTRAIN_TAPS_ISA __attribute__((target("avx512f,avx512bw,avx512vnni")))

// kO output channels (o0 ..) x one vector of 16 taps (t0 .. of kernel row a): every pixel
// pair of the image, then the lanes added to dw's int64 row.
template <int kO>
DSPTRAIN_TAPS_ISA void taps_block(const int16_t* xp, const int32_t* ep, const TapsGeometry& g, const Col2imShape& s,
                                  int o, int o0, int a, int t0, size_t taps, int64_t* dw) {
  const __m512i interleave = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                              39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const size_t next = static_cast<size_t>(s.stride) * s.c;   // pixel p + 1's taps, from pixel p's
  __m512i acc[kO];
  for (int r = 0; r < kO; ++r) acc[r] = _mm512_setzero_si512();
  for (int i = 0; i < s.oh; ++i) {
    const int16_t* row = xp + (static_cast<size_t>(i) * s.stride + a) * g.pw * s.c + t0;
    const int32_t* e = ep + static_cast<size_t>(i) * g.pairs * o + o0;
    for (int q = 0; q < g.pairs; ++q, e += o) {
      const int16_t* p0 = row + static_cast<size_t>(2 * q) * next;
      const __m512i both = _mm512_permutex2var_epi16(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                                                     interleave,
                                                     _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + next))));
      for (int r = 0; r < kO; ++r) acc[r] = _mm512_dpwssd_epi32(acc[r], _mm512_set1_epi32(e[r]), both);
    }
  }
  const int lanes = std::min(16, g.run - t0);
  const __mmask8 lo = static_cast<__mmask8>((1u << std::min(lanes, 8)) - 1);
  const __mmask8 hi = static_cast<__mmask8>((1u << std::max(lanes - 8, 0)) - 1);
  for (int r = 0; r < kO; ++r) {
    int64_t* dst = dw + static_cast<size_t>(o0 + r) * taps + static_cast<size_t>(a) * g.run + t0;
    const __m512i sum_lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[r]));
    const __m512i sum_hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[r], 1));
    _mm512_mask_storeu_epi64(dst, lo, _mm512_add_epi64(_mm512_maskz_loadu_epi64(lo, dst), sum_lo));
    if (hi) _mm512_mask_storeu_epi64(dst + 8, hi, _mm512_add_epi64(_mm512_maskz_loadu_epi64(hi, dst + 8), sum_hi));
  }
}

// calls body(std::integral_constant<int, K>{}) for K = count in 1..16: the accumulators'
// count known at compile time keeps them in registers (16 of them, the pair vector and a
// broadcast fit AVX-512's 32)
template <int K = 1, typename Body>
inline void with_count(int count, Body body) {
  if constexpr (K == 16) {
    body(std::integral_constant<int, 16>{});
  } else {
    if (count == K) return body(std::integral_constant<int, K>{});
    with_count<K + 1>(count, body);
  }
}

// ep[q][k] = (e[2q][k], e[2q + 1][k]) for the q < pairs pixel pairs of one output row e[ow][o]
// (0 for the missing second pixel of an odd row): for o <= 16 a pair's 2o elements are one
// load, interleaved by one vpermw
__attribute__((target("avx512f,avx512bw"))) void error_pairs_avx512(const int16_t* e, int ow, int o, int pairs,
                                                                      int32_t* ep) {
  alignas(64) int16_t order[32];
  for (int k = 0; k < 16; ++k) {
    order[2 * k] = static_cast<int16_t>(k);
    order[2 * k + 1] = static_cast<int16_t>(o + k);
  }
  const __m512i idx = _mm512_load_si512(order);
  const __mmask16 store = static_cast<__mmask16>((1u << o) - 1);
  for (int q = 0; q < pairs; ++q) {
    const int elements = 2 * q + 1 < ow ? 2 * o : o;
    const __mmask32 load = elements == 32 ? ~0u : (1u << elements) - 1;
    const __m512i v = _mm512_maskz_loadu_epi16(load, e + static_cast<size_t>(2 * q) * o);
    _mm512_mask_storeu_epi32(ep + static_cast<size_t>(q) * o, store, _mm512_permutexvar_epi16(idx, v));
  }
}

}  // namespace

void conv_wgrad_s16_taps(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw,
                         bool int32_sums) {
  const TapsGeometry g = geometry(s, o);
  const size_t taps = static_cast<size_t>(s.kh) * g.run, ot = static_cast<size_t>(o) * taps;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c, rows = static_cast<size_t>(s.oh) * s.ow;
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  std::vector<int64_t> partial(static_cast<size_t>(tasks) * ot, 0);
  parallel_for(tasks, [&](int t) {
    thread_local Kept<std::vector<int16_t>> xp;
    thread_local Kept<std::vector<int32_t>> ep;
    xp.assign(g.image_words, 0);   // the border stays zero: only the image's own pixels are written
    ep.resize(g.pair_words);
    int64_t* mine = partial.data() + static_cast<size_t>(t) * ot;
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      const int16_t* xi = x + n * image;
      for (int y = 0; y < s.h; ++y)
        std::copy(xi + static_cast<size_t>(y) * s.w * s.c, xi + static_cast<size_t>(y + 1) * s.w * s.c,
                  xp.data() + (static_cast<size_t>(y + s.pad) * g.pw + s.pad) * s.c);
      const int16_t* e = err + static_cast<size_t>(n) * rows * o;
      for (int i = 0; i < s.oh; ++i) {   // (err[i][2q][o], err[i][2q + 1][o]), 0 past the row
        if (o <= 16) {
          error_pairs_avx512(e + static_cast<size_t>(i) * s.ow * o, s.ow, o, g.pairs, ep.data() + static_cast<size_t>(i) * g.pairs * o);
          continue;
        }
        for (int q = 0; q < g.pairs; ++q)
          for (int k = 0; k < o; ++k) {
            const int16_t e0 = e[(static_cast<size_t>(i) * s.ow + 2 * q) * o + k];
            const int16_t e1 = 2 * q + 1 < s.ow ? e[(static_cast<size_t>(i) * s.ow + 2 * q + 1) * o + k] : int16_t{0};
            ep[(static_cast<size_t>(i) * g.pairs + q) * o + k] = pair_word(e0, e1);
          }
      }
      if (!int32_sums) {   // int64 sums, one weight at a time
        for (int k = 0; k < o; ++k)
          for (int a = 0; a < s.kh; ++a)
            for (int u = 0; u < g.run; ++u) {
              int64_t sum = 0;
              for (int i = 0; i < s.oh; ++i)
                for (int j = 0; j < s.ow; ++j)
                  sum += static_cast<int64_t>(e[(static_cast<size_t>(i) * s.ow + j) * o + k]) *
                         xp[((static_cast<size_t>(i) * s.stride + a) * g.pw + static_cast<size_t>(j) * s.stride) * s.c + u];
              mine[static_cast<size_t>(k) * taps + static_cast<size_t>(a) * g.run + u] += sum;
            }
        continue;
      }
      for (int a = 0; a < s.kh; ++a)
        for (int t0 = 0; t0 < g.run; t0 += 16)
          for (int o0 = 0; o0 < o; o0 += 16)
            with_count(std::min(16, o - o0), [&](auto count) {
              taps_block<decltype(count)::value>(xp.data(), ep.data(), g, s, o, o0, a, t0, taps, mine);
            });
    }
  });
  std::copy(partial.begin(), partial.begin() + ot, dw);
  for (int t = 1; t < tasks; ++t)
    for (size_t i = 0; i < ot; ++i) dw[i] += partial[static_cast<size_t>(t) * ot + i];
}
#endif

}  // namespace dsptrain
