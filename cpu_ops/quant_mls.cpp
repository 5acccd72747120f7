// quantize_mls_lanes: MLS's quantizer (Zhong et al., IEEE TCAD 2022) in one pass over
// sixteen float32 lanes, bit-exact with the double-precision definition
// (float_ops.quantize_mls, quant.cpp's general loop) by three facts:
//
// - The group shift needs no division. k = clip(floor(log2(RN(top / g))), 0, kmax) with
//   top and the group max g float32 values: a ratio of two 24-bit values lies at least
//   2**-25 (relative) below a power of two or at or above it, so its double rounding never
//   reaches 2**j from below, and k counts the j in 1..kmax with g * 2**j <= top. For
//   positive floats that is bits(g) + j * 2**23 <= bits(top) (the exponent field; a
//   subnormal g lies below top * 2**-kmax, a normal float32, and gets kmax either way):
//   k = clip((bits(top) - bits(g)) >> 23, 0, kmax), four integer ops.
// - The element needs no double division either, mostly. Its value is V = 2**k * RN(x / s)
//   (s the tensor scale), then rounded to an integer (nearest, or floor(V + u) with the
//   element's random fraction u). The lanes compute v = x * RN32(2**k / s) in float32,
//   within |V| * 2**-22 of V; when v (or v + u) lies farther than a margin from every
//   rounding boundary, the integer is V's (lanes beyond qmax + 1 clip either way). The
//   few lanes nearer (about 2**-12 of them) are redone in double, as the general loop does;
//   so nearest rounding may take rint's ties: every tie is redone.
// - Exact zeros round to 0 in every mode (floor(0 + u) = 0 for u < 1), so stochastic
//   rounding draws Threefry words for the non-zero elements only (fill_random_u32_at):
//   after ReLU and max-pool most of an error tensor is zero (86 % of LeNet-5's conv1
//   error), and the words were half of the quantizer's time. Each word is still the one
//   of its element's index, so the result does not depend on the chunks or the threads.
#include "quant_mls.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_features.h"
#include "quant_chunks.h"
#include "threefry.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

namespace dsptrain {

#ifdef DSPTRAIN_X86
namespace {

constexpr size_t kBlock = 1024;     // elements whose non-zero indices and words stay in L1
constexpr __mmask16 kAll = 0xFFFF;  // masked forms with every lane on: GCC 12 warns inside the unmasked ones

struct MlsParams {
  int top_bits;          // the bits of top, a normal float32
  float scaled[16];      // by shift s = kmax - k: RN32(2**k / tensor_scale)
  double scale_of_k[8];  // tensor_scale * 2**-k: the general loop's divisors
  float near;            // the margin around a rounding boundary within which a lane is redone
  int kmax, qmax;
};

// One element as quant.cpp's general loop (and float_ops) computes it: the double quotient
// by tensor_scale * 2**-k, rounded, clipped, shifted by kmax - k.
inline int16_t exact_element(float x, int k, const MlsParams& p, FloatRound mode, uint32_t word) {
  const double v = static_cast<double>(x) / p.scale_of_k[k];
  double r;
  if (mode == FloatRound::kRound) r = std::copysign(std::floor(std::fabs(v) + 0.5), v);
  else if (mode == FloatRound::kNearestEven) r = std::nearbyint(v);
  else r = std::floor(v + static_cast<double>(static_cast<int32_t>(word >> 8)) * (1.0 / 16777216.0));
  const double q = std::min(std::max(r, -double(p.qmax)), double(p.qmax));
  return static_cast<int16_t>(static_cast<int>(q) * (1 << (p.kmax - k)));
}

// every lane's group max |x|, groups of G lanes (G divides 16: groups never cross a vector)
template <int G>
__attribute__((target("avx512f"))) inline __m512 group_max(__m512 a) {
  if constexpr (G >= 2) a = _mm512_maskz_max_ps(kAll, a, _mm512_maskz_permute_ps(kAll, a, 0xB1));        // neighbours
  if constexpr (G >= 4) a = _mm512_maskz_max_ps(kAll, a, _mm512_maskz_permute_ps(kAll, a, 0x4E));        // pairs
  if constexpr (G >= 8) a = _mm512_maskz_max_ps(kAll, a, _mm512_maskz_shuffle_f32x4(kAll, a, a, 0xB1));  // 128-bit quarters
  if constexpr (G >= 16) a = _mm512_maskz_max_ps(kAll, a, _mm512_maskz_shuffle_f32x4(kAll, a, a, 0x4E)); // halves
  return a;
}

// x * RN32(2**k / s) for each lane's group shift k (the table is by kmax - k), and that
// shift kmax - k into `shift`
template <int G>
__attribute__((target("avx512f"))) inline __m512 scaled(__m512 xv, __m512i top, __m512i kmax, __m512 table,
                                                         __m512i& shift) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i g = _mm512_castps_si512(group_max<G>(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(xv), magnitude))));
  const __m512i k = _mm512_maskz_min_epi32(kAll, _mm512_maskz_max_epi32(kAll, _mm512_maskz_srai_epi32(kAll, _mm512_sub_epi32(top, g), 23),
                                                      _mm512_setzero_si512()), kmax);
  shift = _mm512_sub_epi32(kmax, k);
  return _mm512_mul_ps(xv, _mm512_maskz_permutexvar_ps(kAll, shift, table));
}

