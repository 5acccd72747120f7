// Float element-wise kernels of the emulated recipes and FP32: ReLU and its backward,
// and Octo's loss-aware compensation layer y = (1 + scale) * z + shift per channel
// (Zhou et al., USENIX ATC 2021). float32 arithmetic, no fused multiply-add, so results
// equal NumPy's bit for bit; the channel sums of the backward run in float64.
#pragma once
#include <cstddef>
#include <functional>

namespace dsptrain {

// One element of relu_f32: NumPy's maximum(x, 0) keeps x when x >= 0 (so -0.0 stays
// -0.0) and when x is NaN, else +0.0. The fused kernels that apply a ReLU (the pools, Octo's
// epilogue) use it, so they give relu_f32's bits.
inline float relu_select(float x) { return (x >= 0.0f || x != x) ? x : 0.0f; }
// One element of relu_bwd_f32: err where the ReLU's output y is > 0, else +0.0.
inline float relu_gate(float err, float y) { return y > 0.0f ? err : 0.0f; }

void relu_f32(const float* x, size_t n, float* y);
void relu_bwd_f32(const float* err, const float* y, size_t n, float* dx);

// z, y: [rows, channels]; scale, shift: [channels].
void compensation_fwd(const float* z, const float* scale, const float* shift, size_t rows, int channels, float* y);
// dz = float(double(err) * double(1 + scale)); d_scale = sum err * z; d_shift = sum err.
// gate (the output of a ReLU after the layer, or null): err where gate > 0, else +0.0,
// relu_bwd_f32's, in place of err (the ReLU's backward in the same pass).
void compensation_bwd(const float* err, const float* z, const float* scale, size_t rows, int channels, float* dz,
                      float* d_scale, float* d_shift, const float* gate = nullptr);
// The same with the error of each chunk of rows [r0, r1) made on demand: make_err(r0, r1)
// returns where row r0's error starts (a cache-sized buffer of its own, valid until its
// next call on the thread; err unused), so a full-size error is never written
// (pool_compensation_bwd, pool.cpp); make_err null: err read as it is.
using ErrorRows = std::function<const float*(size_t r0, size_t r1)>;
void compensation_bwd_rows(const ErrorRows* make_err, const float* err, const float* z, const float* scale, size_t rows,
                           int channels, float* dz, float* d_scale, float* d_shift);

}  // namespace dsptrain
