// The fixed chunks the float-recipe quantizers (quant.cpp, quant_prc.cpp) cut their work
// into: a result never depends on the thread count.
#pragma once
#include <algorithm>
#include <cstddef>

#include "thread_pool.h"

namespace dsptrain {

constexpr size_t kChunk = 1 << 15;  // elements per task and per partial sum

// body(t, begin, end) for chunk t of [0, n); small tensors stay on the caller (waking the
// pool costs more than the pass)
template <typename F>
void for_chunks(size_t n, size_t bytes_per_element, F body) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  SerialScope serial(n * bytes_per_element < kTaskGrainBytes);
  parallel_for(static_cast<int>(chunks), [&](int t) {
    const size_t begin = static_cast<size_t>(t) * kChunk;
    body(static_cast<size_t>(t), begin, std::min(n, begin + kChunk));
  });
}

}  // namespace dsptrain
