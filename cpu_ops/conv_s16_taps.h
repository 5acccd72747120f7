// MLS's int16 weight gradient with the kernel's taps in the vector lanes (x86, AVX-512 BW and
// VNNI): conv_s16_taps.cpp. conv_exact.cpp picks it by shape and ISA; results equal its
// patch-matrix path (and ops_ref) exactly.
#pragma once
#include <cstddef>
#include <cstdint>

#include "conv_cols.h"
#include "scratch.h"

namespace dsptrain {

// Taps of one kernel row (kw * c consecutive elements of an NHWC row) fill most of a
// vector's 16 int32 lanes: 16 or more of them (LeNet's conv2: 30 in two vectors).
bool wgrad_taps_fit(const Col2imShape& s);

#if defined(__x86_64__) || defined(_M_X64)
// dw[O, KH, KW, C] = sum over pixels p of err[p][o] * patch(x)[p][tap]; int32_sums: every
// image's sums fit int32 (else a scalar int64 loop on the same buffers).
void conv_wgrad_s16_taps(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw,
                         bool int32_sums);
#endif

// its kept buffers per pool thread: the padded image and the error's pixel-pair words
ScratchList conv_wgrad_s16_taps_scratch(const Col2imShape& s, int o);

}  // namespace dsptrain
