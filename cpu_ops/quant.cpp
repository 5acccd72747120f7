// Quantizers and the scale epilogue of the emulated recipes. Element loops are compiled
// for AVX-512, AVX2 and baseline x86 (target_clones); work is cut into fixed chunks so
// that nothing a result depends on changes with the thread count.
#include "quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DSPTRAIN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DSPTRAIN_CLONES
#endif

namespace dsptrain {
namespace {

constexpr size_t kChunk = 1 << 15;  // elements per task and per partial sum

template <typename F>
void for_chunks(size_t n, size_t bytes_per_element, F body) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  // small tensors stay on the caller: waking the pool costs more than the pass
  SerialScope serial(n * bytes_per_element < kTaskGrainBytes);
  parallel_for(static_cast<int>(chunks), [&](int t) {
    const size_t begin = static_cast<size_t>(t) * kChunk;
    body(static_cast<size_t>(t), begin, std::min(n, begin + kChunk));
  });
}

inline double round_value(double v, FloatRound mode, const RngKey& key, size_t i) {
  if (mode == FloatRound::kRound) return std::copysign(std::floor(std::fabs(v) + 0.5), v);
  if (mode == FloatRound::kNearestEven) return std::nearbyint(v);
  return std::floor(v + static_cast<double>(random_u32(key, i) >> 8) * (1.0 / 16777216.0));
}

template <typename F>
DSPTRAIN_CLONES double absmax_loop(const F* x, size_t begin, size_t end) {
  F m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
  return static_cast<double>(m);
}

template <typename F, typename Q>
DSPTRAIN_CLONES void quantize_loop(const F* x, size_t begin, size_t end, double step, double qmax, FloatRound mode,
                                   const RngKey& key, Q* q) {
  for (size_t i = begin; i < end; ++i) {
    const double r = round_value(static_cast<double>(x[i]) / step, mode, key, i);
    q[i] = static_cast<Q>(std::min(std::max(r, -qmax), qmax));
  }
}

template <typename T>
DSPTRAIN_CLONES void dequantize_loop(const T* acc, size_t begin, size_t end, double scale, float* out) {
  for (size_t i = begin; i < end; ++i) out[i] = static_cast<float>(static_cast<double>(acc[i]) * scale);
}

DSPTRAIN_CLONES double clip_error_loop(const float* x, size_t begin, size_t end, double step, double top_code) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) {
    const double m = std::fabs(static_cast<double>(x[i]));
    const double e = std::min(std::floor(m / step + 0.5), top_code) * step - m;
    sum += e * e;
  }
  return sum;
}

template <typename F>
DSPTRAIN_CLONES void round_float_loop(const F* x, size_t begin, size_t end, int emin, int mbits, double largest,
                                      FloatRound mode, const RngKey& key, float* out) {
  for (size_t i = begin; i < end; ++i) {
    const double v = static_cast<double>(x[i]);
    int e = 1;  // |v| = f * 2**e, f in [0.5, 1); zero takes NumPy's log2(1) = 0
    if (v != 0.0) std::frexp(v, &e);
    const double ulp = std::ldexp(1.0, std::max(e - 1, emin) - mbits);
    const double r = round_value(v / ulp, mode, key, i) * ulp;
    out[i] = static_cast<float>(std::min(std::max(r, -largest), largest));
  }
}

}  // namespace

template <typename F>
void round_float_grid(const F* x, size_t n, int exponent_bits, int mantissa_bits, FloatRound mode, const RngKey& key,
                      float* out) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int emin = 1 - bias;
  const double largest = (2.0 - std::ldexp(1.0, -mantissa_bits)) * std::ldexp(1.0, (1 << exponent_bits) - 2 - bias);
  for_chunks(n, sizeof(F), [&](size_t, size_t b, size_t e) {
    round_float_loop(x, b, e, emin, mantissa_bits, largest, mode, key, out);
  });
}

