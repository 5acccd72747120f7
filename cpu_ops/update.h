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
