// The FP32 recipe's products: a float32 GEMM C[M,N] (= or +=) A[M,K] x B[K,N], every
// matrix row-major with its own leading dimension, so callers multiply sub-blocks and
// transposed views without copies. Products are summed over k in ascending order with
// fused multiply-adds, one output element per thread: the same result at any thread
// count, within float32 rounding of NumPy/OpenBLAS's (which sums in another order).
#pragma once

namespace dsptrain {

struct GemmF32 {
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float* c;
  int ldc;
  int m, n, k;
  bool accumulate;   // C += A B instead of C = A B
  bool b_nk = false; // B stored [N,K]: element (k, j) at b[j * ldb + k]
};

// Whether the AVX-512 kernels run here (the conv drivers' patch copies follow it).
bool f32_avx512();

// On the calling thread (the conv drivers split work across the pool themselves).
void gemm_f32_serial(const GemmF32& g);

// Splits the rows of C over the pool (one thread below serial_below_macs()).
void gemm_f32(const GemmF32& g);

}  // namespace dsptrain
