// The AVX2 grouped-conv row (conv_grouped_lanes.h): a pair of one group's int16 input
// channels broadcast to all lanes, multiplied by vpmaddwd against the pair's weights for 8
// outputs (exact: |-128 * -128| * 2 fits int32), the sums of R pixels x CH lane vectors kept in
// registers over every tap and pair, the weights read from the table as memory operands.
#include "conv_grouped_lanes.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include <cstring>

#define DSPTRAIN_AVX2 __attribute__((target("avx2")))

namespace dsptrain {
namespace {

DSPTRAIN_AVX2 inline __m256i broadcast_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

DSPTRAIN_AVX2 inline __m256i load(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The first n of 8 lanes.
DSPTRAIN_AVX2 inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// R pixels x CH lane vectors (chunks) of sums; `last` lanes valid in the last chunk.
template <int CH, int R>
DSPTRAIN_AVX2 inline void block(const int16_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, int pairs,
                                const int32_t* wv, ptrdiff_t chunk_stride, int last, int32_t* y, ptrdiff_t ystep,
                                __m256i* most) {
  __m256i acc[R][CH];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CH; ++c) acc[r][c] = _mm256_setzero_si256();
  for (int t = 0; t < taps; ++t) {
    const int16_t* s = src + off[t];
    const int32_t* w = wv + static_cast<ptrdiff_t>(t) * pairs * kGroupedLanes;
    for (int p = 0; p < pairs; ++p, s += 2, w += kGroupedLanes) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256i b = broadcast_pair(s + r * xstep);
#pragma GCC unroll 4
        for (int c = 0; c < CH; ++c)
          acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(b, load(w + c * chunk_stride)));
      }
    }
  }
  const __m256i mask = lane_mask(last);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CH; ++c) {
      int32_t* out = y + r * ystep + c * kGroupedLanes;
      if (c + 1 < CH || last == kGroupedLanes) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc[r][c]);
      else _mm256_maskstore_epi32(out, mask, acc[r][c]);
      *most = _mm256_max_epu32(*most, _mm256_abs_epi32(acc[r][c]));  // lanes past the outputs sum zeros
    }
}

// block<CH, r> for a run-time r <= R.
template <int CH, int R>
DSPTRAIN_AVX2 inline void block_of(int r, const int16_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, int pairs,
                                   const int32_t* wv, ptrdiff_t chunk_stride, int last, int32_t* y, ptrdiff_t ystep,
                                   __m256i* most) {
  if constexpr (R > 1) {
    if (r < R) return block_of<CH, R - 1>(r, src, xstep, off, taps, pairs, wv, chunk_stride, last, y, ystep, most);
  }
  block<CH, R>(src, xstep, off, taps, pairs, wv, chunk_stride, last, y, ystep, most);
}

// A row for CH chunks in blocks of at most R pixels (R * CH sums, at most 12 of the 16
// registers), the row split into blocks of equal size: a row of 8 in two blocks of 4, not 6 and
// 2 (the small block's broadcasts share each weight load with fewer pixels; such rows are a
// 16x16 grouped conv's at stride 2, its tail blocks a third of the time with R-then-ones).
template <int CH, int R>
DSPTRAIN_AVX2 void row(const int16_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, int pairs,
                       const int32_t* wv, ptrdiff_t chunk_stride, int last, int count, int32_t* y, ptrdiff_t ystep,
                       __m256i* most) {
  for (int o = 0; o < count;) {
    const int left = count - o;
    const int r = left <= R ? left : (left + (left + R - 1) / R - 1) / ((left + R - 1) / R);
    block_of<CH, R>(r, src + o * xstep, xstep, off, taps, pairs, wv, chunk_stride, last, y + o * ystep, ystep, most);
    o += r;
  }
}

}  // namespace

bool grouped_lanes_compiled() { return true; }

