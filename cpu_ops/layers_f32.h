// The mobile CNNs' float layers (runtime/algorithms/_branch_layers.py): element-wise
// nonlinearities and their derivatives, the channel-broadcast product of
// squeeze-excitation, and channel concat / slice / pad / shuffle. ops_ref.py (float_ops.py)
// is the judge: the activations compute each element in double and round once (within a
// float32 ulp of it: libm's tanh/exp, the same formulas), the products are float32 ones
// (bit-exact), the channel sums double (order differs: within 1e-12 relative), the moves exact.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

// nn.FUNCTIONS, in this order; params p0, p1: clip (low, high), hardsigmoid (alpha, beta).
enum class ActFn : int { kClip = 0, kHardSigmoid, kHardSwish, kSigmoid, kSilu, kTanh };

void act_f32(const float* x, size_t n, ActFn fn, double p0, double p1, float* y);
void act_bwd_f32(const float* err, const float* x, size_t n, ActFn fn, double p0, double p1, float* dx);

// x, y: [images, pixels, channels]; g: the same, or [images, channels] when `per_channel`.
void mul_f32(const float* x, const float* g, size_t images, size_t pixels, size_t channels, bool per_channel,
             float* y);
// dx = err * g (float32); dg = err * x in double, summed over the pixels when `per_channel`.
void mul_bwd_f32(const float* err, const float* x, const float* g, size_t images, size_t pixels, size_t channels,
                 bool per_channel, float* dx, float* dg);

// Rows of `rows` pixels; each part p has widths[p] channels of `elem` bytes; out has their sum.
void concat_channels(const uint8_t* const* parts, const size_t* widths, int count, size_t rows, size_t elem,
                     uint8_t* out);
// out[r, 0:width] = x[r, start:start + width] of a row of `channels`.
void slice_channels(const uint8_t* x, size_t rows, size_t channels, size_t start, size_t width, size_t elem,
                    uint8_t* out);
// out[r, :] = 0, then out[r, start:start + width] = err[r, :], rows of `channels`.
void pad_channels(const uint8_t* err, size_t rows, size_t width, size_t start, size_t channels, size_t elem,
                  uint8_t* out);
// out[r, j * groups + g] = x[r, g * (channels / groups) + j] (ShuffleNet).
void channel_shuffle(const uint8_t* x, size_t rows, size_t channels, size_t groups, size_t elem, uint8_t* out);

}  // namespace dsptrain

namespace dsptrain {

// Batch normalisation over x[rows, channels] (float_ops / _float_layers.bn_forward_values):
// per channel in double, rows in order (so the same bits at any thread count); training:
// the batch's mean and variance, the running ones moved by `momentum` (unbiased variance),
// else the running ones. Outputs y, xhat (float32), inv_std, and the new running statistics.
void bn_fwd_f32(const float* x, size_t rows, size_t channels, const float* gamma, const float* beta,
                const float* mean, const float* var, bool training, double momentum, double eps, float* y,
                float* xhat, float* inv_std, float* new_mean, float* new_var);
// dx = gamma * inv / rows * (rows * err - d_beta - xhat * d_gamma); d_gamma = sum err * xhat; d_beta = sum err.
void bn_bwd_f32(const float* err, const float* xhat, const float* inv_std, const float* gamma, size_t rows,
                size_t channels, float* dx, float* d_gamma, float* d_beta);
// out[r, c] = sum over the r-th group of `pixels` rows of x, / pixels, in double (a global average pool).
void channel_mean_f32(const float* x, size_t images, size_t pixels, size_t channels, float* out);
// out[c] = sum over every row of x[rows, channels], in double (a bias gradient).
void channel_sum_f32(const float* x, size_t rows, size_t channels, float* out);

}  // namespace dsptrain

namespace dsptrain {
// y = a + b, float32 (a residual add, an error join).
void add_f32(const float* a, const float* b, size_t n, float* y);
// y = keep ? x / (1 - p) : 0, float32 (dropout's forward and backward: the same mask).
void dropout_apply_f32(const float* x, const bool* keep, size_t n, float keep_share, float* y);
// y[r, c] += b[c], float32, in place (a conv's or linear layer's bias).
void bias_add_f32(float* y, const float* b, size_t rows, size_t channels);
// The float recipes' loss gradient: (softmax(logits[r]) - onehot(labels[r])) / divisor per row,
// in double (exp of l - max, the row's sum in order), rounded to float32 once.
void softmax_xent_grad_f32(const float* logits, const int64_t* labels, size_t rows, size_t classes, double divisor,
                           float* grad);
// dx[img, p, c] = err[img, c] / pixels, float32 (the global average pool's backward).
void channel_mean_bwd_f32(const float* err, size_t images, size_t pixels, size_t channels, float* dx);
}  // namespace dsptrain
