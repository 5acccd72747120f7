// Weight gradients of stride-1 convolutions on AVX-512 VNNI + VBMI with the taps or the
// output channels in the vector lanes (LeNet's conv1 and conv2): the lane kernels' weight
// gradients (conv_lanes.cpp has the forward and its layout).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "conv_lanes.h"
#include "conv_lanes_simd.h"
#include "scratch.h"
#include "thread_pool.h"

namespace dsptrain {

#ifdef DSPTRAIN_LANES_X86
namespace {

// ---------------------------------------------------------------- weight gradient, one input channel
// dw[o, i, j] = sum over pixels p of err[p, o] * x[p + (i, j)]. Lanes are taps: vector a
// holds tap rows a*R .. a*R+R-1 (R = min(4, 16 / kw)), lane r * kw + j; a dword is 4
// consecutive pixels of one output row, so tap (i, j)'s bytes are the source row's
// bytes x + j .. x + j + 3, permuted out of four 16-byte row loads; the error's dword of
// channel o (its 4 pixels) is broadcast. LeNet's conv1: 25 taps in 2 vectors x 6 channels.
struct WgradShape {
  int rows_per_vector;  // R
  int vectors;          // ceil(kh / R)
};

WgradShape wgrad_shape(int kh, int kw) {
  const int r = std::min(4, 16 / std::max(kw, 1));
  return {r, r > 0 ? (kh + r - 1) / r : 0};
}

template <int A>
DSPTRAIN_LANES void wgrad_run(const PaddedSrc& s, const int8_t* err, int oc, const WgradShape& g, const uint8_t* idx,
                              int r0, int r1, int32_t* sums) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(1);
  const ptrdiff_t rs = s.row_stride();
  __m512i ix[A];
  for (int a = 0; a < A; ++a) ix[a] = _mm512_loadu_si512(idx + 64 * a);
  // err dwords: lane o of `e` = err[x .. x+3, o] (4 pixels of channel o)
  alignas(64) uint8_t eidx_bytes[64];
  for (int k = 0; k < 64; ++k) eidx_bytes[k] = static_cast<uint8_t>(k / 4 < oc ? (k % 4) * oc + k / 4 : 0);
  const __m512i eix = _mm512_load_si512(eidx_bytes);
  __m512i acc[A][8], esum = _mm512_setzero_si512();
  for (int a = 0; a < A; ++a)
    for (int o = 0; o < oc; ++o) acc[a][o] = _mm512_setzero_si512();
  for (int r = r0; r < r1; ++r) {
    const int b = r / s.oh, oy = r % s.oh;
    const int8_t* row0 = s.d + s.base(b, oy, 0);
    const int8_t* erow = err + static_cast<ptrdiff_t>(r) * s.ow * oc;
    for (int x = 0; x < s.ow; x += 4) {
      const int valid = std::min(4, s.ow - x);
      const __m512i e = permute_bytes(eix, _mm512_maskz_loadu_epi8(first_bytes(valid * oc), erow + x * oc));
      esum = _mm512_dpbusd_epi32(esum, ones, e);
      __m512i av[A];
      for (int a = 0; a < A; ++a) {   // tap row a*R + q in 128-bit slot q
        __m512i rowsv = _mm512_setzero_si512();
        const int first = a * g.rows_per_vector, count = std::min(g.rows_per_vector, s.kh - first);
        const int8_t* at = row0 + first * rs + x;
        if (count > 0) rowsv = _mm512_inserti32x4(rowsv, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)), 0);
        if (count > 1) rowsv = _mm512_inserti32x4(rowsv, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + rs)), 1);
        if (count > 2) rowsv = _mm512_inserti32x4(rowsv, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 2 * rs)), 2);
        if (count > 3) rowsv = _mm512_inserti32x4(rowsv, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 3 * rs)), 3);
        av[a] = _mm512_xor_si512(permute_bytes(ix[a], rowsv), flip);
      }
      for (int o = 0; o < oc; ++o) {
        const __m512i eo = _mm512_permutexvar_epi32(_mm512_set1_epi32(o), e);
        for (int a = 0; a < A; ++a) acc[a][o] = _mm512_dpbusd_epi32(acc[a][o], av[a], eo);
      }
    }
  }
  for (int a = 0; a < A; ++a)
    for (int o = 0; o < oc; ++o) _mm512_storeu_si512(sums + (o * A + a) * 16, acc[a][o]);
  _mm512_storeu_si512(sums + oc * A * 16, esum);
}

