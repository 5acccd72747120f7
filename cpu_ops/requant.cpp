// Element loops of the epilogue. Each (dtype, mode) loop is its own function compiled
// for AVX-512, AVX2 and baseline x86 (target_clones picks at load time), so the
// Threefry rounds and the 64-bit magnitude arithmetic run 8-16 lanes wide.
#include "requant.h"

#include <algorithm>
#include <vector>

#include "cpu_features.h"
#include "thread_pool.h"

#include "target_clones.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_ROUND_AVX512 1
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_ROUND_AVX512
// Round-to-nearest of int32 accumulators with shift in [1, 31], and max |x|, 16 lanes of
// 32 bits (|INT32_MIN| = 2^31 fits unsigned; kept + up <= 2^30 + 1): shift_round_one's
// arithmetic, which the generic loop widened to 64-bit lanes for the maximum (VGG-11's
// first convolution: 4M accumulators, as long as its GEMM).
__attribute__((target("avx512f,avx512bw"))) int64_t round_max_s32_avx512(const int32_t* x, size_t begin, size_t end,
                                                                          int shift, int8_t* out) {
  const __m128i by = _mm_cvtsi32_si128(shift), by_half = _mm_cvtsi32_si128(shift - 1);
  const __m512i one = _mm512_set1_epi32(1), cap = _mm512_set1_epi32(127), zero = _mm512_setzero_si512();
  __m512i most = zero;
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 k = end - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (end - i)) - 1);
    const __m512i v = _mm512_maskz_loadu_epi32(k, x + i);
    const __m512i mag = _mm512_abs_epi32(v);
    most = _mm512_max_epu32(most, mag);
    const __m512i up = _mm512_and_si512(_mm512_srl_epi32(mag, by_half), one);
    const __m512i q = _mm512_min_epu32(_mm512_add_epi32(_mm512_srl_epi32(mag, by), up), cap);
    const __m512i r = _mm512_mask_sub_epi32(q, _mm512_cmplt_epi32_mask(v, zero), zero, q);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, k, r);
  }
  return static_cast<int64_t>(_mm512_reduce_max_epu32(most));
}

// The same, 8 lanes of AVX2 and the last few elements one by one: on CPUs without AVX-512
// this pass took as long as a depthwise convolution's sums (the generic loop's 64-bit lanes).
__attribute__((target("avx2"))) int64_t round_max_s32_avx2(const int32_t* x, size_t begin, size_t end, int shift,
                                                          int8_t* out) {
  const __m128i by = _mm_cvtsi32_si128(shift), by_half = _mm_cvtsi32_si128(shift - 1);
  const __m256i one = _mm256_set1_epi32(1), cap = _mm256_set1_epi32(127);
  __m256i most = _mm256_setzero_si256();
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i mag = _mm256_abs_epi32(v);
    most = _mm256_max_epu32(most, mag);
    const __m256i up = _mm256_and_si256(_mm256_srl_epi32(mag, by_half), one);
    const __m256i q = _mm256_sign_epi32(_mm256_min_epu32(_mm256_add_epi32(_mm256_srl_epi32(mag, by), up), cap), v);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi16(words, words));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), most);
  uint32_t m = *std::max_element(lanes, lanes + 8);
  for (; i < end; ++i) {
    const uint32_t mag = x[i] < 0 ? 0u - static_cast<uint32_t>(x[i]) : static_cast<uint32_t>(x[i]);
    m = std::max(m, mag);
    const uint32_t q = std::min<uint32_t>((mag >> shift) + ((mag >> (shift - 1)) & 1u), 127u);
    out[i] = static_cast<int8_t>(x[i] < 0 ? -static_cast<int32_t>(q) : static_cast<int32_t>(q));
  }
  return static_cast<int64_t>(m);
}

using RoundMax = int64_t (*)(const int32_t*, size_t, size_t, int, int8_t*);

// The vector loop that takes (mode, shift) on this CPU, or nullptr (the generic loops).
RoundMax fast_round(RoundMode mode, int shift) {
  if (mode != RoundMode::kRound || shift < 1 || shift > 31) return nullptr;
  if (cpu_features().avx512bw) return round_max_s32_avx512;
  if (cpu_features().avx2) return round_max_s32_avx2;
  return nullptr;
}
#endif

constexpr size_t kChunk = 1 << 15;  // elements per thread-pool task

template <typename F>
void for_chunks(size_t n, F body) {
  const int tasks = static_cast<int>((n + kChunk - 1) / kChunk);
  parallel_for(tasks, [&](int t) {
    const size_t begin = static_cast<size_t>(t) * kChunk;
    body(begin, std::min(n, begin + kChunk));
  });
}

