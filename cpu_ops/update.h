// NITI's integer weight update (Wang et al., "NITI: Training integer
// neural networks using integer-only arithmetic", TPDS 2022), bit-exact with
// RefBackend.niti_update_s8.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rounding.h"
#include "threefry.h"

namespace dsptrain {

// w_new = clip(w - shift_round(grad, gradient_shift(max|grad|, mu))). T: int32/int64.
template <typename T>
void niti_update(const int8_t* w, const T* grad, size_t n, int mu, RoundMode mode, const RngKey& key,
                 int8_t* w_new);

}  // namespace dsptrain

namespace dsptrain {

// WAGEUBN's weight update (Yang et al. 2020; runtime/algorithms/wageubn.py), bit-exact with
// float_ops.wageubn_update. The weights are q * 2**e on a 24-bit grid (acc_bits); in double:
//   g  = the grad_bits power-of-two grid of grad + weight_decay * q * 2**e, stochastic
//        rounding (element i draws random_u32(key, i));
//   m' = the momentum_bits grid of momentum * m + g, nearest (halves away from zero);
//   q' = clip(q - rint(lr * m' / 2**e), +-(2**(acc_bits - 1) - 1)).
// A grid fitted to a tensor's range t has step 2**(ceil(log2 t) - (bits - 1)), all zeros
// when t is 0. m' is returned as float32 (exact: 16-bit integers times a power of two).
void wageubn_update(const int32_t* q, int e, const float* grad, const float* m, size_t n, double lr, double momentum,
                    double weight_decay, int grad_bits, int momentum_bits, int acc_bits, const RngKey& key,
                    int32_t* q_new, float* m_new);

// ceil(log2(t)) of a positive finite t, exactly (frexp, not a rounded log2).
int ceil_log2(double t);

}  // namespace dsptrain