template <int A>
void wgrad_rows(const PaddedSrc& s, const int8_t* err, int oc, const WgradShape& g, int32_t* dw) {
  alignas(64) uint8_t idx[64 * 4] = {};
  for (int a = 0; a < A; ++a)
    for (int q = 0; q < g.rows_per_vector; ++q)
      for (int j = 0; j < s.kw; ++j)
        for (int b = 0; b < 4; ++b) idx[a * 64 + (q * s.kw + j) * 4 + b] = static_cast<uint8_t>(16 * q + j + b);
  const int rows = s.n * s.oh, per_task = oc * A * 16 + 16;
  const int tasks = tasks_for(static_cast<size_t>(rows) * s.ow * (oc + s.kh * 4), rows);
  std::vector<int32_t> sums(static_cast<size_t>(tasks) * per_task);
  parallel_for(tasks, [&](int task) {
    const int r0 = static_cast<int>(static_cast<long long>(rows) * task / tasks);
    const int r1 = static_cast<int>(static_cast<long long>(rows) * (task + 1) / tasks);
    wgrad_run<A>(s, err, oc, g, idx, r0, r1, sums.data() + static_cast<size_t>(task) * per_task);
  });
  // dw[o, i, j] = sum of the tasks' lanes less 128 * sum(err[:, o]), mod 2^32 (exact when it fits)
  for (int o = 0; o < oc; ++o)
    for (int i = 0; i < s.kh; ++i)
      for (int j = 0; j < s.kw; ++j) {
        const int a = i / g.rows_per_vector, lane = (i % g.rows_per_vector) * s.kw + j;
        uint32_t v = 0, esum = 0;
        for (int t = 0; t < tasks; ++t) {
          const int32_t* part = sums.data() + static_cast<size_t>(t) * per_task;
          v += static_cast<uint32_t>(part[(o * A + a) * 16 + lane]);
          esum += static_cast<uint32_t>(part[oc * A * 16 + o]);
        }
        dw[(o * s.kh + i) * s.kw + j] = static_cast<int32_t>(v - 128u * esum);
      }
}

// ---------------------------------------------------------------- weight gradient, output channels in the lanes
// dw[o, i, j, c] = sum over pixels p of err[p, o] * x[p + (i, j), c], for 9-16 output
// channels (LeNet's conv2: 16). Lane o of a vector is output channel o and a dword four
// consecutive pixels of an output row, so one vector of the error (4 pixels x 16 channels,
// a byte permute of 64 contiguous NHWC bytes) multiplies, by vpdpbusd, the broadcast dword
// x[4 pixels + (i, j), c] of every tap and channel: 64 useful MACs per instruction (the
// pixel panels gathered each panel and reduced over the GEMM's k). The source goes once to
// rows of channel runs, [b][y][c][x] biased to u8 (x + 128, corrected by -128 * sum(err)),
// so that broadcast is one 4-byte load, and the error once to those vectors.

struct OlaneShape {
  int groups;   // 4-pixel groups per output row
  int run;      // bytes per channel run of a source row (>= wp, and the last group's reach)
};

OlaneShape olane_shape(int ow, int wp, int kw) {
  const int groups = (ow + 3) / 4;
  return {groups, std::max(wp, 4 * groups + kw - 1)};
}