template <typename F>
double absmax_float(const F* x, size_t n) {
  std::vector<double> part((n + kChunk - 1) / kChunk, 0.0);
  for_chunks(n, sizeof(F), [&](size_t t, size_t b, size_t e) { part[t] = absmax_loop(x, b, e); });
  double m = 0;
  for (double v : part) m = std::max(m, v);
  return m;
}

template <typename F, typename Q>
void quantize_float(const F* x, size_t n, double step, int qmax, FloatRound mode, const RngKey& key, Q* q) {
  for_chunks(n, sizeof(F), [&](size_t, size_t b, size_t e) { quantize_loop(x, b, e, step, double(qmax), mode, key, q); });
}

template <typename T>
void dequantize(const T* acc, size_t n, double scale, float* out) {
  for_chunks(n, sizeof(T), [&](size_t, size_t b, size_t e) { dequantize_loop(acc, b, e, scale, out); });
}

void prc_squared_errors(const float* x, size_t n, double top, const double* ratios, int count, int qmax,
                        double* errors) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks * count, 0.0);
  for_chunks(n, sizeof(float) * count, [&](size_t t, size_t b, size_t e) {
    for (int r = 0; r < count; ++r) part[t * count + r] = clip_error_loop(x, b, e, ratios[r] * top / qmax, qmax);
  });
  for (int r = 0; r < count; ++r) {
    double sum = 0;
    for (size_t t = 0; t < chunks; ++t) sum += part[t * count + r];
    errors[r] = sum;
  }
}

void quantize_mls(const float* x, size_t rows, int channels, int group, double top, double tensor_scale,
                  int kmax, int qmax, FloatRound mode, const RngKey& key, int16_t* aligned) {
  const int groups = channels / group;
  const double floor_max = top * std::ldexp(1.0, -64);
  const size_t rows_per_chunk = std::max<size_t>(1, kChunk / std::max(channels, 1));
  const size_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  SerialScope serial(rows * channels * sizeof(float) < kTaskGrainBytes);
  parallel_for(static_cast<int>(chunks), [&](int t) {
    const size_t r0 = t * rows_per_chunk, r1 = std::min(rows, r0 + rows_per_chunk);
    for (size_t r = r0; r < r1; ++r)
      for (int g = 0; g < groups; ++g) {
        const size_t base = r * channels + static_cast<size_t>(g) * group;
        double gmax = 0;
        for (int i = 0; i < group; ++i) gmax = std::max(gmax, std::fabs(static_cast<double>(x[base + i])));
        int e;  // top / m = f * 2**e, f in [0.5, 1): floor(log2) = e - 1, exactly
        std::frexp(top / std::max(gmax, floor_max), &e);
        const int k = std::min(std::max(e - 1, 0), kmax);
        const double scale = tensor_scale * std::ldexp(1.0, -k);
        for (int i = 0; i < group; ++i) {
          const double v = round_value(static_cast<double>(x[base + i]) / scale, mode, key, base + i);
          const double q = std::min(std::max(v, -double(qmax)), double(qmax));
          aligned[base + i] = static_cast<int16_t>(static_cast<int>(q) * (1 << (kmax - k)));
        }
      }
  });
}

template double absmax_float<float>(const float*, size_t);
template double absmax_float<double>(const double*, size_t);
template void quantize_float<float, int8_t>(const float*, size_t, double, int, FloatRound, const RngKey&, int8_t*);
template void quantize_float<float, int16_t>(const float*, size_t, double, int, FloatRound, const RngKey&, int16_t*);
template void quantize_float<double, int8_t>(const double*, size_t, double, int, FloatRound, const RngKey&, int8_t*);
template void quantize_float<double, int16_t>(const double*, size_t, double, int, FloatRound, const RngKey&, int16_t*);
template void round_float_grid<float>(const float*, size_t, int, int, FloatRound, const RngKey&, float*);
template void round_float_grid<double>(const double*, size_t, int, int, FloatRound, const RngKey&, float*);
template void dequantize<int32_t>(const int32_t*, size_t, double, float*);
template void dequantize<int64_t>(const int64_t*, size_t, double, float*);

}  // namespace dsptrain
