// NEON dot-product microkernel (aarch64 with ARMv8.2 dotprod; compiled only there):
// 4 rows x 16 columns, sdot is signed x signed so no offset trick. One 16-byte load of
// packed A holds 4 k of all 4 rows; vdotq_laneq_s32 picks a row by lane.
#include "gemm_kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#define DSPTRAIN_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

namespace dsptrain {
namespace {

constexpr int kMR = 4, kNV = 4, kNR = 4 * kNV;

void pack_a_s8(MatrixS8 a, int rows, int kc, void* dst) {
  pack_a_tiles<kMR>(a, rows, kc, static_cast<int8_t*>(dst), [](int8_t v) { return v; });
}

DSPTRAIN_DOTPROD void micro(const void* a_tile, const int8_t* b, int kgroups, int32_t* c,
                            ptrdiff_t ldc, int mr_valid, int nr_valid, bool accumulate,
                            const int32_t* /*col_offset*/) {
  int32x4_t acc[kMR][kNV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < kNV; ++v) acc[r][v] = vdupq_n_s32(0);
  const int8_t* a = static_cast<const int8_t*>(a_tile);
  for (int g = 0; g < kgroups; ++g, a += kMR * 4, b += kNR * 4) {
    const int8x16_t av = vld1q_s8(a);
    int8x16_t bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = vld1q_s8(b + v * 16);
    for (int v = 0; v < kNV; ++v) {
      acc[0][v] = vdotq_laneq_s32(acc[0][v], bv[v], av, 0);
      acc[1][v] = vdotq_laneq_s32(acc[1][v], bv[v], av, 1);
      acc[2][v] = vdotq_laneq_s32(acc[2][v], bv[v], av, 2);
      acc[3][v] = vdotq_laneq_s32(acc[3][v], bv[v], av, 3);
    }
  }
  int32_t tmp[kMR * kNR];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < kNV; ++v) vst1q_s32(tmp + r * kNR + v * 4, acc[r][v]);
  store_partial(tmp, kNR, c, ldc, mr_valid, nr_valid, accumulate);
}

}  // namespace

const GemmKernel* kernel_neon_dot() {
  static const GemmKernel k{Isa::kNeonDot, kMR, kNR, 512, 128, 1, false, pack_a_s8, micro};
  return &k;
}

}  // namespace dsptrain

#else
namespace dsptrain {
const GemmKernel* kernel_neon_dot() { return nullptr; }
}  // namespace dsptrain
#endif
