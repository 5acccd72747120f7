// MLS's int16 backward data on channel planes (conv_s16_planar.h), stride 1, AVX-512
// VNNI: the transposed convolution as a direct one on the error's pair planes, the
// columns in the vector lanes. The forward and weight gradient are conv_s16_planar.cpp.
#include "conv_s16_planar.h"

#include <algorithm>
#include <vector>

#include "register_block.h"
#include "scratch.h"
#include "thread_pool.h"

#ifdef DSPTRAIN_X86_PLANAR
#include <immintrin.h>
#define DSPTRAIN_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace dsptrain {
namespace {

// kY rows (y ..) x 16 columns (x0 ..) x kC channels (c0 ..) of one image's backward data
// from the error's pair planes: dx[y][x][c] = sum over a, b and pairs of output channels
// of P[pair][y + pad - a + kh - 1][x + pad - b + kw - 1] . (w[2 pair][a][b][c],
// w[2 pair + 1][a][b][c]) -- the transposed convolution as a direct one, columns in the
// lanes, so the patch sums are never written and scattered (that scatter, int64 adds
// along overlapping runs, cost as much as the product on LeNet's conv2). Kernel rows
// whose error rows all lie in the zero border are skipped.
template <int kC, int kY>
DSPTRAIN_AVX512VNNI inline void bwd_data_planar_block(const int32_t* planes, int ph, int pw, const int32_t* wpairs,
                                                      const Col2imShape& s, int opairs, int c0, int y, int x0,
                                                      int64_t* dxi) {
  const int left = std::min(16, s.w - x0);
  const __mmask16 mask = static_cast<__mmask16>(left == 16 ? 0xFFFF : (1u << left) - 1);
  __m512i acc[kY][kC];
  for (int r = 0; r < kY; ++r)
    for (int q = 0; q < kC; ++q) acc[r][q] = _mm512_setzero_si512();
  // row y + r reads error row i = y + r + pad - a: some row of the block in [0, oh)
  const int a0 = std::max(0, y + s.pad - (s.oh - 1)), a1 = std::min(s.kh, y + kY + s.pad);
  const size_t plane = static_cast<size_t>(ph) * pw;
  for (int a = a0; a < a1; ++a)
    for (int b = 0; b < s.kw; ++b) {
      const int32_t* src = planes + static_cast<size_t>(y + s.pad - a + s.kh - 1) * pw + x0 + s.pad - b + s.kw - 1;
      const int32_t* wq = wpairs + ((static_cast<size_t>(a) * s.kw + b) * opairs) * s.c + c0;
      for (int p = 0; p < opairs; ++p, src += plane, wq += s.c) {
        __m512i ev[kY];
        for (int r = 0; r < kY; ++r) ev[r] = _mm512_loadu_si512(src + static_cast<size_t>(r) * pw);
        for (int q = 0; q < kC; ++q) {
          const __m512i wv = _mm512_set1_epi32(wq[q]);
          for (int r = 0; r < kY; ++r) acc[r][q] = _mm512_dpwssd_epi32(acc[r][q], wv, ev[r]);
        }
      }
    }
  for (int r = 0; r < kY; ++r) {
    alignas(64) int32_t lanes[kC][16];
    for (int q = 0; q < kC; ++q) _mm512_store_si512(lanes[q], _mm512_maskz_mov_epi32(mask, acc[r][q]));
    for (int l = 0; l < left; ++l) {
      int64_t* dst = dxi + (static_cast<size_t>(y + r) * s.w + x0 + l) * s.c + c0;
      for (int q = 0; q < kC; ++q) dst[q] = lanes[q][l];
    }
  }
}

// dx from the pair planes in int64, one output at a time (operands whose sums may leave int32)
void bwd_data_planes_int64(const int32_t* planes, int ph, int pw, const int32_t* wpairs, const Col2imShape& s,
                           int opairs, int64_t* dxi) {
  const size_t plane = static_cast<size_t>(ph) * pw;
  const auto lo = [](int32_t word) { return static_cast<int64_t>(static_cast<int16_t>(word & 0xffff)); };
  const auto hi = [](int32_t word) { return static_cast<int64_t>(static_cast<int16_t>(static_cast<uint32_t>(word) >> 16)); };
  for (int y = 0; y < s.h; ++y)
    for (int x = 0; x < s.w; ++x)
      for (int c = 0; c < s.c; ++c) {
        int64_t sum = 0;
        for (int a = 0; a < s.kh; ++a)
          for (int b = 0; b < s.kw; ++b)
            for (int p = 0; p < opairs; ++p) {
              const int32_t e = planes[p * plane + static_cast<size_t>(y + s.pad - a + s.kh - 1) * pw + x + s.pad - b + s.kw - 1];
              const int32_t wq = wpairs[((static_cast<size_t>(a) * s.kw + b) * opairs + p) * s.c + c];
              sum += lo(e) * lo(wq) + hi(e) * hi(wq);
            }
        dxi[(static_cast<size_t>(y) * s.w + x) * s.c + c] = sum;
      }
}

}  // namespace

