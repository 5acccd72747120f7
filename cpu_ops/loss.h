// NITI's integer loss gradient (Wang et al., "NITI: Training integer neural networks using
// integer-only arithmetic", TPDS 2022; the integer form of Mandheling's
// NITI_CPULossGrad_Int8.cpp), bit-exact with ops_ref.niti_loss_grad.
#pragma once
#include <cstdint>

#include "threefry.h"

namespace dsptrain {

// logits[batch, classes] (as int64), labels[batch] in [0, classes) -> grad int8.
void niti_loss_grad(const int64_t* logits, int batch, int classes, int exponent, const int64_t* labels,
                    const RngKey& key, int8_t* grad);

}  // namespace dsptrain