// Source rows [y0, y1) of image b as channel runs (u8 x + 128); bytes past wp are 0x80.
DSPTRAIN_LANES void olane_rows(const PaddedSrc& s, int run, const uint8_t* idx, int b, int8_t* dst) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int bytes = s.wp * s.ch, out = s.ch * run;
  const __m512i ix0 = _mm512_loadu_si512(idx), ix1 = _mm512_loadu_si512(idx + 64);
  const __mmask64 lo_mask = first_bytes(bytes), hi_mask = first_bytes(bytes - 64);
  const __mmask64 out0 = first_bytes(out), out1 = first_bytes(out - 64);
  for (int y = 0; y < s.hp; ++y) {
    const int8_t* src = s.d + (static_cast<ptrdiff_t>(b) * s.hp + y) * s.wp * s.ch;
    // the index's entries past the row point at byte 127 of the pair: masked to 0, then 0x80
    const __m512i lo = _mm512_maskz_loadu_epi8(lo_mask, src), hi = _mm512_maskz_loadu_epi8(hi_mask, src + 64);
    int8_t* row = dst + static_cast<ptrdiff_t>(y) * out;
    _mm512_mask_storeu_epi8(row, out0, _mm512_xor_si512(_mm512_permutex2var_epi8(lo, ix0, hi), flip));
    if (out > 64) _mm512_mask_storeu_epi8(row + 64, out1, _mm512_xor_si512(_mm512_permutex2var_epi8(lo, ix1, hi), flip));
  }
}

// The error as vectors, err4[(r * groups + q) * 64 + 4 o + k] = err[row r, pixel 4q + k, o]
// (0 past the row and for o >= oc), images [b0, b1); their error sums per lane o to esum_out.
DSPTRAIN_LANES void olane_errors(const PaddedSrc& s, const int8_t* err, int oc, const OlaneShape& g,
                                 const uint8_t* eidx, int b0, int b1, int8_t* err4, int32_t* esum_out) {
  const __m512i ix = _mm512_loadu_si512(eidx), ones = _mm512_set1_epi8(1);
  __m512i esum = _mm512_setzero_si512();
  for (int r = b0 * s.oh; r < b1 * s.oh; ++r) {
    const int8_t* erow = err + static_cast<ptrdiff_t>(r) * s.ow * oc;
    for (int q = 0; q < g.groups; ++q) {
      const int valid = std::min(4, s.ow - 4 * q);
      const __m512i e = _mm512_maskz_permutexvar_epi8(~__mmask64{0}, ix,
                                                      _mm512_maskz_loadu_epi8(first_bytes(valid * oc), erow + 4 * q * oc));
      esum = _mm512_dpbusd_epi32(esum, ones, e);
      _mm512_storeu_si512(err4 + (static_cast<ptrdiff_t>(r) * g.groups + q) * 64, e);
    }
  }
  _mm512_storeu_si512(esum_out, esum);
}

// Sums of images [b0, b1) into sums[k * 16 + o] for taps x channels k (dw's order). A
// block holds P (tap column j, channel c) pairs for all KH tap rows: source row y's
// broadcast dword of (j, c) meets the error vectors of output rows y - i, i = 0..KH-1,
// so one broadcast feeds KH accumulators (with one broadcast a vpdpbusd, LeNet's conv2
// took 280 us at one thread, more than the pixel panels' 240; this way 167).
template <int KH, int P>
DSPTRAIN_LANES void olane_run(const PaddedSrc& s, const OlaneShape& g, const int8_t* runs, const int8_t* err4,
                              const int32_t* pair_offsets, int pairs, int b0, int b1, int32_t* sums) {
  const ptrdiff_t row_bytes = static_cast<ptrdiff_t>(s.ch) * g.run;
  for (int p0 = 0; p0 < pairs; p0 += P) {
    int32_t off[P];
    for (int p = 0; p < P; ++p) off[p] = pair_offsets[std::min(p0 + p, pairs - 1)];
    __m512i acc[KH][P];
#pragma GCC unroll 32
    for (int i = 0; i < KH; ++i)
#pragma GCC unroll 32
      for (int p = 0; p < P; ++p) acc[i][p] = _mm512_setzero_si512();
    for (int b = b0; b < b1; ++b) {
      for (int y = 0; y < s.hp; ++y) {
        const int i_lo = std::max(0, y - (s.oh - 1)), i_hi = std::min(KH - 1, y);   // output rows y - i exist
        if (i_lo > i_hi) continue;
        const int8_t* base = runs + (static_cast<ptrdiff_t>(b) * s.hp + y) * row_bytes;
        const int8_t* erow = err4 + ((static_cast<ptrdiff_t>(b) * s.oh + y) * g.groups) * 64;   // output row y; row y - i is i rows up
        for (int q = 0; q < g.groups; ++q, base += 4, erow += 64) {
          __m512i e[KH];
#pragma GCC unroll 32
          for (int i = 0; i < KH; ++i)
            e[i] = i >= i_lo && i <= i_hi ? _mm512_loadu_si512(erow - static_cast<ptrdiff_t>(i) * g.groups * 64)
                                          : _mm512_setzero_si512();
#pragma GCC unroll 32
          for (int p = 0; p < P; ++p) {
            int32_t word;
            std::memcpy(&word, base + off[p], 4);
            const __m512i x = _mm512_set1_epi32(word);
#pragma GCC unroll 32
            for (int i = 0; i < KH; ++i)
              if (i >= i_lo && i <= i_hi) acc[i][p] = _mm512_dpbusd_epi32(acc[i][p], x, e[i]);
          }
        }
      }
    }
#pragma GCC unroll 32
    for (int i = 0; i < KH; ++i)
#pragma GCC unroll 32
      for (int p = 0; p < P; ++p)
        if (p0 + p < pairs) _mm512_storeu_si512(sums + (static_cast<ptrdiff_t>(i) * s.kw * s.ch + p0 + p) * 16, acc[i][p]);
  }
}