DSPTRAIN_AVX2 void grouped_lanes_row(const int16_t* src, ptrdiff_t xstep, const ptrdiff_t* off, int taps, int pairs,
                                     const int32_t* wv, int lanes, int count, int32_t* y, ptrdiff_t ystep, int groups,
                                     ptrdiff_t src_group, ptrdiff_t wv_group, uint32_t* absmax) {
  __m256i most = _mm256_setzero_si256();
  const ptrdiff_t chunk_stride = static_cast<ptrdiff_t>(taps) * pairs * kGroupedLanes;
  const int chunks = (lanes + kGroupedLanes - 1) / kGroupedLanes;
  for (int g = 0; g < groups; ++g, src += src_group, wv += wv_group, y += lanes)
    for (int c0 = 0; c0 < chunks; c0 += 4) {  // up to 4 chunks share each broadcast
      const int ch = chunks - c0 < 4 ? chunks - c0 : 4;
      const int last = lanes - (c0 + ch - 1) * kGroupedLanes < kGroupedLanes ? lanes - (c0 + ch - 1) * kGroupedLanes
                                                                             : kGroupedLanes;
      const int32_t* w = wv + c0 * chunk_stride;
      int32_t* out = y + c0 * kGroupedLanes;
      switch (ch) {
        case 1: row<1, 8>(src, xstep, off, taps, pairs, w, chunk_stride, last, count, out, ystep, &most); break;
        case 2: row<2, 6>(src, xstep, off, taps, pairs, w, chunk_stride, last, count, out, ystep, &most); break;
        case 3: row<3, 4>(src, xstep, off, taps, pairs, w, chunk_stride, last, count, out, ystep, &most); break;
        default: row<4, 3>(src, xstep, off, taps, pairs, w, chunk_stride, last, count, out, ystep, &most);
      }
    }
  if (absmax) {
    __m256i* lanes_most = reinterpret_cast<__m256i*>(absmax);
    _mm256_storeu_si256(lanes_most, _mm256_max_epu32(_mm256_loadu_si256(lanes_most), most));
  }
}

namespace {

// NK accumulators of CH chunks (NK * CH <= 12), every row's pixel pairs streamed through them.
template <int CH, int NK>
DSPTRAIN_AVX2 void wgrad_block(const int32_t* src, const ptrdiff_t* row_src, ptrdiff_t src_step, const int32_t* err,
                               const ptrdiff_t* row_err, ptrdiff_t err_step, int rows, int pairs, const ptrdiff_t* off,
                               int32_t* out, ptrdiff_t out_stride) {
  __m256i acc[NK][CH];
  for (int k = 0; k < NK; ++k)
    for (int c = 0; c < CH; ++c) acc[k][c] = load(out + k * out_stride + c * kGroupedLanes);
  for (int r = 0; r < rows; ++r) {
    const int32_t* s = src + row_src[r];
    const int32_t* e = err + row_err[r];
    for (int q = 0; q < pairs; ++q, s += src_step, e += err_step) {
      __m256i ev[CH];
      for (int c = 0; c < CH; ++c) ev[c] = load(e + c * kGroupedLanes);
#pragma GCC unroll 12
      for (int k = 0; k < NK; ++k) {
        const __m256i b = _mm256_set1_epi32(s[off[k]]);
#pragma GCC unroll 4
        for (int c = 0; c < CH; ++c) acc[k][c] = _mm256_add_epi32(acc[k][c], _mm256_madd_epi16(b, ev[c]));
      }
    }
  }
  for (int k = 0; k < NK; ++k)
    for (int c = 0; c < CH; ++c)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k * out_stride + c * kGroupedLanes), acc[k][c]);
}

template <int CH, int NK>
DSPTRAIN_AVX2 void wgrad_blocks(const int32_t* src, const ptrdiff_t* row_src, ptrdiff_t src_step, const int32_t* err,
                                const ptrdiff_t* row_err, ptrdiff_t err_step, int rows, int pairs, const ptrdiff_t* off,
                                int nk, int32_t* out, ptrdiff_t out_stride) {
  int k = 0;
  for (; k + NK <= nk; k += NK)
    wgrad_block<CH, NK>(src, row_src, src_step, err, row_err, err_step, rows, pairs, off + k, out + k * out_stride,
                        out_stride);
  for (; k < nk; ++k)
    wgrad_block<CH, 1>(src, row_src, src_step, err, row_err, err_step, rows, pairs, off + k, out + k * out_stride,
                       out_stride);
}

}  // namespace

