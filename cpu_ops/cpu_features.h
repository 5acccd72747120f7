// CPU feature detection for run-time kernel dispatch. No Python in here.
#pragma once

namespace dsptrain {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;   // AVX-512 Foundation, and the byte/word and 128/256-bit-form extensions
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vbmi = false;   // vpermb, the lane kernels' byte permutes
  bool avx_vnni = false;
  bool avx512_vnni = false;
  bool amx_int8 = false;  // AMX-TILE and AMX-INT8 (the OS must also permit the tile state)
  bool neon = false;          // Advanced SIMD (HWCAP_ASIMD; every aarch64 Linux CPU has it)
  bool neon_dotprod = false; // SDOT/UDOT (HWCAP_ASIMDDP): the NEON GEMM path needs it
  bool neon_fp16 = false;    // half-precision arithmetic (HWCAP_ASIMDHP)
  bool i8mm = false;         // SMMLA/USDOT int8 matrix multiply (HWCAP2_I8MM)
  bool bf16 = false;         // BFloat16 dot and matrix multiply (HWCAP2_BF16)
  bool sve = false;          // scalable vectors (HWCAP_SVE)
  bool sve2 = false;         // (HWCAP2_SVE2)
};

// Every field above by the name `dsptrain info` prints, in the order it prints them.
struct CpuFeatureField {
  const char* name;
  bool CpuFeatures::*field;
};
inline constexpr CpuFeatureField kCpuFeatureFields[] = {
    {"avx2", &CpuFeatures::avx2},           {"avx_vnni", &CpuFeatures::avx_vnni},
    {"avx512_vnni", &CpuFeatures::avx512_vnni}, {"amx_int8", &CpuFeatures::amx_int8},
    {"neon", &CpuFeatures::neon},           {"neon_dotprod", &CpuFeatures::neon_dotprod},
    {"neon_fp16", &CpuFeatures::neon_fp16}, {"i8mm", &CpuFeatures::i8mm},
    {"bf16", &CpuFeatures::bf16},           {"sve", &CpuFeatures::sve},
    {"sve2", &CpuFeatures::sve2},
};

CpuFeatures detect_cpu_features();

// detect_cpu_features() asked once: what the kernels' run-time checks read.
const CpuFeatures& cpu_features();

// Linux keeps AMX's 8 KB tile state off until a process asks for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)): asks once, remembers the answer.
bool amx_permitted();

}  // namespace dsptrain
