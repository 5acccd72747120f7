// The update is an element-wise pass over the weights, on the thread pool.
#include "update.h"

#include <algorithm>
#include <cstring>

#include "requant.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// w_new[i] = clip(w[i] - w_new[i]): the update, w_new holding the rounded step.
void subtract_step(const int8_t* __restrict w, size_t n, int8_t* __restrict w_new) {
  for (size_t i = 0; i < n; ++i) w_new[i] = clip_s8(int32_t{w[i]} - int32_t{w_new[i]});
}

}  // namespace

template <typename T>
void niti_update(const int8_t* w, const T* grad, size_t n, int mu, RoundMode mode, const RngKey& key,
                 int8_t* w_new) {
  const int b = range_bits(absmax(grad, n));
  if (b == 0) {  // an all-zero gradient leaves the weights as they are
    std::memcpy(w_new, w, n);
    return;
  }
  shift_round(grad, n, std::max(b - mu, 0), mode, key, w_new);  // w_new holds the step
  // On the pool, through a function of restrict pointers so that the loop vectorises (int8
  // stores may alias anything the lambda captured).
  const int units = static_cast<int>((n + 4095) / 4096);
  parallel_ranges(units, n * 2, [&](int u0, int u1) {
    const size_t begin = static_cast<size_t>(u0) * 4096, end = std::min(n, static_cast<size_t>(u1) * 4096);
    subtract_step(w + begin, end - begin, w_new + begin);
  });
}

template void niti_update<int32_t>(const int8_t*, const int32_t*, size_t, int, RoundMode, const RngKey&, int8_t*);
template void niti_update<int64_t>(const int8_t*, const int64_t*, size_t, int, RoundMode, const RngKey&, int8_t*);

}  // namespace dsptrain