// The planar backward data: each image's error as zero-bordered pair planes of its output
// channels (a buffer per thread, kept: conv_bwd_data_s16_planes_bytes), then the blocks
// above; int32_sums false: the same planes summed by a scalar int64 loop.
void conv_bwd_data_s16_planar(const int16_t* err, const int16_t* w, const Col2imShape& s, int o, int64_t* dx,
                              bool int32_sums) {
  const BwdDataPlanes g = bwd_data_planes(s, o);
  const int opairs = g.pairs, rows = s.oh * s.ow, xvecs = (s.w + 15) / 16, ph = g.ph, pw = g.pw;
  const size_t image = static_cast<size_t>(s.h) * s.w * s.c, plane = static_cast<size_t>(ph) * pw;
  std::vector<int32_t> wpairs(static_cast<size_t>(s.kh) * s.kw * opairs * s.c);   // [a][b][pair][c]
  for (int a = 0; a < s.kh; ++a)
    for (int b = 0; b < s.kw; ++b)
      for (int p = 0; p < opairs; ++p)
        for (int c = 0; c < s.c; ++c) {
          const auto tap = [&](int q) {
            return q < o ? w[((static_cast<size_t>(q) * s.kh + a) * s.kw + b) * s.c + c] : int16_t{0};
          };
          wpairs[((static_cast<size_t>(a) * s.kw + b) * opairs + p) * s.c + c] = pair_word(tap(2 * p), tap(2 * p + 1));
        }
  const int tasks = std::max(1, std::min(s.n, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    thread_local Kept<std::vector<int32_t>> planes;
    planes.assign(g.words, 0);   // the zero border: only the error's own rows and columns are written below
    for (int n = static_cast<int>(static_cast<long long>(s.n) * t / tasks);
         n < static_cast<int>(static_cast<long long>(s.n) * (t + 1) / tasks); ++n) {
      const int16_t* e = err + static_cast<size_t>(n) * rows * o;
      for (int i = 0; i < s.oh; ++i)
        for (int j = 0; j < s.ow; ++j) {
          const int16_t* px = e + (static_cast<size_t>(i) * s.ow + j) * o;
          int32_t* dst = planes.data() + static_cast<size_t>(i + s.kh - 1) * pw + j + s.kw - 1;
          for (int p = 0; p < opairs; ++p) dst[p * plane] = pair_word(px[2 * p], 2 * p + 1 < o ? px[2 * p + 1] : int16_t{0});
        }
      int64_t* dxi = dx + n * image;
      if (!int32_sums) {
        bwd_data_planes_int64(planes.data(), ph, pw, wpairs.data(), s, opairs, dxi);
        continue;
      }
      for (int v = 0; v < xvecs; ++v)
        for (int c0 = 0; c0 < s.c; c0 += 8)
          with_rows(std::min(8, s.c - c0), [&](auto cs) {
            constexpr int kC = decltype(cs)::value, kY = kC <= 6 ? 4 : 3;   // at most 24 accumulators
            int y = 0;
            for (; y + kY <= s.h; y += kY)
              bwd_data_planar_block<kC, kY>(planes.data(), ph, pw, wpairs.data(), s, opairs, c0, y, v * 16, dxi);
            for (; y < s.h; ++y)
              bwd_data_planar_block<kC, 1>(planes.data(), ph, pw, wpairs.data(), s, opairs, c0, y, v * 16, dxi);
          });
    }
  });
}

BwdDataPlanes bwd_data_planes(const Col2imShape& s, int o) {
  BwdDataPlanes g;
  g.pairs = (o + 1) / 2;
  g.ph = s.oh + 2 * (s.kh - 1);
  g.pw = std::max(s.ow + 2 * (s.kw - 1), (s.w + 15) / 16 * 16 + s.pad + s.kw - 1);   // a row's last vector reads past w
  g.words = static_cast<size_t>(g.pairs) * g.ph * g.pw + 16;
  return g;
}

}  // namespace dsptrain
#endif  // DSPTRAIN_X86_PLANAR
