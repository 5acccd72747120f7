// int8 max-pool and its backward for windows that tile the image (stride == kernel), a
// whole row of bytes at a time with AVX-512 VBMI byte permutes. pool.cpp walks the
// windows tap by tap with the channels innermost: with LeNet's 6 channels the inner loop
// is 6 bytes, and its backward wrote 0.6 ns a byte (180 us for the first pool's error).
// Here one precomputed permute per 64 bytes moves every tap's bytes into place: the
// backward spreads each error to its window (byte m of an input row reads error byte
// (m / (k C)) C + m % C and is kept where the argmax names its tap), the forward gathers
// each tap's bytes of an output row and keeps the first maximum, as pool.cpp does.
#include "pool_lanes.h"

#include <algorithm>
#include <vector>

#include "cpu_features.h"
#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_POOL_X86 1
#define DSPTRAIN_POOL_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#endif

namespace dsptrain {

#ifdef DSPTRAIN_POOL_X86
namespace {

bool cpu_has_vbmi() { return cpu_features().avx512vbmi && cpu_features().avx512bw; }

// vpermb; the zero-masked form, as the plain one reads an undefined vector (GCC warns)
DSPTRAIN_POOL_VBMI inline __m512i permute_bytes(__m512i idx, __m512i v) {
  return _mm512_maskz_permutexvar_epi8(~__mmask64{0}, idx, v);
}

inline __mmask64 first_bytes(int n) {
  return n <= 0 ? __mmask64{0} : n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// One 64-byte piece of a row: where its source starts, how many source bytes it reads,
// how many bytes it writes, and per byte the source index and the window tap.
struct Piece {
  int src, span, bytes;
  alignas(64) uint8_t idx[64];
  alignas(64) uint8_t tap[64];
};

// The backward's pieces of an input row (w * c bytes): byte m reads error byte
// (m / (k c)) c + m % c, tap column (m / c) % k.
std::vector<Piece> unpool_pieces(const PoolShape& s) {
  const int k = s.kernel, c = s.c, row = s.w * c;
  std::vector<Piece> pieces;
  for (int m0 = 0; m0 < row; m0 += 64) {
    Piece p{};
    p.src = m0 / (k * c) * c;
    p.bytes = std::min(64, row - m0);
    for (int m = 0; m < p.bytes; ++m) {
      const int at = m0 + m;
      p.idx[m] = static_cast<uint8_t>(at / (k * c) * c + at % c - p.src);
      p.tap[m] = static_cast<uint8_t>(at / c % k);
      p.span = std::max(p.span, p.idx[m] + 1);
    }
    pieces.push_back(p);
  }
  return pieces;
}

// The forward's pieces of an output row (ow * c bytes, 64 / k at a time): for tap column
// j, byte m reads input byte ((m / c) k + j) c + m % c of the window row; idx holds tap
// column 0's index, column j adds j * c.
std::vector<Piece> pool_pieces(const PoolShape& s) {
  const int k = s.kernel, c = s.c, row = s.ow() * c, step = 64 / k;
  std::vector<Piece> pieces;
  for (int m0 = 0; m0 < row; m0 += step) {
    Piece p{};
    p.src = m0 / c * k * c;
    p.bytes = std::min(step, row - m0);
    for (int m = 0; m < p.bytes; ++m) {
      const int at = m0 + m;
      p.idx[m] = static_cast<uint8_t>((at / c) * k * c + at % c - p.src);
      p.span = std::max(p.span, p.idx[m] + (k - 1) * c + 1);
    }
    pieces.push_back(p);
  }
  return pieces;
}

bool pieces_fit(const std::vector<Piece>& pieces, int limit) {
  for (const Piece& p : pieces)
    if (p.span > limit) return false;
  return true;
}

DSPTRAIN_POOL_VBMI void unpool_images(const int8_t* err, const uint8_t* argmax, const PoolShape& s,
                                      const std::vector<Piece>& pieces, int b0, int b1, int8_t* dx) {
  const int k = s.kernel, oh = s.oh();
  const size_t err_row = static_cast<size_t>(s.ow()) * s.c, in_row = static_cast<size_t>(s.w) * s.c;
  const __m512i lowest = _mm512_set1_epi8(-127);   // -128 becomes -127 (the symmetric range)
  for (int b = b0; b < b1; ++b)
    for (int oy = 0; oy < oh; ++oy) {
      const int8_t* e_row = err + (static_cast<size_t>(b) * oh + oy) * err_row;
      const uint8_t* a_row = argmax + (static_cast<size_t>(b) * oh + oy) * err_row;
      for (const Piece& p : pieces) {
        const __m512i idx = _mm512_load_si512(p.idx), tap = _mm512_load_si512(p.tap);
        const __mmask64 in = first_bytes(p.span), out = first_bytes(p.bytes);
        const __m512i e = _mm512_max_epi8(permute_bytes(idx, _mm512_maskz_loadu_epi8(in, e_row + p.src)), lowest);
        const __m512i a = permute_bytes(idx, _mm512_maskz_loadu_epi8(in, a_row + p.src));
        for (int i = 0; i < k; ++i) {
          const __mmask64 hit = _mm512_cmpeq_epi8_mask(a, _mm512_add_epi8(tap, _mm512_set1_epi8(static_cast<char>(i * k))));
          int8_t* dst = dx + ((static_cast<size_t>(b) * s.h + static_cast<size_t>(oy) * k + i) * in_row) +
                        (&p - pieces.data()) * 64;
          _mm512_mask_storeu_epi8(dst, out, _mm512_maskz_mov_epi8(hit, e));
        }
      }
    }
}

DSPTRAIN_POOL_VBMI void pool_rows(const int8_t* x, const PoolShape& s, const std::vector<Piece>& pieces, int r0, int r1,
                                  int8_t* y, uint8_t* argmax) {
  const int k = s.kernel, oh = s.oh(), step = 64 / k;
  const size_t out_row = static_cast<size_t>(s.ow()) * s.c, in_row = static_cast<size_t>(s.w) * s.c;
  for (int r = r0; r < r1; ++r) {
    const int b = r / oh, oy = r % oh;
    const int8_t* top = x + (static_cast<size_t>(b) * s.h + static_cast<size_t>(oy) * k) * in_row;
    for (size_t q = 0; q < pieces.size(); ++q) {
      const Piece& p = pieces[q];
      const __m512i idx0 = _mm512_load_si512(p.idx);
      const __mmask64 lo_mask = first_bytes(p.span), hi_mask = first_bytes(p.span - 64);
      __m512i best = _mm512_setzero_si512(), which = _mm512_setzero_si512();
      for (int i = 0; i < k; ++i) {
        const int8_t* src = top + i * in_row + p.src;
        const __m512i lo = _mm512_maskz_loadu_epi8(lo_mask, src), hi = _mm512_maskz_loadu_epi8(hi_mask, src + 64);
        for (int j = 0; j < k; ++j) {
          const __m512i idx = _mm512_add_epi8(idx0, _mm512_set1_epi8(static_cast<char>(j * s.c)));
          const __m512i v = _mm512_permutex2var_epi8(lo, idx, hi);
          if (i == 0 && j == 0) {
            best = v;
            continue;
          }
          const __mmask64 more = _mm512_cmpgt_epi8_mask(v, best);   // strict: the first maximum stays
          best = _mm512_mask_mov_epi8(best, more, v);
          which = _mm512_mask_mov_epi8(which, more, _mm512_set1_epi8(static_cast<char>(i * k + j)));
        }
      }
      const __mmask64 out = first_bytes(p.bytes);
      const size_t at = static_cast<size_t>(r) * out_row + q * step;
      _mm512_mask_storeu_epi8(y + at, out, best);
      _mm512_mask_storeu_epi8(argmax + at, out, which);
    }
  }
}

}  // namespace

bool pool_lanes_fit(const PoolShape& s) {
  if (!cpu_has_vbmi() || s.kernel < 2 || s.kernel > 8 || s.stride != s.kernel || s.c < 1 || s.c > 64) return false;
  if (s.h != s.oh() * s.kernel || s.w != s.ow() * s.kernel) return false;   // every cell in one window
  return pieces_fit(unpool_pieces(s), 64) && pieces_fit(pool_pieces(s), 128);
}

void maxpool_lanes(const int8_t* x, const PoolShape& s, int8_t* y, uint8_t* argmax) {
  const std::vector<Piece> pieces = pool_pieces(s);
  const int rows = s.n * s.oh();
  parallel_ranges(rows, static_cast<size_t>(s.n) * s.h * s.w * s.c,
                  [&](int r0, int r1) { pool_rows(x, s, pieces, r0, r1, y, argmax); });
}

void maxpool_bwd_lanes(const int8_t* err, const uint8_t* argmax, const PoolShape& s, int8_t* dx) {
  const std::vector<Piece> pieces = unpool_pieces(s);
  parallel_ranges(s.n, static_cast<size_t>(s.n) * s.h * s.w * s.c,
                  [&](int b0, int b1) { unpool_images(err, argmax, s, pieces, b0, b1, dx); });
}

#else
bool pool_lanes_fit(const PoolShape&) { return false; }
void maxpool_lanes(const int8_t*, const PoolShape&, int8_t*, uint8_t*) {}
void maxpool_bwd_lanes(const int8_t*, const uint8_t*, const PoolShape&, int8_t*) {}
#endif

}  // namespace dsptrain
