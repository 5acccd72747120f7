// WAGEUBN's integer batch norm (Yang et al. 2020; algorithms/wageubn.py BN_GRIDS): the float
// batch norm of layers_f32.h with its statistics (mean, variance, 1/std, x-hat) on a
// `stat_bits` power-of-two grid, gamma and beta on an `affine_bits` one and the incoming
// error on an `error_bits` one, each grid fitted to the whole vector's or tensor's range,
// halves away from zero (float_ops.pow2_grid). The judge is float_ops.bn_forward_values /
// bn_backward_values with those grids: the same double arithmetic in the same order, sums
// over rows in row order.
#pragma once
#include <cstddef>

namespace dsptrain {

void bn_fwd_grid_f32(const float* x, size_t rows, size_t channels, const float* gamma, const float* beta,
                     const float* mean, const float* var, bool training, double momentum, double eps, int stat_bits,
                     int affine_bits, float* y, float* xhat, float* inv_std, float* new_mean, float* new_var);
void bn_bwd_grid_f32(const float* err, const float* xhat, const float* inv_std, const float* gamma, size_t rows,
                     size_t channels, int error_bits, int affine_bits, float* dx, float* d_gamma, float* d_beta);

}  // namespace dsptrain
