// Float element-wise kernels of the emulated recipes and FP32: ReLU and its backward,
// and Octo's loss-aware compensation layer y = (1 + scale) * z + shift per channel
// (Zhou et al., USENIX ATC 2021). float32 arithmetic, no fused multiply-add, so results
// equal NumPy's bit for bit; the channel sums of the backward run in float64.
#pragma once
#include <cstddef>

namespace dsptrain {

void relu_f32(const float* x, size_t n, float* y);
void relu_bwd_f32(const float* err, const float* y, size_t n, float* dx);

// z, y: [rows, channels]; scale, shift: [channels].
void compensation_fwd(const float* z, const float* scale, const float* shift, size_t rows, int channels, float* y);
// dz = float(double(err) * double(1 + scale)); d_scale = sum err * z; d_shift = sum err.
// gate (the output of a ReLU after the layer, or null): err where gate > 0, else +0.0,
// relu_bwd_f32's, in place of err (the ReLU's backward in the same pass).
void compensation_bwd(const float* err, const float* z, const float* scale, size_t rows, int channels, float* dz,
                      float* d_scale, float* d_shift, const float* gate = nullptr);

}  // namespace dsptrain
