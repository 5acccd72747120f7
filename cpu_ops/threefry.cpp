// random_u32 over a run of consecutive indices, sixteen lanes at a time on AVX-512 (the
// scalar loop did not vectorise: GCC kept Threefry's rotates scalar, ~1 ns a word, which
// was 60 % of MLS's stochastic quantizer). Same words as random_u32 (threefry.h).
#include <cstddef>
#include <cstdint>

#include "cpu_features.h"
#include "threefry.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_X86
bool has_avx512f() { return cpu_features().avx512f; }

// The rounds of threefry2x32_20 on kBlocks vectors of sixteen first counter words x0
// (already offset by the key's seed); the second counter word and the key are the same in
// every lane. Each round is a chain of dependent one-cycle ops, so several blocks at once
// keep the vector units busy. vprolvd for the rotates; x0 comes back as the words.
template <int kBlocks>
__attribute__((target("avx512f"))) inline void rounds_avx512(const RngKey& key, __m512i* x0) {
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key.seed, key.tensor_id, 0x1BD11BDAu ^ key.seed ^ key.tensor_id};
  __m512i x1[kBlocks];
  for (int b = 0; b < kBlocks; ++b) x1[b] = _mm512_set1_epi32(static_cast<int>(key.step + key.tensor_id));
  for (int g = 0; g < 5; ++g) {
    const int* r = kRot + (g % 2) * 4;
    for (int k = 0; k < 4; ++k)
      for (int b = 0; b < kBlocks; ++b) {
        x0[b] = _mm512_add_epi32(x0[b], x1[b]);
        x1[b] = _mm512_xor_si512(_mm512_maskz_rolv_epi32(0xFFFF, x1[b], _mm512_set1_epi32(r[k])), x0[b]);
      }
    const __m512i add0 = _mm512_set1_epi32(static_cast<int>(ks[(g + 1) % 3]));
    const __m512i add1 = _mm512_set1_epi32(static_cast<int>(ks[(g + 2) % 3] + static_cast<uint32_t>(g + 1)));
    for (int b = 0; b < kBlocks; ++b) {
      x0[b] = _mm512_add_epi32(x0[b], add0);
      x1[b] = _mm512_add_epi32(x1[b], add1);
    }
  }
}

__attribute__((target("avx512f"))) void fill_avx512(const RngKey& key, uint64_t begin, size_t n, uint32_t* out) {
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  constexpr int kBlocks = 4;
  size_t i = 0;
  for (; i + 16 * kBlocks <= n; i += 16 * kBlocks) {
    const uint32_t c0 = key.offset + static_cast<uint32_t>(begin + i) + key.seed;
    __m512i x0[kBlocks];
    for (int b = 0; b < kBlocks; ++b) x0[b] = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(c0 + 16u * b)), lanes);
    rounds_avx512<kBlocks>(key, x0);
    for (int b = 0; b < kBlocks; ++b) _mm512_storeu_si512(out + i + 16 * b, x0[b]);
  }
  for (; i < n; ++i) out[i] = random_u32(key, begin + i);
}

__attribute__((target("avx512f"))) void fill_at_avx512(const RngKey& key, const uint32_t* index, size_t n,
                                                       uint32_t* out) {
  const __m512i base = _mm512_set1_epi32(static_cast<int>(key.offset + key.seed));
  constexpr int kBlocks = 4;
  size_t i = 0;
  for (; i + 16 * kBlocks <= n; i += 16 * kBlocks) {
    __m512i x0[kBlocks];
    for (int b = 0; b < kBlocks; ++b) x0[b] = _mm512_add_epi32(_mm512_loadu_si512(index + i + 16 * b), base);
    rounds_avx512<kBlocks>(key, x0);
    for (int b = 0; b < kBlocks; ++b) _mm512_storeu_si512(out + i + 16 * b, x0[b]);
  }
  for (; i + 16 <= n; i += 16) {
    __m512i x0[1] = {_mm512_add_epi32(_mm512_loadu_si512(index + i), base)};
    rounds_avx512<1>(key, x0);
    _mm512_storeu_si512(out + i, x0[0]);
  }
  for (; i < n; ++i) out[i] = random_u32(key, index[i]);
}
#endif

}  // namespace

void fill_random_u32(const RngKey& key, uint64_t begin, size_t n, uint32_t* out) {
#ifdef DSPTRAIN_X86
  if (has_avx512f()) return fill_avx512(key, begin, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = random_u32(key, begin + i);
}

void fill_random_u32_at(const RngKey& key, const uint32_t* index, size_t n, uint32_t* out) {
#ifdef DSPTRAIN_X86
  if (has_avx512f()) return fill_at_avx512(key, index, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = random_u32(key, index[i]);
}

}  // namespace dsptrain
