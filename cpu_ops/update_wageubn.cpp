// WAGEUBN's update in three element-wise passes over the weights (the gradient's grid, the
// momentum's grid, the weights' step), each grid's range taken between them. Its NumPy
// version (float_ops.wageubn_update) cost about 1 ms a LeNet-5 step in temporaries; the
// same double operations in the same order here, no fused multiply-add (setup.py).
#include <algorithm>
#include <cmath>
#include <vector>

#include "quant.h"
#include "target_clones.h"
#include "thread_pool.h"
#include "update.h"

namespace dsptrain {
namespace {

constexpr size_t kBlock = 4096;   // elements per task of the element-wise passes

template <typename F>
void blocks(size_t n, size_t bytes_per_element, F body) {
  SerialScope serial(n * bytes_per_element < kTaskGrainBytes);
  parallel_ranges(static_cast<int>((n + kBlock - 1) / kBlock), n * bytes_per_element, [&](int b, int e) {
    body(static_cast<size_t>(b) * kBlock, std::min(n, static_cast<size_t>(e) * kBlock));
  });
}

// grad + weight_decay * (q * 2**e), as NumPy's float64 grad + weight_decay * current
DSPTRAIN_CLONES void decayed(const int32_t* q, double p2e, const float* grad, double weight_decay, size_t b, size_t e,
                             double* x) {
  for (size_t i = b; i < e; ++i) x[i] = static_cast<double>(grad[i]) + weight_decay * (static_cast<double>(q[i]) * p2e);
}

// momentum * m + g, g = gq * gstep (the gradient's grid values)
DSPTRAIN_CLONES void momentum_sum(const float* m, const int16_t* gq, double gstep, double momentum, size_t b, size_t e,
                                  double* y) {
  for (size_t i = b; i < e; ++i) y[i] = momentum * static_cast<double>(m[i]) + static_cast<double>(gq[i]) * gstep;
}

DSPTRAIN_CLONES void weight_step(const int32_t* q, const int16_t* mq, double mstep, double lr, double p2e, double limit,
                                 size_t b, size_t e, int32_t* q_new, float* m_new) {
  for (size_t i = b; i < e; ++i) {
    const double mv = static_cast<double>(mq[i]) * mstep;
    m_new[i] = static_cast<float>(mv);
    const double moved = static_cast<double>(q[i]) - std::nearbyint(lr * mv / p2e);
    q_new[i] = static_cast<int32_t>(std::min(std::max(moved, -limit), limit));
  }
}

// the step of a bits-wide power-of-two grid over range top (1 when top is 0: all codes 0)
double grid_step(double top, int bits) { return top == 0.0 ? 1.0 : std::ldexp(1.0, ceil_log2(top) - (bits - 1)); }

}  // namespace

int ceil_log2(double t) {
  int exponent;
  const double mantissa = std::frexp(t, &exponent);   // t = mantissa * 2**exponent, mantissa in [0.5, 1)
  return mantissa == 0.5 ? exponent - 1 : exponent;
}

void wageubn_update(const int32_t* q, int e, const float* grad, const float* m, size_t n, double lr, double momentum,
                    double weight_decay, int grad_bits, int momentum_bits, int acc_bits, const RngKey& key,
                    int32_t* q_new, float* m_new) {
  const double p2e = std::ldexp(1.0, e);
  std::vector<double> wide(n);
  blocks(n, 16, [&](size_t b, size_t end) { decayed(q, p2e, grad, weight_decay, b, end, wide.data()); });
  const double gstep = grid_step(absmax_float(wide.data(), n), grad_bits);
  std::vector<int16_t> gq(n);   // int16 codes for any width up to 16 bits
  quantize_float(wide.data(), n, gstep, (1 << (grad_bits - 1)) - 1, FloatRound::kSto, key, gq.data());
  blocks(n, 16, [&](size_t b, size_t end) { momentum_sum(m, gq.data(), gstep, momentum, b, end, wide.data()); });
  const double mstep = grid_step(absmax_float(wide.data(), n), momentum_bits);
  std::vector<int16_t> mq(n);
  quantize_float(wide.data(), n, mstep, (1 << (momentum_bits - 1)) - 1, FloatRound::kRound, key, mq.data());
  const double limit = static_cast<double>((int64_t{1} << (acc_bits - 1)) - 1);
  blocks(n, 16, [&](size_t b, size_t end) { weight_step(q, mq.data(), mstep, lr, p2e, limit, b, end, q_new, m_new); });
}

}  // namespace dsptrain
