// MLS's (and AFP's 16-bit errors') exact int16 products:
// - matmul_s16_s64: int16 op(a) x b, op(a) = a[M,K] or a[K,M] transposed, b[K,N], summed
//   exactly in int64 (a layer's products need no transposed copies: the
//   weight-gradient reduction runs down the rows of both operands). MLS's operands are
//   int8 elements with a power-of-two scale per group of channels (Zhong et al. 2022);
//   stored with the group shift applied (q * 2**(kmax - k), at most 127 * 2**7 for
//   group_bits <= 3), the groups' partial sums combine exactly inside one integer dot
//   product, whatever the thread count. AFP's 16-bit errors take the same kernel.
// (Their convolutions are conv_exact.h; FP8's chunked-FP16 products gemm_fp16_chunked.h.)
#pragma once
#include <cstdint>

#include "scratch.h"

namespace dsptrain {

void matmul_s16_s64(const int16_t* a, bool a_transposed, const int16_t* b, int m, int n, int k, int64_t* c);

// The buffers each product keeps on its calling thread (grow-only, emptied by
// release_scratch()), by name, for these sizes: what the memory plan counts (scratch.h).
ScratchList matmul_s16_scratch(int m, int n, int k, bool a_transposed);

}  // namespace dsptrain
