// The float side of the emulated recipes (Octo, WAGEUBN, AFP, MLS): quantizers that put
// float values on an integer grid with a scale, and the scale epilogue that turns the
// exact integer sums of a product back into floats. Each is bit-exact with the NumPy
// judge (runtime/backends/ops_ref.py), stochastic rounding included (the Threefry RNG).
#pragma once
#include <cstddef>
#include <cstdint>

#include "threefry.h"

namespace dsptrain {

// round: nearest, halves away from zero; nearest_even: IEEE rint; sto: floor(v + u),
// u = (random_u32 >> 8) / 2**24 (the element's counter-RNG word).
enum class FloatRound : int { kRound = 0, kNearestEven = 1, kSto = 2 };

// max |x| (0 for n == 0).
template <typename F>
double absmax_float(const F* x, size_t n);

// q = clip(round(x / step), -qmax, qmax), in double; Q is int8_t or int16_t.
template <typename F, typename Q>
void quantize_float(const F* x, size_t n, double step, int qmax, FloatRound mode, const RngKey& key, Q* q);

// out = float(double(acc) * scale): a product's exact sums times its operands' scales.
template <typename T>
void dequantize(const T* acc, size_t n, double scale, float* out);

// The same over the sums' own memory: element i's float32 bits replace its int32.
void dequantize_in_place(int32_t* acc, size_t n, double scale);

// Octo's product epilogue (quant_comp.cpp): z = dequantize(acc, scale) and
// y = z * (1 + comp_scale[c]) + comp_shift[c] in float32 (c = i % channels), one pass;
// z null: z over acc's own memory (int32 only); relu: y = relu_f32(y).
template <typename T>
void dequantize_compensate(T* acc, size_t n, int channels, double scale, const float* comp_scale,
                           const float* comp_shift, float* z, float* y, bool relu = false);

// Octo's range-clipping search: for each ratio r, sum((min(floor(|x| / s + 0.5), qmax) * s
// - |x|)**2) with s = r * top / qmax. Sums run in fixed blocks, so the result does not
// depend on the thread count.
void prc_squared_errors(const float* x, size_t n, double top, const double* ratios, int count, int qmax,
                        double* errors);

// Octo's error quantizer in one call: top = max |x|; the ratio r among `ratios` whose
// squared errors (prc_squared_errors) are least (the first NaN or least, as np.argmin;
// 1 when top is 0); ratio = (1 - momentum) * prev_ratio + momentum * r into *ratio_out;
// q = quantize_float(x, step = ratio * top / qmax) (all 0 and step 1 when that range is
// 0). Returns step. Q: int8_t or int16_t.
template <typename Q>
double prc_quantize(const float* x, size_t n, double prev_ratio, double momentum, const double* ratios, int count,
                    int qmax, FloatRound mode, const RngKey& key, Q* q, double* ratio_out);

// MLS (Zhong et al. 2022) on rows of `channels` floats: groups of `group` channels get
// k = clip(floor(log2(top / max(group max, top * 2**-64))), 0, kmax) (an exact frexp, not
// a rounded log2), elements q = clip(round(x / (tensor_scale * 2**-k)), +-qmax), stored
// aligned: q * 2**(kmax - k), so that value = aligned * tensor_scale * 2**-kmax.
void quantize_mls(const float* x, size_t rows, int channels, int group, double top, double tensor_scale,
                  int kmax, int qmax, FloatRound mode, const RngKey& key, int16_t* aligned);

// The nearest value of a (1, exponent_bits, mantissa_bits) float with subnormals (FP8
// 1-5-2, FP16 1-5-10; Wang et al. 2018), saturating at the largest finite value: ulp =
// 2**(max(floor(log2|x|), emin) - mantissa_bits), an exact frexp; out as float32.
template <typename F>
void round_float_grid(const F* x, size_t n, int exponent_bits, int mantissa_bits, FloatRound mode, const RngKey& key,
                      float* out);

}  // namespace dsptrain