template <int KH>
void olane_sums(const PaddedSrc& s, const OlaneShape& g, const int8_t* runs, const int8_t* err4, int b0, int b1,
                int32_t* sums) {
  constexpr int P = KH == 3 ? 6 : 4;   // KH x P accumulators, KH error vectors, a broadcast: <= 26 registers
  const int pairs = s.kw * s.ch;
  std::vector<int32_t> offsets(pairs);   // pair (j, c), tap j * ch + c of the kernel row
  for (int j = 0; j < s.kw; ++j)
    for (int c = 0; c < s.ch; ++c) offsets[j * s.ch + c] = c * g.run + j;   // the dword of (j, c) from a group's place in its source row
  olane_run<KH, P>(s, g, runs, err4, offsets.data(), pairs, b0, b1, sums);
}

void wgrad_olanes_rows(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw) {
  const OlaneShape g = olane_shape(s.ow, s.wp, s.kw);
  const int taps = s.kh * s.kw * s.ch;
  alignas(64) uint8_t idx[128], eidx[64];
  for (int t = 0; t < 128; ++t) {   // run byte t = (c, x) reads source byte x * ch + c
    const int c = t / g.run, x = t % g.run;
    idx[t] = static_cast<uint8_t>(c < s.ch && x < s.wp ? x * s.ch + c : 127);
  }
  for (int k = 0; k < 64; ++k) eidx[k] = static_cast<uint8_t>(k / 4 < oc ? (k % 4) * oc + k / 4 : 63);
  // kept: the source as channel runs and the error as vectors
  thread_local Kept<std::vector<int8_t>> kept;
  const size_t image_bytes = static_cast<size_t>(s.hp) * s.ch * g.run;
  const size_t bytes = wgrad_olanes_kept_bytes(s.n, s.hp, s.wp, s.ch, s.kw, s.ow, s.oh);
  if (kept.size() < bytes) kept.resize(bytes);
  int8_t* runs = kept.data();
  int8_t* err4 = runs + s.n * image_bytes + 64;
  const int tasks = tasks_for(static_cast<size_t>(s.n) * s.oh * g.groups * taps * 64, s.n);
  const size_t per_task = static_cast<size_t>(taps) * 16 + 16;
  // the tasks' sums, kept at the most tasks tasks_for gives (wgrad_olanes_sums_bytes, which scratch.cpp counts)
  thread_local Kept<std::vector<int32_t>> sums;
  const size_t sum_words = wgrad_olanes_sums_bytes(s.kh, s.kw, s.ch) / sizeof(int32_t);
  if (sums.size() < sum_words) sums.resize(sum_words);
  int32_t* sum = sums.data();   // (a thread_local named in the tasks would be each worker's own)
  parallel_for(tasks, [&](int task) {
    const int b0 = s.n * task / tasks, b1 = s.n * (task + 1) / tasks;
    int32_t* part = sum + task * per_task;
    for (int b = b0; b < b1; ++b) olane_rows(s, g.run, idx, b, runs + b * image_bytes);
    olane_errors(s, err, oc, g, eidx, b0, b1, err4, part + static_cast<size_t>(taps) * 16);
    if (s.kh == 3) olane_sums<3>(s, g, runs, err4, b0, b1, part);
    else olane_sums<5>(s, g, runs, err4, b0, b1, part);
  });
  // dw[o, k] = the tasks' sums less 128 * sum(err[:, o]), mod 2^32 (exact when it fits)
  for (int o = 0; o < oc; ++o) {
    uint32_t esum = 0;
    for (int t = 0; t < tasks; ++t) esum += static_cast<uint32_t>(sum[t * per_task + static_cast<size_t>(taps) * 16 + o]);
    for (int k = 0; k < taps; ++k) {
      uint32_t v = 0;
      for (int t = 0; t < tasks; ++t) v += static_cast<uint32_t>(sum[t * per_task + static_cast<size_t>(k) * 16 + o]);
      dw[static_cast<size_t>(o) * taps + k] = static_cast<int32_t>(v - 128u * esum);
    }
  }
}

}  // namespace

