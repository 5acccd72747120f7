// One accumulator to int8: numerics.shift_round for a single element, the three NITI
// rounding modes. Shifts work on magnitudes (truncation toward zero), then clip to +-127.
#pragma once
#include <cstdint>
#include <type_traits>

#include "threefry.h"

namespace dsptrain {

enum class RoundMode : int { kRound = 0, kPsto = 1, kSto = 2 };

constexpr int kStoMaxBits = 32;  // StoShift compares at most the top 32 dropped bits.

inline int8_t clip_s8(int64_t v) { return static_cast<int8_t>(v > 127 ? 127 : (v < -127 ? -127 : v)); }

// `rand` is only read in kSto mode. `shift` is in [1, 62]. U is the unsigned type the
// magnitude is worked in: uint64_t always works; uint32_t (twice the SIMD lanes) for int32
// accumulators with shift <= 31, where every intermediate fits.
template <typename U = uint64_t>
inline int8_t shift_round_one(std::make_signed_t<U> x, int shift, RoundMode mode, uint32_t rand) {
  const U mag = x < 0 ? U{0} - static_cast<U>(x) : static_cast<U>(x);
  const U kept = mag >> shift;
  const U dropped = mag & ((U{1} << shift) - 1);
  U up;
  if (mode == RoundMode::kRound) {
    up = (dropped >> (shift - 1)) & 1;
  } else if (mode == RoundMode::kPsto) {
    const int low_bits = shift / 2;
    const U high = dropped >> low_bits;
    U low = dropped & ((U{1} << low_bits) - 1);
    if (shift % 2) low <<= 1;  // both halves the same width, as NITI does
    up = high > low;
  } else {
    const U top = shift > kStoMaxBits ? dropped >> (shift - kStoMaxBits) : dropped;
    const U bits = shift < kStoMaxBits ? rand & ((uint32_t{1} << shift) - 1) : rand;
    up = top > bits;
  }
  const int64_t q = static_cast<int64_t>(kept + up);
  return clip_s8(x < 0 ? -q : q);
}

}  // namespace dsptrain
