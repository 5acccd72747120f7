// MLS's quantizer (quant.h: quantize_mls) in one pass of sixteen float32 lanes, for the
// group sizes LeNet-5 and VGG give it (1, 2, 4, 8 or 16 channels). quant.cpp's loop is the
// general path and this one's judge's twin; both are bit-exact with float_ops.quantize_mls.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant.h"

namespace dsptrain {

// quantize_mls on n = rows * channels elements, on AVX-512, when group is 1, 2, 4, 8 or 16,
// kmax <= 7 and top is a positive float32 value (absmax_f's result): returns false, having
// written nothing, where that does not hold or the CPU lacks AVX-512.
bool quantize_mls_lanes(const float* x, size_t n, int group, double top, double tensor_scale, int kmax, int qmax,
                        FloatRound mode, const RngKey& key, int16_t* aligned);

}  // namespace dsptrain