// Elements [begin, end) of one block; idx and words hold kBlock + 16 entries.
template <FloatRound M, int G>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void mls_block(const float* x, size_t begin, size_t end,
                                                                    const MlsParams& p, const RngKey& key,
                                                                    uint32_t* idx, uint32_t* words, int16_t* out) {
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 zero = _mm512_setzero_ps();
  auto tail = [&](size_t i) -> __mmask16 {
    return end - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (end - i)) - 1);
  };
  if constexpr (M == FloatRound::kSto) {   // the indices of the non-zero elements, then their words
    size_t count = 0;
    for (size_t i = begin; i < end; i += 16) {
      const __mmask16 live = tail(i);
      const __mmask16 nz = _mm512_mask_cmp_ps_mask(live, _mm512_maskz_loadu_ps(live, x + i), zero, _CMP_NEQ_UQ);
      const __m512i ids = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i)), lanes);
      _mm512_storeu_si512(idx + count, _mm512_maskz_compress_epi32(nz, ids));   // register form: fast on Zen 4
      count += static_cast<size_t>(__builtin_popcount(nz));
    }
    fill_random_u32_at(key, idx, count, words);
  }
  const __m512 table = _mm512_loadu_ps(p.scaled);
  const __m512 qmax = _mm512_set1_ps(static_cast<float>(p.qmax)), nqmax = _mm512_set1_ps(-static_cast<float>(p.qmax));
  const __m512 safe = _mm512_set1_ps(0.5f - p.near);   // |v - rounded| below it: no boundary within reach
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i top = _mm512_set1_epi32(p.top_bits), kmax = _mm512_set1_epi32(p.kmax);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), izero = _mm512_setzero_si512();
  const uint32_t* w = words;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 live = tail(i);
    const __m512 xv = _mm512_maskz_loadu_ps(live, x + i);
    __mmask16 redo;
    __m512 r;
    __m512i shift, wv = izero;
    if constexpr (M == FloatRound::kSto) {   // floor(v + u), u = (word >> 8) * 2**-24; zeros draw no word
      const __mmask16 nz = _mm512_mask_cmp_ps_mask(live, xv, zero, _CMP_NEQ_UQ);
      if (!nz) {
        _mm256_mask_storeu_epi16(out + i, live, _mm256_setzero_si256());
        continue;
      }
      const __m512 v = scaled<G>(xv, top, kmax, table, shift);
      __m512i next = _mm512_loadu_si512(w);
      asm("" : "+v"(next));   // keep the register form of vpexpandd (its load form is slow on Zen 4)
      wv = _mm512_maskz_expand_epi32(nz, next);
      w += __builtin_popcount(nz);
      const __m512 t = _mm512_add_ps(v, _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_srli_epi32(kAll, wv, 8)),
                                                      _mm512_set1_ps(0x1p-24f)));
      const __m512 low = _mm512_maskz_roundscale_ps(kAll, t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __m512 off = _mm512_sub_ps(_mm512_sub_ps(t, low), half);   // t - floor(t) - 0.5
      redo = _mm512_mask_cmp_ps_mask(nz, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(off), magnitude)),
                                     safe, _CMP_NLT_UQ);
      r = low;
    } else {   // nearest: rint, whose ties to even differ from halves away from zero only at ties, all redone
      const __m512 v = scaled<G>(xv, top, kmax, table, shift);
      r = _mm512_maskz_roundscale_ps(kAll, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 off = _mm512_sub_ps(v, r);   // exact, in [-0.5, 0.5]
      redo = _mm512_mask_cmp_ps_mask(live, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(off), magnitude)),
                                     safe, _CMP_NLT_UQ);
    }
    r = _mm512_maskz_min_ps(kAll, _mm512_maskz_max_ps(kAll, r, nqmax), qmax);
    const __m512i q = _mm512_maskz_sllv_epi32(kAll, _mm512_maskz_cvttps_epi32(kAll, r), shift);
    _mm256_mask_storeu_epi16(out + i, live, _mm512_maskz_cvtepi32_epi16(kAll, q));
    if (redo) {   // lanes near a rounding boundary (or NaN): the double path decides
      alignas(64) int32_t shifts[16];
      alignas(64) uint32_t ws[16];
      _mm512_store_si512(shifts, shift);
      _mm512_store_si512(ws, wv);
      for (unsigned m = redo; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        out[i + l] = exact_element(x[i + l], p.kmax - shifts[l], p, M, ws[l]);
      }
    }
  }
}

