// Element-wise int8 kernels (NHWC, contiguous): work is split over ranges, and small
// calls run on the caller alone (tasks_for).
#include "eltwise.h"

#include <algorithm>

#include "thread_pool.h"

namespace dsptrain {
namespace {

// Splits [0, n) into tasks_for() ranges. The loops themselves live in functions taking
// __restrict pointers by value: inside a lambda capturing pointers by reference the
// compiler must assume each int8 store may change them, and no longer vectorises.
template <typename F>
void for_ranges(size_t n, size_t bytes_per_elem, F body) {
  const int tasks = tasks_for(n * bytes_per_elem, static_cast<int>(std::min<size_t>(n / 4096 + 1, 1 << 20)));
  parallel_for(tasks, [&](int t) { body(n * t / tasks, n * (t + 1) / tasks); });
}

void relu_range(const int8_t* __restrict x, int8_t* __restrict y, size_t b, size_t e) {
  for (size_t i = b; i < e; ++i) y[i] = x[i] > 0 ? x[i] : 0;
}

// Both loads unconditional and a mask instead of a branch, so the loop vectorises.
void relu_bwd_range(const int8_t* __restrict err, const int8_t* __restrict y, int8_t* __restrict dx, size_t b,
                    size_t e) {
  for (size_t i = b; i < e; ++i) dx[i] = static_cast<int8_t>(err[i] & -static_cast<int8_t>(y[i] > 0));
}

}  // namespace

void relu_s8(const int8_t* x, size_t n, int8_t* y) {
  for_ranges(n, 2, [&](size_t b, size_t e) { relu_range(x, y, b, e); });
}

void relu_bwd_s8(const int8_t* err, const int8_t* y, size_t n, int8_t* dx) {
  for_ranges(n, 3, [&](size_t b, size_t e) { relu_bwd_range(err, y, dx, b, e); });
}

}  // namespace dsptrain
