// The weight gradient of few-channel sources from channel planes (conv_wgrad_planes.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "conv_shapes.h"

namespace dsptrain {

// dw[oc, kh, kw, ch] of a source with few channels (an RGB input) as the GEMM
// dw^T[taps, oc] = planes[taps, pixels] x err[pixels, oc], A read in place from the
// source's biased channel planes (conv_wgrad_planes.cpp). int32 only; where it fits.
bool wgrad_planes_fit(const ConvShape& s);
void conv_wgrad_planes(const int8_t* x, const int8_t* err, const ConvShape& s, int32_t* dw);
size_t wgrad_planes_source_bytes(const ConvShape& s);    // its scratch, for scratch.cpp
size_t wgrad_planes_partial_bytes(const ConvShape& s);
size_t wgrad_planes_packed_bytes(const ConvShape& s);   // per pool thread

}  // namespace dsptrain