template <typename T>
inline __attribute__((always_inline)) int64_t absmax_loop(const T* x, size_t begin, size_t end) {
  int64_t m = 0;
  for (size_t i = begin; i < end; ++i) {
    const int64_t v = x[i];
    m = std::max(m, v < 0 ? -v : v);
  }
  return m;
}

DSPTRAIN_CLONES int64_t absmax_s32(const int32_t* x, size_t b, size_t e) { return absmax_loop(x, b, e); }
DSPTRAIN_CLONES int64_t absmax_s64(const int64_t* x, size_t b, size_t e) { return absmax_loop(x, b, e); }

template <typename T, RoundMode kMode>
inline __attribute__((always_inline)) void round_loop(const T* x, size_t begin, size_t end, int shift,
                                                     const RngKey& key, int8_t* out) {
  if (shift <= 0) {
    for (size_t i = begin; i < end; ++i) out[i] = clip_s8(x[i]);
    return;
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (shift <= 31) {  // 32-bit magnitudes: 16 lanes per AVX-512 vector instead of 8
      for (size_t i = begin; i < end; ++i) {
        const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
        out[i] = shift_round_one<uint32_t>(x[i], shift, kMode, rand);
      }
      return;
    }
  }
  for (size_t i = begin; i < end; ++i) {
    const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
    out[i] = shift_round_one(x[i], shift, kMode, rand);
  }
}

// The same loop that also returns max |x| over [begin, end): a given shift checked for
// saturation in the pass that applies it (requantize with shift >= 0).
template <typename T, RoundMode kMode>
inline __attribute__((always_inline)) int64_t round_max_loop(const T* x, size_t begin, size_t end, int shift,
                                                            const RngKey& key, int8_t* out) {
  // One loop per case, the branches outside it: with the shift test inside, GCC left the
  // loop scalar (the sto one ran 15x slower than shift_round's).
  int64_t m = 0;
  if (shift <= 0) {
    for (size_t i = begin; i < end; ++i) {
      const int64_t v = x[i];
      m = std::max(m, v < 0 ? -v : v);
      out[i] = clip_s8(v);
    }
    return m;
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (shift <= 31) {  // as round_loop: 32-bit magnitudes
      for (size_t i = begin; i < end; ++i) {
        const int64_t v = x[i];
        m = std::max(m, v < 0 ? -v : v);
        const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
        out[i] = shift_round_one<uint32_t>(x[i], shift, kMode, rand);
      }
      return m;
    }
  }
  for (size_t i = begin; i < end; ++i) {
    const int64_t v = x[i];
    m = std::max(m, v < 0 ? -v : v);
    const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
    out[i] = shift_round_one(v, shift, kMode, rand);
  }
  return m;
}

#define DSPTRAIN_ROUND_LOOP(T, MODE, NAME)                                                         \
  DSPTRAIN_CLONES void NAME(const T* x, size_t b, size_t e, int s, const RngKey& k, int8_t* out) { \
    round_loop<T, MODE>(x, b, e, s, k, out);                                                       \
  }
DSPTRAIN_ROUND_LOOP(int32_t, RoundMode::kRound, round_s32)
DSPTRAIN_ROUND_LOOP(int32_t, RoundMode::kPsto, psto_s32)
DSPTRAIN_ROUND_LOOP(int32_t, RoundMode::kSto, sto_s32)
DSPTRAIN_ROUND_LOOP(int64_t, RoundMode::kRound, round_s64)
DSPTRAIN_ROUND_LOOP(int64_t, RoundMode::kPsto, psto_s64)
DSPTRAIN_ROUND_LOOP(int64_t, RoundMode::kSto, sto_s64)
#undef DSPTRAIN_ROUND_LOOP

#define DSPTRAIN_ROUND_MAX_LOOP(T, MODE, NAME)                                                         \
  DSPTRAIN_CLONES int64_t NAME(const T* x, size_t b, size_t e, int s, const RngKey& k, int8_t* out) { \
    return round_max_loop<T, MODE>(x, b, e, s, k, out);                                                \
  }
DSPTRAIN_ROUND_MAX_LOOP(int32_t, RoundMode::kRound, round_max_s32)
DSPTRAIN_ROUND_MAX_LOOP(int32_t, RoundMode::kPsto, psto_max_s32)
DSPTRAIN_ROUND_MAX_LOOP(int32_t, RoundMode::kSto, sto_max_s32)
DSPTRAIN_ROUND_MAX_LOOP(int64_t, RoundMode::kRound, round_max_s64)
DSPTRAIN_ROUND_MAX_LOOP(int64_t, RoundMode::kPsto, psto_max_s64)
DSPTRAIN_ROUND_MAX_LOOP(int64_t, RoundMode::kSto, sto_max_s64)
#undef DSPTRAIN_ROUND_MAX_LOOP

