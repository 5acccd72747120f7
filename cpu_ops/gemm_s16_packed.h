// The packed int16 operands and row kernels of the exact int16 product (gemm_exact.cpp),
// shared with the exact int16 convolutions (conv_exact.cpp), which pack their patches the
// same way. Included by those two files only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gemm.h"

namespace dsptrain::s16 {

// B is packed in panels of kNv columns: per pair of k, the two rows' kNv elements
// interleaved (b[2p][j], b[2p+1][j]), which is what pmaddwd multiplies against a
// broadcast pair (a[m][2p], a[m][2p+1]); K and N are zero padded.
constexpr int kNv = 8;        // int32 lanes of an AVX2 vector: output columns per vector
constexpr int kPanel = 2 * kNv;  // columns per panel: two vectors
constexpr int kRows = 4;      // rows of A per microkernel call

struct PackedS16 {
  std::vector<int16_t> b;     // [panels][pairs][kPanel][2]
  std::vector<int32_t> a;     // a's k pairs as 32-bit words, when a cannot be read in place
  const int16_t* a_words = nullptr;   // word (i, p) at a_words + 2 * (i * stride_i + p * stride_p)
  ptrdiff_t stride_i = 0, stride_p = 0;
  int pairs = 0, panels = 0;
  size_t held_bytes() const { return b.capacity() * sizeof(int16_t) + a.capacity() * sizeof(int32_t); }
};

// A weight gradient's long reduction runs in chunks of kChunkK rows (gemm_exact.cpp, k_chunked).
constexpr int kChunkK = 1024;   // even: chunks start on a pair

// max |x[i]| over n elements
int max_abs16(const int16_t* x, size_t n);
// A [m, k] (or a[k, m] transposed) and B [k, n] (n columns of k) into p's layout
void pack_a(const int16_t* a, bool a_t, int m, int k, PackedS16* p);
void pack_b(const int16_t* b, int n, int k, PackedS16* p);
void pack(const int16_t* a, bool a_t, const int16_t* b, int m, int n, int k, PackedS16* p);
// the pairs a lane sums in int32 before it is added to int64 (0: every pair in int64)
int block_of_max(int max_a, int max_b, int pairs);
int pairs_per_block(const PackedS16& p, const int16_t* a, const int16_t* b, int m, int n, int k);
// rows per microkernel pass on this ISA
int row_step_of(Isa isa);
// rows [m0, m1) of the product into c (row m0 at c's row m0 - c_row0), on the widest kernel the ISA allows
void product_rows(const PackedS16& p, int m0, int m1, int n, int block, int64_t* c, int c_row0);

}  // namespace dsptrain::s16
