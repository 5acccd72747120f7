// CPU feature detection for run-time kernel dispatch. No Python in here.
#pragma once

namespace dsptrain {

struct CpuFeatures {
  bool avx2 = false;
  bool avx_vnni = false;
  bool avx512_vnni = false;
  bool neon = false;
  bool neon_dotprod = false;
};

CpuFeatures detect_cpu_features();

}  // namespace dsptrain
