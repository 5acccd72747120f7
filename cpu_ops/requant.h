// The NITI epilogue on int32/int64 accumulators: range estimate (max |acc|) and the
// shift to int8 with round / psto / sto rounding, multi-threaded and vectorised.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rounding.h"
#include "threefry.h"

namespace dsptrain {

int64_t absmax(const int32_t* x, size_t n);
int64_t absmax(const int64_t* x, size_t n);

// max |c| over rows x cols of a row-major block (row stride ldc), on the calling thread:
// the GEMM takes it per task while the task's block of C is still in cache.
int64_t absmax_block(const int32_t* c, int rows, int cols, ptrdiff_t ldc);

// numerics.shift_round: shift <= 0 is a clipping cast. Element i draws random_u32(key, i).
void shift_round(const int32_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out);
void shift_round(const int64_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out);

// shift_round that also returns max |x| from the same pass.
int64_t shift_round_absmax(const int32_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out);
int64_t shift_round_absmax(const int64_t* x, size_t n, int shift, RoundMode mode, const RngKey& key, int8_t* out);

// The rounding pass of requantize with a given shift, fused into a product's tiles
// (gemm_driver.cpp for_each_c_tile): each task rounds its tile of the int32 accumulators
// into `out` while the tile is still in cache, and takes max |acc| in the same pass,
// instead of a pass over the whole accumulator tensor after the product. `applied` says
// whether the product did it (paths without tiles leave it false: requantize as before).
struct FusedRequant {
  int shift;  // >= 0
  RoundMode mode;
  RngKey key;
  int8_t* out;
  bool applied = false;
  // false: the kernel rounded from its registers and never wrote the int32 accumulators
  // (conv_lanes.cpp), so a shift that turns out too small means running it again
  bool acc_written = true;
};

// shift_round_absmax over x[begin, end) on the calling thread (element i draws
// random_u32(key, i) and goes to out[i]).
int64_t shift_round_absmax_range(const int32_t* x, size_t begin, size_t end, int shift, RoundMode mode,
                                 const RngKey& key, int8_t* out);

// numerics.range_bits / activation_shift.
int range_bits(int64_t max_abs);
inline int activation_shift(int64_t max_abs, int bits) {
  const int s = range_bits(max_abs) - (bits - 1);
  return s > 0 ? s : 0;
}

// Range estimate (when shift < 0; `known_absmax` >= 0 is max |x| already taken by the
// kernel that wrote x, saving a pass) then shift_round; returns the shift used.
// A given shift (>= 0) is checked in the same pass (base.py's contract): when the
// accumulators' own shift is larger the given one would saturate, so the tensor is
// rounded again with the estimated shift, which is returned.
template <typename T>
int requantize(const T* x, size_t n, int shift, int bits, RoundMode mode, const RngKey& key, int8_t* out,
               int64_t known_absmax = -1) {
  if (shift < 0) {
    shift = activation_shift(known_absmax >= 0 ? known_absmax : absmax(x, n), bits);
    shift_round(x, n, shift, mode, key, out);
    return shift;
  }
  const int needed = activation_shift(shift_round_absmax(x, n, shift, mode, key, out), bits);
  if (needed > shift) {
    shift = needed;
    shift_round(x, n, shift, mode, key, out);
  }
  return shift;
}

// requantize's ending once the product applied `f` (absmax: max |x| its tiles took): the
// given shift stands unless the accumulators need a larger one, and then x is rounded
// again with that, as requantize does with a given shift. Returns the shift used.
inline int finish_fused_requant(const int32_t* x, size_t n, const FusedRequant& f, int64_t absmax, int bits = 8) {
  const int needed = activation_shift(absmax, bits);
  if (needed <= f.shift) return f.shift;
  shift_round(x, n, needed, f.mode, f.key, f.out);
  return needed;
}

}  // namespace dsptrain
