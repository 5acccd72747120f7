// Depthwise convolutions (one filter per channel: weight (C, KH, KW, 1)), NHWC, any kernel,
// stride and symmetric padding: forward, backward data and weight gradient, int8 with exact
// int32/int64 sums and float32 summed in ops_ref's stated order (each product rounded, then
// added: taps in (kh, kw) order; the weight gradient per image over (oh, ow), then images in
// order). No Python in here (bindings_dwconv.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

struct FusedRequant;  // requant.h

struct DwShape {
  int n, h, w, c;   // input x
  int kh, kw;       // the kernel
  int stride, pad;
  int oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int ow() const { return (w + 2 * pad - kw) / stride + 1; }
  int taps() const { return kh * kw; }
};

// int8 forward -> int32 [N, OH, OW, C]. absmax (may be null): max |y| taken while each
// task's rows are in cache. fused (may be null, shift given): each task rounds its own rows
// into fused->out as well (requant.h FusedRequant), and sets fused->applied.
void dwconv2d_fwd(const int8_t* x, const int8_t* w, const DwShape& s, int32_t* y, int64_t* absmax = nullptr,
                  FusedRequant* fused = nullptr);
// int8 backward data: err [N, OH, OW, C] -> int32 dx [N, H, W, C]; absmax, fused as above.
void dwconv2d_bwd_data(const int8_t* err, const int8_t* w, const DwShape& s, int32_t* dx,
                       int64_t* absmax = nullptr, FusedRequant* fused = nullptr);
// int8 weight gradient -> [C, KH, KW] sums, int32, or int64 when N*OH*OW*128*128 could
// overflow int32 (the binding picks by ops_ref's acc_dtype).
void dwconv2d_bwd_weight(const int8_t* err, const int8_t* x, const DwShape& s, int32_t* dw);
void dwconv2d_bwd_weight(const int8_t* err, const int8_t* x, const DwShape& s, int64_t* dw);

void dwconv2d_fwd_f32(const float* x, const float* w, const DwShape& s, float* y);
void dwconv2d_bwd_data_f32(const float* err, const float* w, const DwShape& s, float* dx);
void dwconv2d_bwd_weight_f32(const float* err, const float* x, const DwShape& s, float* dw);

// The path an int8 pass of shape s takes on the active ISA (for the kernel-path tests):
// "madd_pairs" (AVX2 and up: taps paired through vpmaddwd, sums in registers) or "rows"
// (the portable kernel: each output row summed tap by tap, vectorised by the compiler).
enum class DwPass { kForward, kBackwardData, kBackwardWeight };
const char* dwconv_path(DwPass pass, const DwShape& s);

// Bytes of the kept scratch one pass of shape s uses, by buffer (scratch.h's contract): the
// source rows the tasks read, over every pool thread. `sums` is 0: the weight gradient's
// per-task sums are freed when it returns.
struct DwScratch {
  size_t source_rows, sums;
};
DwScratch dwconv_scratch(DwPass pass, const DwShape& s, int element_bytes);

}  // namespace dsptrain