DSPTRAIN_AVX2 void grouped_pairs(const int8_t* row0, const int8_t* row1, ptrdiff_t pixel, int w, int first, int count,
                                 int n, int32_t* out, int out_stride) {
  alignas(8) static const int8_t zeros[8] = {};
  if (row0 && row1 && n % 8 == 0 && out_stride == n) {  // the common case without a branch a pixel
    const int lo = first < 0 ? -first : 0, hi = w - first < count ? w - first : count;  // x in [0, w)
    for (int u = 0; u < count; ++u)
      if (u < lo || u >= hi) std::memset(out + static_cast<ptrdiff_t>(u) * n, 0, n * sizeof(int32_t));
    for (int u = lo; u < hi; ++u) {
      const int8_t* a = row0 + (first + u) * pixel;
      const int8_t* b = row1 + (first + u) * pixel;
      int32_t* to = out + static_cast<ptrdiff_t>(u) * n;
      for (int k = 0; k < n; k += 8) {
        const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + k));
        const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + k));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + k), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb)));
      }
    }
    return;
  }
  for (int u = 0; u < count; ++u, out += out_stride) {
    const int x = first + u;
    const bool inside = x >= 0 && x < w;
    const int8_t* a = inside && row0 ? row0 + x * pixel : nullptr;
    const int8_t* b = inside && row1 ? row1 + x * pixel : nullptr;
    int k = 0;
    for (; k + 8 <= n; k += 8) {  // 8 bytes of each interleaved byte by byte, widened: 8 int16 pairs
      const __m128i va = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a ? a + k : zeros));
      const __m128i vb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b ? b + k : zeros));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb)));
    }
    for (; k < n; ++k)
      out[k] = static_cast<int32_t>(static_cast<uint16_t>(a ? a[k] : 0) |
                                    (static_cast<uint32_t>(static_cast<uint16_t>(b ? b[k] : 0)) << 16));
    for (; k < out_stride; ++k) out[k] = 0;
  }
}

DSPTRAIN_AVX2 void grouped_wgrad_lanes(const int32_t* src, const ptrdiff_t* row_src, ptrdiff_t src_step, const int32_t* err,
                         const ptrdiff_t* row_err, ptrdiff_t err_step, int rows, int pairs, const ptrdiff_t* off, int nk,
                         int chunks, int32_t* out) {
  const ptrdiff_t out_stride = static_cast<ptrdiff_t>(chunks) * kGroupedLanes;
  for (ptrdiff_t i = 0; i < nk * out_stride; ++i) out[i] = 0;
  // rows a few at a time (about 64 pixel pairs), every sum block over them while their pairs
  // are in L1: the blocks one after the other over all rows streamed the group's pairs from L2
  // once a block (16x16x64 groups 8 stride 2: 46% of the kernel's samples on the first load)
  const int step = pairs >= 64 ? 1 : 64 / pairs;
  for (int r0 = 0; r0 < rows; r0 += step) {
    const int nr = rows - r0 < step ? rows - r0 : step;
    for (int c0 = 0; c0 < chunks; c0 += 4) {
      const int ch = chunks - c0 < 4 ? chunks - c0 : 4;
      const int32_t* e = err + c0 * kGroupedLanes;
      int32_t* o = out + c0 * kGroupedLanes;
      const ptrdiff_t* rs = row_src + r0;
      const ptrdiff_t* re = row_err + r0;
      switch (ch) {
        case 1: wgrad_blocks<1, 12>(src, rs, src_step, e, re, err_step, nr, pairs, off, nk, o, out_stride); break;
        case 2: wgrad_blocks<2, 6>(src, rs, src_step, e, re, err_step, nr, pairs, off, nk, o, out_stride); break;
        case 3: wgrad_blocks<3, 4>(src, rs, src_step, e, re, err_step, nr, pairs, off, nk, o, out_stride); break;
        default: wgrad_blocks<4, 3>(src, rs, src_step, e, re, err_step, nr, pairs, off, nk, o, out_stride);
      }
    }
  }
}

}  // namespace dsptrain

#else  // not x86-64: the GEMM paths run every grouped conv

namespace dsptrain {
bool grouped_lanes_compiled() { return false; }
void grouped_lanes_row(const int16_t*, ptrdiff_t, const ptrdiff_t*, int, int, const int32_t*, int, int, int32_t*,
                       ptrdiff_t, int, ptrdiff_t, ptrdiff_t, uint32_t*) {}
void grouped_wgrad_lanes(const int32_t*, const ptrdiff_t*, ptrdiff_t, const int32_t*, const ptrdiff_t*, ptrdiff_t, int,
                         int, const ptrdiff_t*, int, int, int32_t*) {}
void grouped_pairs(const int8_t*, const int8_t*, ptrdiff_t, int, int, int, int, int32_t*, int) {}
}  // namespace dsptrain

#endif
