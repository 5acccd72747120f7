// Portable microkernel (4 x 16, plain C++): the path of last resort and the model the
// SIMD kernels follow. Signed x signed, so no offset trick.
#include "gemm_kernels.h"

namespace dsptrain {
namespace {

constexpr int kMR = 4, kNR = 16;

void pack_a_s8(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kMR>(a, rows, kc, static_cast<int8_t*>(dst), [](int8_t v) { return v; });
}

void micro(const void* a_tile, const int8_t* b, int kgroups, int32_t* c, ptrdiff_t ldc,
           int mr_valid, int nr_valid, bool accumulate, const int32_t* /*col_offset*/) {
  int32_t acc[kMR * kNR] = {};
  const int8_t* a = static_cast<const int8_t*>(a_tile);
  for (int g = 0; g < kgroups; ++g, a += kMR * 4, b += kNR * 4)
    for (int r = 0; r < kMR; ++r)
      for (int j = 0; j < kNR; ++j)
        for (int q = 0; q < 4; ++q) acc[r * kNR + j] += a[r * 4 + q] * b[j * 4 + q];
  store_partial(acc, kNR, c, ldc, mr_valid, nr_valid, accumulate);
}

}  // namespace

const GemmKernel* kernel_scalar() {
  static const GemmKernel k{Isa::kScalar, kMR, kNR, 256, 64, 1, false, pack_a_s8, micro};
  return &k;
}

}  // namespace dsptrain
