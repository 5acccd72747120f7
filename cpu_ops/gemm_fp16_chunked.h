// FP8's products: matmul_fp16_chunked, op(a) x b[K,N] (op(a) = a[M,K] or a[K,M]
// transposed) with Wang et al. (NeurIPS 2018)'s chunk-based accumulation on FP16 values:
// each run of `chunk` products summed (every product and partial sum rounded to FP16 when
// `fp16_adds`, else in float32), the chunk sum rounded to FP16, the chunk sums added one
// by one in FP16. Fixed order, so deterministic.
#pragma once
#include "scratch.h"

namespace dsptrain {

// a and b hold FP16 values as float32; c[M,N] gets FP16 values as float32.
void matmul_fp16_chunked(const float* a, bool a_transposed, const float* b, int m, int n, int k, int chunk,
                         bool fp16_adds, float* c);

// The packed b matmul_fp16_chunked keeps on its calling thread (scratch.h).
ScratchList matmul_fp16_chunked_scratch(int n, int k, int chunk);

}  // namespace dsptrain
