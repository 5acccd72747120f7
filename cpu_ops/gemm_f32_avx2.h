// The float32 GEMM's AVX2 + FMA kernel (gemm_f32_avx2.cpp), for CPUs without AVX-512
// (AMD Zen 2/3, most laptops): gemm_f32.cpp dispatches to it.
#pragma once

#include "gemm_f32.h"

namespace dsptrain {

// Whether this CPU runs the AVX2 + FMA kernel (not under set_isa("scalar")).
bool f32_avx2();

// C rows [i0, i1) of g, B stored [K,N] (g.b_nk false): k summed in ascending order with
// fused multiply-adds, the same floats as the AVX-512 and portable kernels.
void gemm_f32_rows_avx2(const GemmF32& g, int i0, int i1);

}  // namespace dsptrain