bool wgrad_lanes_fit(int ch, int kh, int kw, int step, int oc) {
  if (ch != 1 || step != 1 || oc < 1 || oc > 8 || kw > 13 || !cpu_has_vbmi()) return false;
  if (active_isa() != Isa::kAvx512Vnni && active_isa() != Isa::kAmx) return false;
  const WgradShape g = wgrad_shape(kh, kw);
  return g.vectors >= 1 && g.vectors <= 4 && g.vectors * oc <= 16;   // accumulators in registers
}

size_t wgrad_olanes_kept_bytes(int n, int hp, int wp, int ch, int kw, int ow, int oh) {
  const OlaneShape g = olane_shape(ow, wp, kw);
  return static_cast<size_t>(n) * hp * ch * g.run + 64 + static_cast<size_t>(n) * oh * g.groups * 64;
}

size_t wgrad_olanes_sums_bytes(int kh, int kw, int ch) {   // at most 4 tasks a pool thread, each 16 int32 a tap + 16
  return static_cast<size_t>(4 * pool_threads()) * (static_cast<size_t>(kh) * kw * ch * 16 + 16) * sizeof(int32_t);
}

bool wgrad_olanes_fit(int ch, int kh, int kw, int step, int oc, int wp, int ow) {
  if (ch < 2 || (kh != 3 && kh != 5) || step != 1 || oc <= 8 || oc > 16 || !cpu_has_vbmi()) return false;
  if (active_isa() != Isa::kAvx512Vnni && active_isa() != Isa::kAmx) return false;
  const OlaneShape g = olane_shape(ow, wp, kw);
  return wp * ch <= 128 && ch * g.run <= 128;   // a source row in two loads, its runs in two permutes
}

void conv_wgrad_olanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw) { wgrad_olanes_rows(s, err, oc, dw); }

void conv_wgrad_lanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw) {
  const WgradShape g = wgrad_shape(s.kh, s.kw);
  switch (g.vectors) {
    case 1: return wgrad_rows<1>(s, err, oc, g, dw);
    case 2: return wgrad_rows<2>(s, err, oc, g, dw);
    case 3: return wgrad_rows<3>(s, err, oc, g, dw);
    default: return wgrad_rows<4>(s, err, oc, g, dw);
  }
}

#else
bool wgrad_lanes_fit(int, int, int, int, int) { return false; }
bool wgrad_olanes_fit(int, int, int, int, int, int, int) { return false; }
size_t wgrad_olanes_kept_bytes(int, int, int, int, int, int, int) { return 0; }
size_t wgrad_olanes_sums_bytes(int, int, int) { return 0; }
void conv_wgrad_olanes(const PaddedSrc&, const int8_t*, int, int32_t*) { std::abort(); }
void conv_wgrad_lanes(const PaddedSrc&, const int8_t*, int, int32_t*) { std::abort(); }
#endif

}  // namespace dsptrain
