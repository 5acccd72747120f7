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
  bool neon = false;
  bool neon_dotprod = false;
};

CpuFeatures detect_cpu_features();

// detect_cpu_features() asked once: what the kernels' run-time checks read.
const CpuFeatures& cpu_features();

// Linux keeps AMX's 8 KB tile state off until a process asks for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)): asks once, remembers the answer.
bool amx_permitted();

}  // namespace dsptrain
