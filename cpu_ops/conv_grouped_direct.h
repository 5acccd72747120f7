// The grouped conv's direct kernels (no GEMM) where a group has few outputs: the source framed
// once as int16 (each group's channels padded to an even count), the weights turned once into
// lane vectors (conv_grouped_lanes.h), then every output row of every group summed in registers
// and stored into its channels. Strided backward data runs it per
// residue class of dx's pixels over the taps the class meets, writing dx's pixels in place. The
// weight gradient pairs two images' same pixel instead (grouped_direct_bwd_weight).
#pragma once
#include <cstdint>

#include "conv_grouped.h"
#include "scratch.h"

namespace dsptrain {

// Whether a pass of g runs here (conv_grouped.cpp asks): AVX2 active, int32 sums, and at most
// kDirectMaxLanes outputs a group on the lanes (the forward's and weight gradient's outputs,
// backward data's input channels).
bool grouped_direct_fits(ConvPass pass, const GroupedConv& g);

// absmax (may be null): set to max |sums|, taken from the registers.
void grouped_direct_fwd(const int8_t* x, const int8_t* w, const GroupedConv& g, int32_t* y, int64_t* absmax);
void grouped_direct_bwd_data(const int8_t* err, const int8_t* w, const GroupedConv& g, int32_t* dx, int64_t* absmax);
// The weight gradient, int32 sums (a depth N*OH*OW within int32's exact range).
void grouped_direct_bwd_weight(const int8_t* err, const int8_t* x, const GroupedConv& g, int32_t* dw);

// The kept scratch of a pass that fits (the int16 frame, the lane weights), on the calling thread.
ScratchList grouped_direct_scratch(ConvPass pass, const GroupedConv& g);

}  // namespace dsptrain
