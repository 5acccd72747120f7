// random_u32 over a run of consecutive indices, sixteen lanes at a time on AVX-512 (the
// scalar loop did not vectorise: GCC kept Threefry's rotates scalar, ~1 ns a word, which
// was 60 % of MLS's stochastic quantizer). Same words as random_u32 (threefry.h).
#include <cstddef>
#include <cstdint>

#include "threefry.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_X86
bool has_avx512f() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

// The rounds of threefry2x32_20 on sixteen counters c0 (the second counter word and
// the key are the same in every lane), vprolvd for the rotates.
__attribute__((target("avx512f"))) void fill_avx512(const RngKey& key, uint64_t begin, size_t n, uint32_t* out) {
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {key.seed, key.tensor_id, 0x1BD11BDAu ^ key.seed ^ key.tensor_id};
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i rot[8], add0[5], add1[5];
  for (int i = 0; i < 8; ++i) rot[i] = _mm512_set1_epi32(kRot[i]);
  for (int g = 0; g < 5; ++g) {
    add0[g] = _mm512_set1_epi32(static_cast<int>(ks[(g + 1) % 3]));
    add1[g] = _mm512_set1_epi32(static_cast<int>(ks[(g + 2) % 3] + static_cast<uint32_t>(g + 1)));
  }
  const __m512i x1_start = _mm512_set1_epi32(static_cast<int>(key.step + key.tensor_id));
  // four blocks of sixteen at once: each round is a chain of dependent one-cycle ops,
  // so one block alone leaves the vector units idle most of the time
  constexpr int kBlocks = 4;
  size_t i = 0;
  for (; i + 16 * kBlocks <= n; i += 16 * kBlocks) {
    const uint32_t c0 = key.offset + static_cast<uint32_t>(begin + i) + key.seed;
    __m512i x0[kBlocks], x1[kBlocks];
    for (int b = 0; b < kBlocks; ++b) {
      x0[b] = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(c0 + 16u * b)), lanes);
      x1[b] = x1_start;
    }
    for (int g = 0; g < 5; ++g) {
      const __m512i* r = rot + (g % 2) * 4;
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < kBlocks; ++b) {
          x0[b] = _mm512_add_epi32(x0[b], x1[b]);
          x1[b] = _mm512_xor_si512(_mm512_rolv_epi32(x1[b], r[k]), x0[b]);
        }
      for (int b = 0; b < kBlocks; ++b) {
        x0[b] = _mm512_add_epi32(x0[b], add0[g]);
        x1[b] = _mm512_add_epi32(x1[b], add1[g]);
      }
    }
    for (int b = 0; b < kBlocks; ++b) _mm512_storeu_si512(out + i + 16 * b, x0[b]);
  }
  for (; i < n; ++i) out[i] = random_u32(key, begin + i);
}
#endif

}  // namespace

void fill_random_u32(const RngKey& key, uint64_t begin, size_t n, uint32_t* out) {
#ifdef DSPTRAIN_X86
  if (has_avx512f()) return fill_avx512(key, begin, n, out);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = random_u32(key, begin + i);
}

}  // namespace dsptrain
