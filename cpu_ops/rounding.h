// One accumulator to int8: numerics.shift_round for a single element, the three NITI
// rounding modes. Shifts work on magnitudes (truncation toward zero), then clip to +-127.
#pragma once
#include <cstdint>

#include "threefry.h"

namespace dsptrain {

enum class RoundMode : int { kRound = 0, kPsto = 1, kSto = 2 };

constexpr int kStoMaxBits = 32;  // StoShift compares at most the top 32 dropped bits.

inline int8_t clip_s8(int64_t v) { return static_cast<int8_t>(v > 127 ? 127 : (v < -127 ? -127 : v)); }

// `rand` is only read in kSto mode. `shift` is in [1, 62].
inline int8_t shift_round_one(int64_t x, int shift, RoundMode mode, uint32_t rand) {
  const uint64_t mag = static_cast<uint64_t>(x < 0 ? -x : x);
  const uint64_t kept = mag >> shift;
  const uint64_t dropped = mag & ((uint64_t{1} << shift) - 1);
  uint64_t up;
  if (mode == RoundMode::kRound) {
    up = (dropped >> (shift - 1)) & 1;
  } else if (mode == RoundMode::kPsto) {
    const int low_bits = shift / 2;
    const uint64_t high = dropped >> low_bits;
    uint64_t low = dropped & ((uint64_t{1} << low_bits) - 1);
    if (shift % 2) low <<= 1;  // both halves the same width, as NITI does
    up = high > low;
  } else {
    const uint64_t top = shift > kStoMaxBits ? dropped >> (shift - kStoMaxBits) : dropped;
    const uint64_t bits = shift < kStoMaxBits ? rand & ((uint32_t{1} << shift) - 1) : rand;
    up = top > bits;
  }
  const int64_t q = static_cast<int64_t>(kept + up);
  return clip_s8(x < 0 ? -q : q);
}

}  // namespace dsptrain
