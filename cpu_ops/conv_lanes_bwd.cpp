// Backward data of stride-1 convolutions on AVX-512 VNNI + VBMI, a dx row in the lanes and
// four error channels broadcast (LeNet's conv2); conv_lanes.cpp has the forward.
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

#else
bool bwd_broadcast_fit(const ConvShape&) { return false; }
void conv_bwd_broadcast(const int8_t*, const int8_t*, const ConvShape&, int32_t*, int64_t*, FusedRequant*) { std::abort(); }
size_t bwd_broadcast_kept_bytes(const ConvShape&) { return 0; }
#endif

}  // namespace dsptrain