template <FloatRound M, int G>
void mls_all(const float* x, size_t n, const MlsParams& p, const RngKey& key, int16_t* out) {
  for_chunks(n, sizeof(float), [&](size_t, size_t b, size_t e) {
    alignas(64) uint32_t idx[kBlock + 16], words[kBlock + 16];
    for (size_t s = b; s < e; s += kBlock) mls_block<M, G>(x, s, std::min(e, s + kBlock), p, key, idx, words, out);
  });
}

template <FloatRound M>
void mls_by_group(int group, const float* x, size_t n, const MlsParams& p, const RngKey& key, int16_t* out) {
  switch (group) {
    case 1: return mls_all<M, 1>(x, n, p, key, out);
    case 2: return mls_all<M, 2>(x, n, p, key, out);
    case 4: return mls_all<M, 4>(x, n, p, key, out);
    case 8: return mls_all<M, 8>(x, n, p, key, out);
    default: return mls_all<M, 16>(x, n, p, key, out);
  }
}

bool normal_float(double v) { return v >= 0x1p-126 && v <= 0x1p127; }

}  // namespace
#endif

bool quantize_mls_lanes(const float* x, size_t n, int group, double top, double tensor_scale, int kmax, int qmax,
                        FloatRound mode, const RngKey& key, int16_t* aligned) {
#ifdef DSPTRAIN_X86
  const bool avx512 = cpu_features().avx512bw && cpu_features().avx512vl;
  const bool grouped = group == 1 || group == 2 || group == 4 || group == 8 || group == 16;
  if (!avx512 || !grouped || kmax < 0 || kmax > 7 || qmax < 1 || qmax > 32767 || !normal_float(top) ||
      !normal_float(std::ldexp(top, -kmax)) || static_cast<double>(static_cast<float>(top)) != top ||
      !(tensor_scale > 0) || !normal_float(1.0 / tensor_scale) || !normal_float(std::ldexp(1.0 / tensor_scale, kmax)) ||
      n >= (size_t{1} << 32))
    return false;
  MlsParams p{};
  const float top32 = static_cast<float>(top);
  std::memcpy(&p.top_bits, &top32, sizeof top32);
  p.kmax = kmax;
  p.qmax = qmax;
  // |v - V| <= |V| * 2**-22 (two float32 roundings) plus at most 2**-23 from the ops after;
  // a lane beyond qmax + 1 clips to qmax whatever its rounding
  p.near = static_cast<float>((qmax + 2) * 0x1p-20);
  for (int k = 0; k <= kmax; ++k) {
    p.scaled[kmax - k] = static_cast<float>(std::ldexp(1.0 / tensor_scale, k));
    p.scale_of_k[k] = tensor_scale * std::ldexp(1.0, -k);
  }
  if (mode == FloatRound::kRound) mls_by_group<FloatRound::kRound>(group, x, n, p, key, aligned);
  else if (mode == FloatRound::kNearestEven) mls_by_group<FloatRound::kNearestEven>(group, x, n, p, key, aligned);
  else mls_by_group<FloatRound::kSto>(group, x, n, p, key, aligned);
  return true;
#else
  (void)x, (void)n, (void)group, (void)top, (void)tensor_scale, (void)kmax, (void)qmax, (void)mode, (void)key,
      (void)aligned;
  return false;
#endif
}

}  // namespace dsptrain
