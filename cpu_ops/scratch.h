// The scratch the CPU kernels keep for themselves, by buffer, from the shapes alone: what
// the memory planner (runtime/memory/fit.py) must count beside its arena. Every buffer
// named here is a grow-only `thread_local Kept<std::vector<...>>` in conv.cpp,
// conv_panels.cpp, gemm_driver.cpp, gemm_avx2.cpp (pack_a_small), conv_f32.cpp, gemm_exact.cpp (matmul_s16),
// gemm_fp16_chunked.cpp (matmul_fp16_chunked) or bindings_int8.cpp: it keeps its largest size until the
// thread exits or release_scratch() empties it, so the planner counts, per name, the
// largest request of a step (a high-water).
// Keep in step with those files: tests/null/test_memory_scratch.py compares this with
// the process's measured peak.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "conv.h"
#include "gemm.h"

namespace dsptrain {

using ScratchList = std::vector<std::pair<std::string, size_t>>;

// Scratch of one convolution pass of shape `s` on the active ISA; `requant`: the fused
// requantizing entry point (its int32/int64 accumulator is scratch too).
ScratchList conv_scratch(ConvPass pass, const ConvShape& s, bool requant);

// Scratch of gemm_s8 / gemm_requant_s8 for a[M,K] @ b[N,K]^T.
ScratchList gemm_scratch(int m, int n, int k, bool requant);

// ---------------------------------------------------------------- releasing kept scratch
// When the memory budget shrinks between steps, what a larger plan grew must go back to
// the system, or the smaller plan's peak no longer bounds the process. Each kept buffer
// is declared `thread_local Kept<T>`: a T that enrols itself in one registry on
// construction (and leaves it when its thread exits), so release_scratch() can reach the
// buffers of every thread, pool workers included.

namespace scratch_detail {
using Dropper = size_t (*)(void* buffer);  // frees the buffer's storage, returns its bytes
void enrol(void* buffer, Dropper drop);
void leave(void* buffer);

template <typename U>
size_t held_bytes(const std::vector<U>& v) { return v.capacity() * sizeof(U); }
inline size_t held_bytes(const PackedB& p) { return held_bytes(p.data) + held_bytes(p.col_offset); }
// a kept struct of its own (gemm_exact.cpp's PackedS16) says what it holds
template <typename U>
auto held_bytes(const U& kept) -> decltype(kept.held_bytes()) { return kept.held_bytes(); }
}  // namespace scratch_detail

// A grow-only buffer release_scratch() can empty. It derives from T so that the kernels
// use it exactly as before (a `std::vector<T>&` binds to it); only its declaration changes.
template <typename T>
class Kept : public T {
 public:
  Kept() { scratch_detail::enrol(this, &drop); }
  ~Kept() { scratch_detail::leave(this); }
  Kept(const Kept&) = delete;
  Kept& operator=(const Kept&) = delete;

 private:
  static size_t drop(void* self) {
    T& held = *static_cast<Kept*>(self);
    const size_t bytes = scratch_detail::held_bytes(held);
    held = T();  // move-assigning an empty T frees the old storage (clear() would keep it)
    return bytes;
  }
};

// Frees the storage of every Kept buffer of every thread; returns the bytes it held
// (their capacity). Call it only while no kernel runs (between training steps): it
// empties buffers other threads own. The next kernel call grows them again on demand.
size_t release_scratch();

// A kept buffer of at least n elements, grown to exactly n (no doubling: a call that asks a
// little more each time keeps no more than its largest ask, which the memory plan counts).
template <typename U>
U* grow_exact(std::vector<U>& v, size_t n) {
  if (v.size() < n) {
    v.reserve(n);
    v.resize(n);
  }
  return v.data();
}

}  // namespace dsptrain
