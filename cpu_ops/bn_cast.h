// NITI's batch norm between int8 tensors, fused with its casts (algorithms/int_fused.py):
// int8 -> float32 -> batch norm -> activation (none, clip, ReLU) -> int8 forward, and its
// backward, each one op that reads int8 and writes int8 with the same bits as the chain of
// float ops it replaces (dequantize, bn_fwd_f32, act_f32 / relu_f32, absmax_f, quantize_f;
// backward: dequantize, act_bwd_f32 / relu_bwd_f32, bn_bwd_f32, absmax_f, quantize_f).
//
// Nothing float is kept between the passes: a channel's output is a function of its int8
// input alone, so the forward computes the statistics in two passes over int8 (sums, then
// the squared deviations in row order, as bn_fwd_f32 adds them), takes the range from each
// channel's smallest and largest input (the map is monotone), and writes the int8 output
// through a 256-entry table per channel. The backward recomputes x-hat and the activation's
// gate from the int8 input and the saved statistics (mean and 1/std in double) in each pass.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant.h"
#include "threefry.h"

namespace dsptrain {

enum class BnAct : int { kNone = 0, kClip = 1, kRelu = 2 };

struct BnActFn {
  BnAct fn = BnAct::kNone;
  double lo = 0.0, hi = 0.0;  // clip's bounds
};

// x (rows, channels) int8 at exponent ex. Writes y (rows, channels) int8 at *ey (NITI's
// exponent for the activation's range: ceil(log2 max|a|) - 7), stats[0, C) the mean and
// stats[C, 2C) 1/std the forward normalised with (double), the new running mean and variance.
void bn_act_s8(const int8_t* x, size_t rows, size_t channels, int ex, const float* gamma, const float* beta,
               const float* mean, const float* var, bool training, double momentum, double eps, BnActFn act,
               FloatRound mode, const RngKey& key, int8_t* y, int* ey, double* stats, float* new_mean,
               float* new_var);

// err (rows, channels) int8 at exponent ee, the layer's int8 input x at ex and its stats:
// dx int8 at *edx (dx null: the gradients alone), and the gamma and beta gradients.
void bn_act_bwd_s8(const int8_t* err, int ee, const int8_t* x, int ex, size_t rows, size_t channels,
                   const double* stats, const float* gamma, const float* beta, BnActFn act, FloatRound mode,
                   const RngKey& key, int8_t* dx, int* edx, float* d_gamma, float* d_beta);

}  // namespace dsptrain
