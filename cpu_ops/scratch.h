// The scratch the CPU kernels keep for themselves, by buffer, from the shapes alone: what
// the memory planner (runtime/memory_fit.py) must count beside its arena. Every buffer
// named here is a grow-only `thread_local` vector in conv.cpp, conv_panels.cpp,
// gemm_driver.cpp or bindings.cpp: it keeps its largest size until the thread exits, so
// the planner counts, per name, the largest request of a step (a high-water).
// Keep in step with those files: tests/null/test_memory_scratch.py compares this with
// the process's measured peak.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "conv.h"

namespace dsptrain {

using ScratchList = std::vector<std::pair<std::string, size_t>>;

// Scratch of one convolution pass of shape `s` on the active ISA; `requant`: the fused
// requantizing entry point (its int32/int64 accumulator is scratch too).
ScratchList conv_scratch(ConvPass pass, const ConvShape& s, bool requant);

// Scratch of gemm_s8 / gemm_requant_s8 for a[M,K] @ b[N,K]^T.
ScratchList gemm_scratch(int m, int n, int k, bool requant);

}  // namespace dsptrain
