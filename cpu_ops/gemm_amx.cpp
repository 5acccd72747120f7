// AMX-INT8 microkernel (Intel Sapphire Rapids and later): 32 x 32 int32 accumulators in
// four 16 x 16 tile registers, fed per 64 k by two A tiles (16 rows x 64 bytes) and two
// B tiles (16 groups of 4 k x 16 columns x 4 bytes, the layout pack_b already writes).
// TDPBSSD multiplies signed by signed, so unlike VNNI there is no offset correction.
// Tile semantics: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 1,
// ch. 18 ("Programming with Intel AMX"); the 2 x 2 accumulator blocking is the one
// oneDNN's brgemm uses (4 accumulators + 2 A + 2 B = the 8 tile registers).
#include "gemm_kernels.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
#include <immintrin.h>

#include <algorithm>

#define DSPTRAIN_AMX __attribute__((target("amx-tile,amx-int8")))

namespace dsptrain {
namespace {

constexpr int kTile = 16;              // rows (and int32 columns) of an accumulator tile
constexpr int kMR = 2 * kTile, kNR = 2 * kTile;
constexpr int kGroupsPerStep = 16;     // groups of 4 k per tile product (64 bytes of K)

// Packed A: plain row-major rows of kgroups * 4 bytes (K zero padded to a multiple of
// 64), tiles of kMR rows (zero rows past the end): a tile register loads 16 of them.
void pack_a(MatrixS8 a, int rows, int kc, void* dst_v) {
  const int kgroups = round_up((kc + 3) / 4, kGroupsPerStep), row_bytes = kgroups * 4;
  int8_t* dst = static_cast<int8_t*>(dst_v);
  const int padded_rows = round_up(std::max(rows, 1), kMR);
  for (int r = 0; r < padded_rows; ++r, dst += row_bytes) {
    if (r >= rows) {
      std::memset(dst, 0, row_bytes);
      continue;
    }
    const int8_t* src = a.row(r);
    if (a.k_stride == 1) {
      std::memcpy(dst, src, kc);
    } else {
      for (int k = 0; k < kc; ++k) dst[k] = src[static_cast<ptrdiff_t>(k) * a.k_stride];
    }
    std::memset(dst + kc, 0, row_bytes - kc);
  }
}

// The tile configuration (64 bytes, palette 1): every tile 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = kTile;
  }
};

// Tile state is per thread: each GEMM task configures its thread's tiles and releases them.
DSPTRAIN_AMX void task_begin() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

DSPTRAIN_AMX void task_end() { _tile_release(); }

DSPTRAIN_AMX void micro(const void* a_tile, const int8_t* b, int kgroups, int32_t* c, ptrdiff_t ldc, int mr_valid,
                        int nr_valid, bool accumulate, const int32_t* /*col_offset: zero, no offset trick*/) {
  const int8_t* a = static_cast<const int8_t*>(a_tile);
  const ptrdiff_t a_stride = static_cast<ptrdiff_t>(kgroups) * 4, b_stride = kNR * 4, c_stride = ldc * 4;
  const bool full = mr_valid == kMR && nr_valid == kNR;
  if (full && accumulate) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + kTile, c_stride);
    _tile_loadd(2, c + kTile * ldc, c_stride);
    _tile_loadd(3, c + kTile * ldc + kTile, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int g = 0; g < kgroups; g += kGroupsPerStep) {
    const int8_t* bg = b + static_cast<ptrdiff_t>(g) * kNR * 4;
    _tile_loadd(4, a + g * 4, a_stride);
    _tile_loadd(6, bg, b_stride);
    _tile_loadd(7, bg + kTile * 4, b_stride);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_loadd(5, a + kTile * a_stride + g * 4, a_stride);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  if (full) {
    _tile_stored(0, c, c_stride);
    _tile_stored(1, c + kTile, c_stride);
    _tile_stored(2, c + kTile * ldc, c_stride);
    _tile_stored(3, c + kTile * ldc + kTile, c_stride);
    return;
  }
  alignas(64) int32_t tmp[kMR * kNR];
  _tile_stored(0, tmp, kNR * 4);
  _tile_stored(1, tmp + kTile, kNR * 4);
  _tile_stored(2, tmp + kTile * kNR, kNR * 4);
  _tile_stored(3, tmp + kTile * kNR + kTile, kNR * 4);
  store_partial(tmp, kNR, c, ldc, mr_valid, nr_valid, accumulate);
}

}  // namespace

const GemmKernel* kernel_amx() {
  // Cache blocks measured on the VGG-11 shapes (Sapphire Rapids, 2 MB L2): kc = 4608 (3x3
  // x 512) so that every VGG depth is one pass over C and A is read in place; A blocks of
  // 128 rows (576 KB) and a B panel (144 KB) stay in L2.
  static const GemmKernel k{Isa::kAmx, kMR, kNR, 4608, 128, 1, false, pack_a, micro, nullptr,
                            kGroupsPerStep, task_begin, task_end, true};
  return &k;
}

}  // namespace dsptrain

#else
namespace dsptrain {
const GemmKernel* kernel_amx() { return nullptr; }
}  // namespace dsptrain
#endif
