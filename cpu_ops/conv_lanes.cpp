// Stride-1 convolutions with few output channels on AVX-512 VNNI + VBMI, with the output
// itself in the vector lanes. Pixel panels (conv_panels.cpp) put 64 pixels in a GEMM
// tile's columns, so each panel is gathered from the source (dword gathers, 53 % of
// LeNet-5's error convolution) and its result transposed back to NHWC with scalar stores
// (38 % of its first convolution). Here lane k of vector z holds output element
// (pixel q, channel o) = divmod(16 z + k, O) of a group of P pixels (P * O a multiple of
// 16): the group's NHWC output is z contiguous vectors, stored as they are. Each
// vpdpbusd step takes 4 consecutive bytes of a tap row (kw * C bytes, contiguous in NHWC)
// for every pixel: one or two 64-byte loads of the source row and a byte permute
// (vpermb / vpermt2b) spread them to the lanes, and a per-lane weight vector holds the
// matching 4 weights of each lane's channel. This is the DSP's conv_lanes.c idea (pixels
// in the lanes, weights beside them) with the channels interleaved into the lanes too.
//
// vpdpbusd multiplies u8 by s8: the source bytes are made u8 (x + 128: pad_source's bias,
// or an XOR after the load) and each lane corrected by -128 * (the sum of its channel's
// weights), exact mod 2^32 as in the GEMM kernels. Tap rows that fall on padding rows are skipped (29 % of the taps
// of LeNet's conv2 error pass, a stride-1 convolution of the error padded by 4). The largest |result| is taken on the way for the requantizing entry points.
// With a given shift (adaptive rescaling's steps between checks) the requantizing entry
// points round to int8 in the registers (FusedRequant): no int32 tensor is written and
// read back (LeNet-5's three lane products at one thread: conv1 355 -> 285 us, conv2 240
// -> 203, conv2's error pass 435 -> 425, A/B in one run at load 10).
#include "conv_lanes.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu_features.h"
#include "gemm.h"
#include "requant.h"
#include "round_lanes.h"
#include "scratch.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics (abs, permutes) start from an undefined vector it then warns about
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define DSPTRAIN_LANES_X86 1
#define DSPTRAIN_LANES __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi")))
#endif

