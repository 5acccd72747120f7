// The implicit-GEMM convolution with each output position's taps trimmed to the source
// (conv_trimmed.cpp): no products of the zero border.
#pragma once
#include <cstdint>

#include "conv_shapes.h"
#include "gemm.h"
#include "requant.h"

namespace dsptrain {

// The share of a stride-1 convolution's taps (out_h x out_w positions, kh x kw kernel) that
// fall on the border around `win`.
double trimmed_border_share(int out_h, int out_w, int kh, int kw, const SourceWindow& win);

// Whether gemm_rows_trimmed runs a product of `channels` per tap (a multiple of 4) and
// depth `depth` on the active ISA's kernel (AVX-512 VNNI's: A read in place).
bool trimmed_fits(int channels, int depth);

// c[pixel, b.n] = the patches of the biased padded source `src` (stride 1, depth
// (i, j, ch) as gemm_rows' patch rows) x b, each position's taps outside `win` left out;
// `absmax` and `fused` as gemm_rows'. Only where trimmed_fits.
void gemm_rows_trimmed(const PaddedSrc& src, const SourceWindow& win, const PackedB& b, int32_t* c,
                       int64_t* absmax = nullptr, FusedRequant* fused = nullptr);

}  // namespace dsptrain