template <typename T, typename Loop>
int64_t shift_round_max_parallel(const T* x, size_t n, int shift, const RngKey& key, int8_t* out, Loop loop) {
  const int tasks = static_cast<int>((n + kChunk - 1) / kChunk);
  std::vector<int64_t> partial(std::max(tasks, 1), 0);
  for_chunks(n, [&](size_t b, size_t e) { partial[b / kChunk] = loop(x, b, e, shift, key, out); });
  return *std::max_element(partial.begin(), partial.end());
}

template <typename T, typename Loop>
void shift_round_parallel(const T* x, size_t n, int shift, const RngKey& key, int8_t* out, Loop loop) {
  for_chunks(n, [&](size_t b, size_t e) { loop(x, b, e, shift, key, out); });
}

template <typename T, typename AbsmaxFn>
int64_t absmax_parallel(const T* x, size_t n, AbsmaxFn fn) {
  const int tasks = static_cast<int>((n + kChunk - 1) / kChunk);
  std::vector<int64_t> partial(std::max(tasks, 1), 0);
  for_chunks(n, [&](size_t b, size_t e) { partial[b / kChunk] = fn(x, b, e); });
  return *std::max_element(partial.begin(), partial.end());
}

DSPTRAIN_CLONES uint32_t absmax_block_s32(const int32_t* __restrict c, int rows, int cols, ptrdiff_t ldc) {
  uint32_t m = 0;  // |INT32_MIN| = 2^31 fits
  for (int r = 0; r < rows; ++r, c += ldc)
    for (int j = 0; j < cols; ++j) m = std::max(m, c[j] < 0 ? 0u - static_cast<uint32_t>(c[j]) : static_cast<uint32_t>(c[j]));
  return m;
}

}  // namespace

int64_t absmax_block(const int32_t* c, int rows, int cols, ptrdiff_t ldc) { return absmax_block_s32(c, rows, cols, ldc); }

int64_t absmax(const int32_t* x, size_t n) { return absmax_parallel(x, n, absmax_s32); }
int64_t absmax(const int64_t* x, size_t n) { return absmax_parallel(x, n, absmax_s64); }

void shift_round(const int32_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out) {
#ifdef DSPTRAIN_ROUND_AVX512
  if (const RoundMax fast = fast_round(mode, shift)) {
    for_chunks(n, [&](size_t b, size_t e) { fast(x, b, e, shift, out); });
    return;
  }
#endif
  shift_round_parallel(x, n, shift, key, out,
                       mode == RoundMode::kRound ? round_s32 : mode == RoundMode::kPsto ? psto_s32 : sto_s32);
}

void shift_round(const int64_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out) {
  shift_round_parallel(x, n, shift, key, out,
                       mode == RoundMode::kRound ? round_s64 : mode == RoundMode::kPsto ? psto_s64 : sto_s64);
}

int64_t shift_round_absmax(const int32_t* x, size_t n, int shift, RoundMode mode, const RngKey& key,
                           int8_t* out) {
#ifdef DSPTRAIN_ROUND_AVX512
  if (const RoundMax fast = fast_round(mode, shift))
    return shift_round_max_parallel(x, n, shift, key, out, [fast](const int32_t* p, size_t b, size_t e, int s,
                                                                  const RngKey&, int8_t* o) {
      return fast(p, b, e, s, o);
    });
#endif
  return shift_round_max_parallel(
      x, n, shift, key, out,
      mode == RoundMode::kRound ? round_max_s32 : mode == RoundMode::kPsto ? psto_max_s32 : sto_max_s32);
}

int64_t shift_round_absmax(const int64_t* x, size_t n, int shift, RoundMode mode, const RngKey& key,
                           int8_t* out) {
  return shift_round_max_parallel(
      x, n, shift, key, out,
      mode == RoundMode::kRound ? round_max_s64 : mode == RoundMode::kPsto ? psto_max_s64 : sto_max_s64);
}

int64_t shift_round_absmax_range(const int32_t* x, size_t begin, size_t end, int shift, RoundMode mode,
                                 const RngKey& key, int8_t* out) {
#ifdef DSPTRAIN_ROUND_AVX512
  if (const RoundMax fast = fast_round(mode, shift)) return fast(x, begin, end, shift, out);
#endif
  const auto loop = mode == RoundMode::kRound ? round_max_s32 : mode == RoundMode::kPsto ? psto_max_s32 : sto_max_s32;
  return loop(x, begin, end, shift, key, out);
}

int range_bits(int64_t max_abs) {
  const uint64_t v = max_abs > 0 ? static_cast<uint64_t>(max_abs - 1) : 0;
  return v == 0 ? 0 : 64 - __builtin_clzll(v);  // Python's (max_abs - 1).bit_length()
}

}  // namespace dsptrain
