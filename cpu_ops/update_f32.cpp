// One pass over the weights, float32 arithmetic in NumPy's order, no fused multiply-add.
#include "update_f32.h"

#include <algorithm>

#include "thread_pool.h"

#include "target_clones.h"

namespace dsptrain {
namespace {

DSPTRAIN_CLONES void sgd_loop(float* w, const float* grad, float* v, size_t b, size_t e, float lr, float momentum,
                              float decay, bool nesterov) {
  for (size_t i = b; i < e; ++i) {
    const float g = grad[i] + decay * w[i];
    const float vi = momentum * v[i] + g;
    const float step = nesterov ? g + momentum * vi : vi;
    v[i] = vi;
    w[i] = w[i] - lr * step;
  }
}

}  // namespace

void sgd_f32(float* w, const float* grad, float* v, size_t n, float lr, float momentum, float weight_decay,
             bool nesterov) {
  const size_t bytes = 16 * n;
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(static_cast<int>((n + 4095) / 4096), bytes, [&](int b, int e) {
    sgd_loop(w, grad, v, static_cast<size_t>(b) * 4096, std::min(n, static_cast<size_t>(e) * 4096), lr, momentum,
             weight_decay, nesterov);
  });
}

}  // namespace dsptrain
