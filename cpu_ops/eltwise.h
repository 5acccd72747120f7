// Element-wise int8 kernels: ReLU and its backward (the error where the output is positive).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

void relu_s8(const int8_t* x, size_t n, int8_t* y);
void relu_bwd_s8(const int8_t* err, const int8_t* y, size_t n, int8_t* dx);

}  // namespace dsptrain
