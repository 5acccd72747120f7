// What the three lane-kernel files (conv_lanes.cpp: forward; conv_lanes_wgrad.cpp: weight
// gradients; conv_lanes_bwd.cpp: backward data) share: the AVX-512 VNNI + VBMI target they
// are compiled for, the byte permute and mask helpers, whether this CPU runs them, and the
// fused epilogue they apply from registers. Included by those files only.
#pragma once
#include <cstdint>

#include "cpu_features.h"
#include "gemm.h"
#include "requant.h"
#include "round_lanes.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics (abs, permutes) start from an undefined vector it then warns about
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define DSPTRAIN_LANES_X86 1
#define DSPTRAIN_LANES __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi")))
#endif

namespace dsptrain {

inline bool cpu_has_vbmi() {
#ifdef DSPTRAIN_LANES_X86
  return cpu_features().avx512vbmi && cpu_features().avx512_vnni;   // avx512_vnni includes BW
#else
  return false;
#endif
}

// The fused epilogue these kernels apply from their registers (round, psto; shift 0..30),
// marked applied with no int32 accumulators written; nullptr (write int32) otherwise.
inline FusedRequant* in_registers(FusedRequant* fused) {
  if (!fused || fused->mode == RoundMode::kSto || fused->shift < 0 || fused->shift > 30) return nullptr;
  fused->applied = true;
  fused->acc_written = false;
  return fused;
}

#ifdef DSPTRAIN_LANES_X86
// vpermb; the zero-masked form, as the plain one reads an undefined vector (GCC warns)
DSPTRAIN_LANES inline __m512i permute_bytes(__m512i idx, __m512i v) {
  return _mm512_maskz_permutexvar_epi8(~__mmask64{0}, idx, v);
}

inline __mmask64 first_bytes(int n) {
  return n <= 0 ? __mmask64{0} : n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}
#endif

}  // namespace dsptrain
