// Float weight updates of the emulated recipes and FP32.
#pragma once
#include <cstddef>

namespace dsptrain {

// PyTorch's SGD in float32 (the float master-weight update): g = grad + weight_decay * w;
// v = momentum * v + g; w -= lr * (g + momentum * v if nesterov else v). In place on w, v.
void sgd_f32(float* w, const float* grad, float* v, size_t n, float lr, float momentum, float weight_decay,
             bool nesterov);

}  // namespace dsptrain
