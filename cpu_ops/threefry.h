// Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011), the counter-based generator of numerics.random_u32, written once
// for C++. Only 32-bit add, rotate and xor: the loops that call it vectorise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

struct Threefry2x32 {
  uint32_t x0, x1;
};

// Both output words for key (k0, k1) and counter (c0, c1).
inline Threefry2x32 threefry2x32_20(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  uint32_t x0 = c0 + k0, x1 = c1 + k1;
  for (int group = 0; group < 5; ++group) {
    const int* rot = kRot + (group % 2) * 4;
    for (int i = 0; i < 4; ++i) {
      x0 += x1;
      x1 = rotl32(x1, rot[i]) ^ x0;
    }
    x0 += ks[(group + 1) % 3];
    x1 += ks[(group + 2) % 3] + static_cast<uint32_t>(group + 1);
  }
  return {x0, x1};
}

// The project's RNG key: element `index` of tensor `tensor_id` at `step` draws the first
// word of Threefry with key (seed, tensor_id) and counter (offset + index, step).
struct RngKey {
  uint32_t seed = 0, tensor_id = 0, step = 0, offset = 0;
};

inline uint32_t random_u32(const RngKey& key, uint64_t index) {
  return threefry2x32_20(key.seed, key.tensor_id, key.offset + static_cast<uint32_t>(index),
                         key.step).x0;
}

// out[i] = random_u32(key, begin + i) for i < n, vector-wide where the CPU allows (threefry.cpp)
void fill_random_u32(const RngKey& key, uint64_t begin, size_t n, uint32_t* out);

// out[j] = random_u32(key, index[j]) for j < n: the words of scattered elements only
// (MLS's stochastic rounding draws none for exact zeros, which round to 0 whatever the word)
void fill_random_u32_at(const RngKey& key, const uint32_t* index, size_t n, uint32_t* out);

}  // namespace dsptrain
