// The int8 GEMM: c[M,N] (int32) = a[M,K] @ b[N,K]^T, with b (the weights) packed once
// into panels for the chosen instruction set. Kernels are picked at run time from the
// CPU's features (cpu_features.h); DSPTRAIN_CPU_ISA forces one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dsptrain {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3, kNeonDot = 4 };

const char* isa_name(Isa isa);
bool isa_from_name(const std::string& name, Isa* out);
bool isa_supported(Isa isa);  // compiled in and offered by this CPU
Isa best_isa();
Isa active_isa();             // what new packings use
void set_active_isa(Isa isa);

// A strided int8 matrix view: element (r, k) is at data[r * row_stride + k * k_stride].
struct MatrixS8 {
  const int8_t* data;
  ptrdiff_t row_stride, k_stride;
};

// b[N,K] repacked into panels of `nr` columns: panel p holds, for each group of 4 k,
// nr columns x 4 bytes (zero padded), the layout every int8 dot-product instruction
// (vpdpbusd, sdot) reads in one load. `col_offset` is -128 * colsum(b): the correction
// of the VNNI offset trick (zero for ISAs that multiply signed by signed).
struct PackedB {
  Isa isa = Isa::kScalar;
  int n = 0, k = 0, nr = 1, k_pad = 0;
  std::vector<int8_t> data;
  std::vector<int32_t> col_offset;
};

void pack_b(MatrixS8 b, int n, int k, Isa isa, PackedB* out);

// c (row stride ldc) = a[M,K] @ packed^T. K is packed.k; K * 128 * 128 must fit int32.
void gemm_packed(MatrixS8 a, int m, const PackedB& b, int32_t* c, ptrdiff_t ldc);

// Convenience: packs b into a per-thread scratch and multiplies; int64 output sums
// int32 products over chunks of K short enough not to overflow.
void gemm_s8_s32(MatrixS8 a, MatrixS8 b, int m, int n, int k, int32_t* c);
void gemm_s8_s64(MatrixS8 a, MatrixS8 b, int m, int n, int k, int64_t* c);

// Longest K whose int8 x int8 dot products (-128 included) always fit int32.
constexpr int kMaxInt32Depth = 131068;  // 131068 * 128 * 128 < 2^31

}  // namespace dsptrain
