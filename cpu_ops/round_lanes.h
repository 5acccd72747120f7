// numerics.shift_round of 16 int32 lanes to int8 in AVX-512 registers: the fused
// requantize of the kernels that round their results before storing them (conv_lanes.cpp,
// gemm_avx512.cpp's micro_rows_round), so no int32 tensor is written and read back.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "rounding.h"

namespace dsptrain {

// Round or psto, shift 0..30, in 32-bit magnitudes as requant.cpp's loops: |x| <= 2^31
// plus at most 2^29 stays below 2^32. Callers' targets include avx512f and avx512bw.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i shift_round_lanes(__m512i v, int shift,
                                                                                          RoundMode mode) {
  const __m512i mag = _mm512_abs_epi32(v);   // INT32_MIN's is 2^31 as unsigned
  __m512i q = mag;
  if (shift > 0 && mode == RoundMode::kRound) {   // nearest, halves away from zero
    q = _mm512_srl_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(1 << (shift - 1))), _mm_cvtsi32_si128(shift));
  } else if (shift > 0) {   // psto: the dropped bits' high half against their low half
    const int low_bits = shift / 2;
    const __m512i dropped = _mm512_and_si512(mag, _mm512_set1_epi32(static_cast<int>((1u << shift) - 1)));
    const __m512i high = _mm512_srl_epi32(dropped, _mm_cvtsi32_si128(low_bits));
    __m512i low = _mm512_and_si512(dropped, _mm512_set1_epi32(static_cast<int>((1u << low_bits) - 1)));
    if (shift % 2) low = _mm512_slli_epi32(low, 1);
    q = _mm512_srl_epi32(mag, _mm_cvtsi32_si128(shift));
    q = _mm512_mask_add_epi32(q, _mm512_cmpgt_epu32_mask(high, low), q, _mm512_set1_epi32(1));
  }
  q = _mm512_min_epu32(q, _mm512_set1_epi32(127));
  return _mm512_mask_sub_epi32(q, _mm512_cmplt_epi32_mask(v, _mm512_setzero_si512()), _mm512_setzero_si512(), q);
}

}  // namespace dsptrain
#endif
