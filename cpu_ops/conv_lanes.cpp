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

using RowsFn = void (*)(const PaddedSrc&, int, const LaneShape&, const int8_t*, const uint8_t*, const int32_t*, int,
                        int, int32_t*, int64_t*, FusedRequant*);

template <int Z>
RowsFn rows_for(Spread spread) {
  return spread == Spread::kBroadcast ? lanes_rows<Z, Spread::kBroadcast>
       : spread == Spread::kTwo ? lanes_rows<Z, Spread::kTwo> : lanes_rows<Z, Spread::kOne>;
}

}  // namespace

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
#endif

}  // namespace dsptrain