namespace dsptrain {

namespace {

constexpr int kMaxVectors = 4;        // z per pixel group (accumulators held in registers)
constexpr int kMaxSpan = 128;         // source bytes one step reads: two loads
constexpr size_t kMaxWeightBytes = 24 * 1024;  // lane weights kept in L1 beside the source

struct LaneShape {
  int pixels;   // P: pixels per group
  int vectors;  // P * O / 16
  int steps;    // dwords per tap row: run_pad(kw * C) / 4
  int span;     // source bytes one step needs: (P - 1) * C + 4
};

LaneShape lane_shape(int ch, int kw, int oc) {
  const int p = 16 / std::gcd(oc, 16);
  return {p, p * oc / 16, run_pad(kw * ch) / 4, (p - 1) * ch + 4};
}

bool cpu_has_vbmi() {
#ifdef DSPTRAIN_LANES_X86
  return cpu_features().avx512vbmi && cpu_features().avx512_vnni;   // avx512_vnni includes BW
#else
  return false;
#endif
}

}  // namespace

bool lanes_biased(int ch, int kw, int oc) {
  const LaneShape l = lane_shape(ch, kw, oc);
  return l.pixels == 1 || l.span > 64;
}

bool lanes_fit(int ch, int kh, int kw, int step, int oc) {
  if (step != 1 || oc < 1 || !cpu_has_vbmi()) return false;
  // the GEMM's ISA chosen (or forced) must be AVX-512: a forced avx2/scalar run stays there
  if (active_isa() != Isa::kAvx512Vnni && active_isa() != Isa::kAmx) return false;
  const LaneShape l = lane_shape(ch, kw, oc);
  return l.vectors <= kMaxVectors && l.span <= kMaxSpan &&
         static_cast<size_t>(kh) * l.steps * l.vectors * 64 <= kMaxWeightBytes;
}

#ifdef DSPTRAIN_LANES_X86
namespace {

// The lane weights: for tap row i, step t, vector z, lane k (channel o = (16 z + k) % O),
// the 4 bytes w_runs[o, i, 4 t .. 4 t + 3]; and per tap row each lane's correction
// -128 * sum(w[o, i]) (a skipped padding row adds neither its u8 products nor this).
void lane_weights(const int8_t* w_runs, int oc, int kh, int runp, const LaneShape& l, int8_t* wv, int32_t* corr) {
  for (int i = 0; i < kh; ++i)
    for (int t = 0; t < l.steps; ++t)
      for (int z = 0; z < l.vectors; ++z) {
        int8_t* v = wv + ((static_cast<size_t>(i) * l.steps + t) * l.vectors + z) * 64;
        for (int k = 0; k < 16; ++k) {
          const int o = (16 * z + k) % oc;
          for (int b = 0; b < 4; ++b) v[4 * k + b] = w_runs[(static_cast<size_t>(o) * kh + i) * runp + 4 * t + b];
        }
      }
  for (int i = 0; i < kh; ++i)
    for (int z = 0; z < l.vectors; ++z)
      for (int k = 0; k < 16; ++k) {
        const int o = (16 * z + k) % oc;
        int32_t sum = 0;
        for (int r = 0; r < runp; ++r) sum += w_runs[(static_cast<size_t>(o) * kh + i) * runp + r];
        corr[(i * l.vectors + z) * 16 + k] = static_cast<int32_t>(static_cast<uint32_t>(sum) * static_cast<uint32_t>(-128));
      }
}

// Byte b of lane k of vector z reads source byte q * C + b of the step's span.
void lane_index(const PaddedSrc& s, int oc, const LaneShape& l, uint8_t* idx) {
  for (int z = 0; z < l.vectors; ++z)
    for (int k = 0; k < 16; ++k)
      for (int b = 0; b < 4; ++b) idx[z * 64 + 4 * k + b] = static_cast<uint8_t>((16 * z + k) / oc * s.ch + b);
}

// vpermb; the zero-masked form, as the plain one reads an undefined vector (GCC warns)
DSPTRAIN_LANES inline __m512i permute_bytes(__m512i idx, __m512i v) {
  return _mm512_maskz_permutexvar_epi8(~__mmask64{0}, idx, v);
}

inline __mmask64 first_bytes(int n) {
  return n <= 0 ? __mmask64{0} : n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// How a step's source bytes reach the lanes: one 64-byte load and vpermb, two loads and
// vpermt2b (a span over 64 bytes), or, with one pixel a group (output channels a multiple
// of 16), the pixel's dword broadcast.
enum class Spread { kOne, kTwo, kBroadcast };

// Output rows r0..r1 (row r: image r / OH, row r % OH) into out (row r0's first element);
// returns the largest |result|. The source is biased (u8, pad_source's 0x80) for the
// two-load and broadcast spreads (lanes_biased), flipped here for the one-load one; tap rows
// outside the padded rows [data0, data1) hold only padding and are skipped; `corr` holds
// per output row oy the corrections of the tap rows it runs. With `fused`, the results go
// shift-rounded to int8 into q (row r0's first element) instead of out.
// (Running 4-8 output rows at once, each source row spread once for all the rows reading
// it, was tried: LeNet's conv1 went from 235 to 280 us at one thread, conv2's error pass
// from 425 to 445; the single row stays.)
template <int Z, Spread S>
DSPTRAIN_LANES uint32_t lanes_run(const PaddedSrc& s, int oc, const LaneShape& l, const int8_t* wv, const uint8_t* idx,
                                  const int32_t* corr, int data0, int data1, int r0, int r1, int32_t* out,
                                  FusedRequant* fused, int8_t* q) {
  const ptrdiff_t rs = s.row_stride();
  const size_t row_weights = static_cast<size_t>(l.steps) * Z * 64;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i ix[Z], cz[Z];
  for (int z = 0; z < Z; ++z) ix[z] = _mm512_loadu_si512(idx + 64 * z);
  __m512i top = _mm512_setzero_si512();
  const ptrdiff_t row_out = static_cast<ptrdiff_t>(s.ow) * oc;
  for (int r = r0; r < r1; ++r, out += fused ? 0 : row_out, q += fused ? row_out : 0) {
    const int oy = r % s.oh;
    const int8_t* row0 = s.d + s.base(r / s.oh, oy, 0);
    const int i0 = std::max(0, data0 - oy), i1 = std::min(s.kh, data1 - oy);
    for (int z = 0; z < Z; ++z) cz[z] = _mm512_loadu_si512(corr + (static_cast<size_t>(oy) * Z + z) * 16);
    for (int x0 = 0; x0 < s.ow; x0 += l.pixels) {
      const int valid = std::min(l.pixels, s.ow - x0);
      // a partial group reads no further than its last pixel's tap row (+3 run padding)
      const int span = valid == l.pixels ? l.span : (valid - 1) * s.ch + 4;
      const __mmask64 lo_mask = first_bytes(span), hi_mask = first_bytes(span - 64);
      __m512i acc[Z];
      for (int z = 0; z < Z; ++z) acc[z] = cz[z];
      for (int i = i0; i < i1; ++i) {
        const int8_t* src = row0 + i * rs + static_cast<ptrdiff_t>(x0) * s.ch;
        const int8_t* w = wv + i * row_weights;
        for (int t = 0; t < l.steps; ++t, src += 4, w += Z * 64) {
          if constexpr (S == Spread::kBroadcast) {   // one pixel: every lane reads the same dword
            int32_t word;
            std::memcpy(&word, src, 4);
            const __m512i a = _mm512_set1_epi32(word);
            for (int z = 0; z < Z; ++z) acc[z] = _mm512_dpbusd_epi32(acc[z], a, _mm512_loadu_si512(w + 64 * z));
          } else if constexpr (S == Spread::kTwo) {
            const __m512i lo = _mm512_maskz_loadu_epi8(lo_mask, src), hi = _mm512_maskz_loadu_epi8(hi_mask, src + 64);
            for (int z = 0; z < Z; ++z)
              acc[z] = _mm512_dpbusd_epi32(acc[z], _mm512_permutex2var_epi8(lo, ix[z], hi),
                                           _mm512_loadu_si512(w + 64 * z));
          } else {   // an unbiased source (the bias costs pad_source more than this XOR saves here)
            const __m512i lo = _mm512_xor_si512(_mm512_maskz_loadu_epi8(lo_mask, src), flip);
            for (int z = 0; z < Z; ++z)
              acc[z] = _mm512_dpbusd_epi32(acc[z], permute_bytes(ix[z], lo), _mm512_loadu_si512(w + 64 * z));
          }
        }
      }
      int left = valid * oc;  // the group's outputs: z vectors in NHWC order
      const ptrdiff_t at = static_cast<ptrdiff_t>(x0) * oc;
      for (int z = 0; z < Z && left > 0; ++z, left -= 16) {
        const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
        if (fused) {
          _mm512_mask_cvtepi32_storeu_epi8(q + at + 16 * z, m, shift_round_lanes(acc[z], fused->shift, fused->mode));
        } else {
          _mm512_mask_storeu_epi32(out + at + 16 * z, m, acc[z]);
        }
        top = _mm512_mask_max_epu32(top, m, top, _mm512_abs_epi32(acc[z]));
      }
    }
  }
  return _mm512_reduce_max_epu32(top);
}

template <int Z, Spread S>
void lanes_rows(const PaddedSrc& s, int oc, const LaneShape& l, const int8_t* wv, const uint8_t* idx,
                const int32_t* corr, int data0, int data1, int32_t* out, int64_t* absmax, FusedRequant* fused) {
  const int rows = s.n * s.oh;
  const size_t row_out = static_cast<size_t>(s.ow) * oc;
  const int tasks = tasks_for(static_cast<size_t>(rows) * row_out * 4, rows);
  std::vector<uint32_t> tops(tasks, 0);
  parallel_for(tasks, [&](int task) {
    const int r0 = static_cast<int>(static_cast<long long>(rows) * task / tasks);
    const int r1 = static_cast<int>(static_cast<long long>(rows) * (task + 1) / tasks);
    tops[task] = lanes_run<Z, S>(s, oc, l, wv, idx, corr, data0, data1, r0, r1, fused ? nullptr : out + r0 * row_out,
                                 fused, fused ? fused->out + r0 * row_out : nullptr);
  });
  if (absmax) *absmax = *std::max_element(tops.begin(), tops.end());
}


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

using RowsFn = void (*)(const PaddedSrc&, int, const LaneShape&, const int8_t*, const uint8_t*, const int32_t*, int,
                        int, int32_t*, int64_t*, FusedRequant*);

template <int Z>
RowsFn rows_for(Spread spread) {
  return spread == Spread::kBroadcast ? lanes_rows<Z, Spread::kBroadcast>
       : spread == Spread::kTwo ? lanes_rows<Z, Spread::kTwo> : lanes_rows<Z, Spread::kOne>;
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

// ---------------------------------------------------------------- backward data, the error broadcast
// dx[b, y, x, c] = sum over (i, j, o) of err[b, y + pad - i, x + pad - j, o] * w[o, i, j, c]
// with the lanes a whole dx row (pixels x channels, NV vectors: LeNet's conv2, 14 x 6 in 6)
// and four error channels of one error pixel broadcast as a dword: the weight vector of
// (tap row i, error column ex, channel quad q) holds, in lane (x, c), w[4q..4q+3, i,
// x + pad - ex, c] where that tap exists (zero elsewhere), so an error pixel feeds the 2-3
// vectors its kw columns reach. No padded or dilated error and no byte permutes: the lane
// layout of conv_lanes reads the error padded by kw - 1 on every side (29 % of its taps on
// zeros) and spends a vpermt2b per vpdpbusd on it. The error is made u8 (XOR 0x80) and
// each lane corrected by -128 * the sum of the weights it met. Two dx rows run together,
// sharing each broadcast. LeNet-5's conv2 at one thread: 425 -> 250 us (A/B, load 11).
constexpr int kBcastRows = 2;
constexpr int kBcastReach = 3;   // vectors one error pixel's columns reach at most

struct BcastShape {
  int nv;       // vectors per dx row
  int lanes;    // w * c
  int nq;       // error channel quads
};

BcastShape bcast_shape(const ConvShape& s) { return {(s.w * s.c + 15) / 16, s.w * s.c, s.o / 4}; }

// One error pixel's quads into the vectors [LO, LO + CNT) of the rows in use (U0: the
// block's first row, U1: its second), all indices compile-time: the accumulators stay in
// registers and no test runs per vpdpbusd (with them tested in the loop: 1 ns a vpdpbusd).
template <int NV, int LO, int CNT, bool U0, bool U1>
DSPTRAIN_LANES inline void bcast_quads(__m512i (&acc)[kBcastRows][NV], const int8_t* epix, const int8_t* w0,
                                       ptrdiff_t i_bytes, int nq) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int q = 0; q < nq; ++q, w0 += kBcastReach * 64) {
    int32_t word;
    std::memcpy(&word, epix + 4 * q, 4);
    const __m512i e = _mm512_xor_si512(_mm512_set1_epi32(word), flip);
#pragma GCC unroll 3
    for (int t = 0; t < CNT; ++t) {
      if (LO + t >= NV) break;
      if (U0) acc[0][LO + t] = _mm512_dpbusd_epi32(acc[0][LO + t], e, _mm512_loadu_si512(w0 + t * 64));
      if (U1) acc[1][LO + t] = _mm512_dpbusd_epi32(acc[1][LO + t], e, _mm512_loadu_si512(w0 + i_bytes + t * 64));
    }
  }
}

// An error row into the block's rows in use: each pixel's quads into the vectors it reaches.
template <int NV, bool U0, bool U1>
DSPTRAIN_LANES inline void bcast_err_row(__m512i (&acc)[kBcastRows][NV], const int8_t* erow, const int8_t* wrow0,
                                         ptrdiff_t ex_bytes, ptrdiff_t i_bytes, const uint8_t* vlo, const uint8_t* vhi,
                                         int ow, int oc, int nq) {
  for (int ex = 0; ex < ow; ++ex) {
    if (vlo[ex] == 255) continue;
    const int8_t* epix = erow + ex * oc;
    const int8_t* w0 = wrow0 + ex * ex_bytes;
    switch (vlo[ex] * 4 + (vhi[ex] - vlo[ex] + 1)) {
#define DSPTRAIN_BCAST_CASE(L, C) \
  case L * 4 + C: bcast_quads<NV, L, C, U0, U1>(acc, epix, w0, i_bytes, nq); break;
      DSPTRAIN_BCAST_CASE(0, 1) DSPTRAIN_BCAST_CASE(0, 2) DSPTRAIN_BCAST_CASE(0, 3)
      DSPTRAIN_BCAST_CASE(1, 1) DSPTRAIN_BCAST_CASE(1, 2) DSPTRAIN_BCAST_CASE(1, 3)
      DSPTRAIN_BCAST_CASE(2, 1) DSPTRAIN_BCAST_CASE(2, 2) DSPTRAIN_BCAST_CASE(2, 3)
      DSPTRAIN_BCAST_CASE(3, 1) DSPTRAIN_BCAST_CASE(3, 2) DSPTRAIN_BCAST_CASE(3, 3)
      DSPTRAIN_BCAST_CASE(4, 1) DSPTRAIN_BCAST_CASE(4, 2) DSPTRAIN_BCAST_CASE(4, 3)
      DSPTRAIN_BCAST_CASE(5, 1) DSPTRAIN_BCAST_CASE(5, 2) DSPTRAIN_BCAST_CASE(5, 3)
#undef DSPTRAIN_BCAST_CASE
      default: break;
    }
  }
}

template <int NV>
DSPTRAIN_LANES uint32_t bcast_block(const int8_t* err, const ConvShape& s, const BcastShape& g, const int8_t* wv,
                                    const int32_t* corr, const uint8_t* vlo, const uint8_t* vhi, int b, int y0,
                                    int rows, int32_t* out, FusedRequant* fused, int8_t* q8) {
  const int oh = s.oh(), ow = s.ow();
  const ptrdiff_t ex_bytes = static_cast<ptrdiff_t>(g.nq) * kBcastReach * 64, i_bytes = ow * ex_bytes;
  __m512i acc[kBcastRows][NV];
#pragma GCC unroll 16
  for (int r = 0; r < kBcastRows; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      acc[r][v] = r < rows ? _mm512_loadu_si512(corr + (static_cast<ptrdiff_t>(y0 + r) * NV + v) * 16) : _mm512_setzero_si512();
  const int ey0 = std::max(0, y0 + s.pad - (s.kh - 1)), ey1 = std::min(oh - 1, y0 + rows - 1 + s.pad);
  for (int ey = ey0; ey <= ey1; ++ey) {
    const int i0 = y0 + s.pad - ey;   // tap row of dx row y0 (row y0 + 1 takes i0 + 1)
    const bool use0 = i0 >= 0 && i0 < s.kh, use1 = rows > 1 && i0 + 1 >= 0 && i0 + 1 < s.kh;
    const int8_t* erow = err + (static_cast<ptrdiff_t>(b) * oh + ey) * ow * s.o;
    const int8_t* wrow0 = wv + i0 * i_bytes;   // read only where use0 (use1: one tap row on)
    if (use0 && use1) bcast_err_row<NV, true, true>(acc, erow, wrow0, ex_bytes, i_bytes, vlo, vhi, ow, s.o, g.nq);
    else if (use0) bcast_err_row<NV, true, false>(acc, erow, wrow0, ex_bytes, i_bytes, vlo, vhi, ow, s.o, g.nq);
    else if (use1) bcast_err_row<NV, false, true>(acc, erow, wrow0, ex_bytes, i_bytes, vlo, vhi, ow, s.o, g.nq);
  }
  __m512i top = _mm512_setzero_si512();
  const ptrdiff_t row_out = g.lanes;
  for (int r = 0; r < kBcastRows && r < rows; ++r) {
    int left = g.lanes;
    const ptrdiff_t at = (static_cast<ptrdiff_t>(b) * s.h + y0 + r) * row_out;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v, left -= 16) {
      if (left <= 0) break;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
      if (fused) {
        _mm512_mask_cvtepi32_storeu_epi8(q8 + at + 16 * v, m, shift_round_lanes(acc[r][v], fused->shift, fused->mode));
      } else {
        _mm512_mask_storeu_epi32(out + at + 16 * v, m, acc[r][v]);
      }
      top = _mm512_mask_max_epu32(top, m, top, _mm512_abs_epi32(acc[r][v]));
    }
  }
  return _mm512_reduce_max_epu32(top);
}

template <int NV>
void bcast_rows(const int8_t* err, const ConvShape& s, const BcastShape& g, const int8_t* wv, const int32_t* corr,
                const uint8_t* vlo, const uint8_t* vhi, int32_t* out, int64_t* absmax, FusedRequant* fused) {
  const int per_image = (s.h + kBcastRows - 1) / kBcastRows, blocks = s.n * per_image;
  const int tasks = tasks_for(static_cast<size_t>(s.n) * s.h * g.lanes * 4, blocks);
  std::vector<uint32_t> tops(tasks, 0);
  parallel_for(tasks, [&](int task) {
    uint32_t top = 0;
    for (int k = blocks * task / tasks; k < blocks * (task + 1) / tasks; ++k) {
      const int b = k / per_image, y0 = k % per_image * kBcastRows;
      top = std::max(top, bcast_block<NV>(err, s, g, wv, corr, vlo, vhi, b, y0, std::min(kBcastRows, s.h - y0), out,
                                          fused, fused ? fused->out : nullptr));
    }
    tops[task] = top;
  });
  if (absmax) *absmax = *std::max_element(tops.begin(), tops.end());
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

// The fused epilogue these kernels apply from their registers (round, psto; shift 0..30),
// marked applied with no int32 accumulators written; nullptr (write int32) otherwise.
static FusedRequant* in_registers(FusedRequant* fused) {
  if (!fused || fused->mode == RoundMode::kSto || fused->shift < 0 || fused->shift > 30) return nullptr;
  fused->applied = true;
  fused->acc_written = false;
  return fused;
}

bool bwd_broadcast_fit(const ConvShape& s) {
  if (s.stride != 1 || s.o < 8 || s.o > 32 || s.o % 4 || !cpu_has_vbmi()) return false;
  if (active_isa() != Isa::kAvx512Vnni && active_isa() != Isa::kAmx) return false;
  // a dx row in at most 6 vectors (12 accumulators), an error pixel's columns in at most 3
  return s.w * s.c <= 96 && s.kw * s.c <= 33 && s.pad < s.kh && s.pad < s.kw;
}

void conv_bwd_broadcast(const int8_t* err, const int8_t* w, const ConvShape& s, int32_t* dx, int64_t* absmax,
                        FusedRequant* fused) {
  fused = in_registers(fused);
  const BcastShape g = bcast_shape(s);
  const int ow = s.ow(), taps = s.kh * s.kw * s.c;
  // wd[(i, j, q, c)]: the dword of w[4q..4q+3, i, j, c]; wsum[(i, j, c)]: sum over o
  std::vector<int32_t> wd(static_cast<size_t>(s.kh) * s.kw * g.nq * s.c), wsum(static_cast<size_t>(taps), 0);
  for (int i = 0; i < s.kh; ++i)
    for (int j = 0; j < s.kw; ++j)
      for (int c = 0; c < s.c; ++c) {
        const size_t tap = (static_cast<size_t>(i) * s.kw + j) * s.c + c;
        for (int q = 0; q < g.nq; ++q) {
          uint32_t word = 0;
          for (int k = 0; k < 4; ++k) {
            const int8_t v = w[static_cast<size_t>(4 * q + k) * taps + tap];
            word |= static_cast<uint32_t>(static_cast<uint8_t>(v)) << (8 * k);
            wsum[tap] += v;
          }
          wd[((static_cast<size_t>(i) * s.kw + j) * g.nq + q) * s.c + c] = static_cast<int32_t>(word);
        }
      }
  // the vectors error column ex reaches: lanes [(ex - pad) c, (ex - pad + kw) c) within the row
  std::vector<uint8_t> vlo(ow), vhi(ow);
  for (int ex = 0; ex < ow; ++ex) {
    const int lo = std::max(0, (ex - s.pad) * s.c), hi = std::min(g.lanes, (ex - s.pad + s.kw) * s.c);
    vlo[ex] = static_cast<uint8_t>(lo < hi ? lo / 16 : 255);
    vhi[ex] = static_cast<uint8_t>(lo < hi ? (hi - 1) / 16 : 0);
  }
  std::vector<int> lane_x(g.nv * 16), lane_c(g.nv * 16);   // lane -> (x, c), no division in the loops below
  for (int lane = 0; lane < g.nv * 16; ++lane) lane_x[lane] = lane / s.c, lane_c[lane] = lane % s.c;
  thread_local Kept<std::vector<int8_t>> kept;
  const size_t ex_bytes = static_cast<size_t>(g.nq) * kBcastReach * 64, bytes = static_cast<size_t>(s.kh) * ow * ex_bytes;
  if (kept.size() < bytes) kept.resize(bytes);
  int8_t* wv = kept.data();
  std::memset(wv, 0, bytes);
  for (int i = 0; i < s.kh; ++i)
    for (int ex = 0; ex < ow; ++ex) {
      if (vlo[ex] == 255) continue;
      for (int q = 0; q < g.nq; ++q) {
        // lane (x, c) of the span from vector vlo: x = ex - pad + j for the taps j that land in the row
        int32_t* span = reinterpret_cast<int32_t*>(wv + (static_cast<size_t>(i) * ow + ex) * ex_bytes) + q * kBcastReach * 16;
        for (int j = 0; j < s.kw; ++j) {
          const int x = ex - s.pad + j;
          if (x < 0 || x >= s.w) continue;
          const int32_t* from = wd.data() + ((static_cast<size_t>(i) * s.kw + j) * g.nq + q) * s.c;
          std::memcpy(span + x * s.c - 16 * vlo[ex], from, static_cast<size_t>(s.c) * 4);
        }
      }
    }
  // corr[y, lane] = -128 * the weights lane (x, c) of dx row y meets: every tap row whose
  // error row exists, every tap column whose error column exists
  std::vector<uint32_t> column(static_cast<size_t>(s.kh) * g.lanes, 0);   // per tap row i, lane: its weights' sum
  for (int i = 0; i < s.kh; ++i)
    for (int lane = 0; lane < g.lanes; ++lane) {
      const int x = lane_x[lane], c = lane_c[lane];
      for (int j = 0; j < s.kw; ++j) {
        const int ex = x + s.pad - j;
        if (ex >= 0 && ex < ow) column[static_cast<size_t>(i) * g.lanes + lane] += static_cast<uint32_t>(wsum[(static_cast<size_t>(i) * s.kw + j) * s.c + c]);
      }
    }
  std::vector<int32_t> corr(static_cast<size_t>(s.h) * g.nv * 16, 0);
  for (int y = 0; y < s.h; ++y)
    for (int i = 0; i < s.kh; ++i) {
      const int ey = y + s.pad - i;
      if (ey < 0 || ey >= s.oh()) continue;
      for (int lane = 0; lane < g.lanes; ++lane) {
        int32_t& cv = corr[static_cast<size_t>(y) * g.nv * 16 + lane];
        cv = static_cast<int32_t>(static_cast<uint32_t>(cv) + column[static_cast<size_t>(i) * g.lanes + lane] * static_cast<uint32_t>(-128));
      }
    }
  switch (g.nv) {
    case 1: return bcast_rows<1>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
    case 2: return bcast_rows<2>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
    case 3: return bcast_rows<3>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
    case 4: return bcast_rows<4>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
    case 5: return bcast_rows<5>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
    default: return bcast_rows<6>(err, s, g, wv, corr.data(), vlo.data(), vhi.data(), dx, absmax, fused);
  }
}

size_t bwd_broadcast_kept_bytes(const ConvShape& s) {
  return static_cast<size_t>(s.kh) * s.ow() * (s.o / 4) * kBcastReach * 64;
}

void conv_wgrad_lanes(const PaddedSrc& s, const int8_t* err, int oc, int32_t* dw) {
  const WgradShape g = wgrad_shape(s.kh, s.kw);
  switch (g.vectors) {
    case 1: return wgrad_rows<1>(s, err, oc, g, dw);
    case 2: return wgrad_rows<2>(s, err, oc, g, dw);
    case 3: return wgrad_rows<3>(s, err, oc, g, dw);
    default: return wgrad_rows<4>(s, err, oc, g, dw);
  }
}

void conv_lanes(const PaddedSrc& s, const int8_t* w_runs, int oc, int data0, int data1, int32_t* out, int64_t* absmax,
                FusedRequant* fused) {
  fused = in_registers(fused);
  const LaneShape l = lane_shape(s.ch, s.kw, oc);
  const int runp = run_pad(s.run());
  std::vector<int8_t> wv(static_cast<size_t>(s.kh) * l.steps * l.vectors * 64);
  std::vector<int32_t> corr(static_cast<size_t>(s.kh) * l.vectors * 16);
  alignas(64) uint8_t idx[64 * kMaxVectors];
  lane_weights(w_runs, oc, s.kh, runp, l, wv.data(), corr.data());
  // per output row, the sum of the corrections of the tap rows it runs (not the skipped ones)
  std::vector<int32_t> corr_rows(static_cast<size_t>(s.oh) * l.vectors * 16, 0);
  for (int oy = 0; oy < s.oh; ++oy)
    for (int i = std::max(0, data0 - oy); i < std::min(s.kh, data1 - oy); ++i)
      for (int q = 0; q < l.vectors * 16; ++q) {
        int32_t& c = corr_rows[static_cast<size_t>(oy) * l.vectors * 16 + q];
        c = static_cast<int32_t>(static_cast<uint32_t>(c) + static_cast<uint32_t>(corr[i * l.vectors * 16 + q]));
      }
  lane_index(s, oc, l, idx);
  const Spread spread = l.pixels == 1 ? Spread::kBroadcast : l.span > 64 ? Spread::kTwo : Spread::kOne;
  const RowsFn fn = l.vectors == 1 ? rows_for<1>(spread) : l.vectors == 2 ? rows_for<2>(spread)
                  : l.vectors == 3 ? rows_for<3>(spread) : rows_for<4>(spread);
  fn(s, oc, l, wv.data(), idx, corr_rows.data(), data0, data1, out, absmax, fused);
}

#else
void conv_lanes(const PaddedSrc&, const int8_t*, int, int, int, int32_t*, int64_t*, FusedRequant*) { std::abort(); }  // never fits
bool wgrad_lanes_fit(int, int, int, int, int) { return false; }
bool wgrad_olanes_fit(int, int, int, int, int, int, int) { return false; }
bool bwd_broadcast_fit(const ConvShape&) { return false; }
void conv_bwd_broadcast(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*, FusedRequant*) { std::abort(); }
size_t bwd_broadcast_kept_bytes(const ConvShape&) { return 0; }
size_t wgrad_olanes_kept_bytes(int, int, int, int, int, int, int) { return 0; }
size_t wgrad_olanes_sums_bytes(int, int, int) { return 0; }
void conv_wgrad_olanes(const PaddedSrc&, const int8_t*, int, int32_t*) { std::abort(); }
void conv_wgrad_lanes(const PaddedSrc&, const int8_t*, int, int32_t*) { std::abort(); }
#endif

}  // namespace dsptrain
