// MLS's int16 convolutions on channel planes (stride 1, x86 with AVX-512 BW and VNNI):
// conv_s16_planar.cpp (forward, weight gradient), conv_s16_planar_bwd.cpp (backward data). conv_exact.cpp picks them by shape and ISA; results equal its
// patch-matrix paths (and ops_ref) exactly.
#pragma once
#include <cstddef>
#include <cstdint>

#include "conv_cols.h"
#include "cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#define DSPTRAIN_X86_PLANAR 1
#endif

namespace dsptrain {

// (lo, hi) as one 32-bit word: the int16 pair one vpdpwssd lane multiplies
inline int32_t pair_word(int16_t lo, int16_t hi) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                              (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
}

#ifdef DSPTRAIN_X86_PLANAR
inline bool has_avx512bw() { return cpu_features().avx512bw; }

// y[N, OH, OW, O] = conv(x[N, H, W, C], w[O, KH, KW, C]); int32_sums: every output's sum
// fits int32 (else a scalar int64 loop on the same planes).
void conv_fwd_s16_planar(const int16_t* x, const int16_t* w, const Col2imShape& s, int o, int64_t* y, bool int32_sums);
// dw[O, KH, KW, C] = the weight gradient; int32_sums: every image's sums fit int32. The
// error's planes have the input's padded width, pw = w + 2 pad (columns past ow zero),
// so that one flat walk of vectors covers every output row: each a channel plane of
// wgrad_error_plane(s) int16 (oh * pw rounded up to whole vectors).
void conv_wgrad_s16_planar(const int16_t* err, const int16_t* x, const Col2imShape& s, int o, int64_t* dw,
                           bool int32_sums);
size_t wgrad_error_plane(const Col2imShape& s);
// dx[N, H, W, C] = the backward data, as a direct convolution of the zero-bordered error
// with the flipped kernel; int32_sums: every output's sum fits int32.
void conv_bwd_data_s16_planar(const int16_t* err, const int16_t* w, const Col2imShape& s, int o, int64_t* dx,
                              bool int32_sums);
// The backward data's pair planes: pairs of output channels, rows and columns of a plane
// (the error with a border of kh - 1 rows, kw - 1 columns), int32 words per thread.
struct BwdDataPlanes {
  int pairs = 0, ph = 0, pw = 0;
  size_t words = 0;
};
BwdDataPlanes bwd_data_planes(const Col2imShape& s, int o);
#endif

}  // namespace dsptrain
