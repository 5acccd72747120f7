// Octo's product epilogue in one pass over the sums (Zhou et al., ATC 2021: the loss-aware
// compensation layer after every quantized product): z = float(double(acc) * scale), as
// dequantize, and y = z * (1 + comp_scale[c]) + comp_shift[c], as compensation_fwd (a
// float32 multiply then an add, no FMA): the same bits as the two hooks one after the
// other, without writing z and reading it back. The channel pattern repeats every
// `period` elements (a multiple of 16 and of the channel count), so the loop runs over
// stretches of contiguous elements against a scale and shift laid out to match. With `relu`
// y passes relu_f32's select (y where y >= 0 or NaN, else +0.0): a ReLU that only reads
// the layer's output runs in the same pass (algorithms/_fusions.py).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "eltwise_f32.h"
#include "quant.h"
#include "quant_chunks.h"
#include "target_clones.h"

namespace dsptrain {
namespace {

// z[i] into `z`, or over acc[i] itself when z is null (T = int32_t: the float's bits
// replace the sum's; memcpy, so no float store aliases the int32 array)
template <typename T, bool Relu>
DSPTRAIN_CLONES void epilogue_stretch(T* acc, size_t n, double scale, const float* s1, const float* shift, float* z,
                                      float* y) {
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<double>(acc[i]) * scale);
    if constexpr (sizeof(T) == sizeof(float)) {
      if (z == nullptr) std::memcpy(acc + i, &v, sizeof v);
      else z[i] = v;
    } else {
      z[i] = v;
    }
    const float out = v * s1[i] + shift[i];
    y[i] = Relu ? relu_select(out) : out;
  }
}

}  // namespace

template <typename T>
void dequantize_compensate(T* acc, size_t n, int channels, double scale, const float* comp_scale,
                           const float* comp_shift, float* z, float* y, bool relu) {
  if (n == 0 || channels <= 0) return;
  const size_t unit = std::lcm(static_cast<size_t>(channels), size_t{16});
  const size_t period = unit * std::max<size_t>(1, 1024 / unit);
  std::vector<float> s1(2 * period), shift(2 * period);   // doubled: a stretch may start mid-period
  for (size_t i = 0; i < 2 * period; ++i) {
    s1[i] = 1.0f + comp_scale[i % channels];
    shift[i] = comp_shift[i % channels];
  }
  for_chunks(n, sizeof(T) + 2 * sizeof(float), [&](size_t, size_t b, size_t e) {
    for (size_t i = b; i < e;) {
      const size_t phase = i % period, len = std::min(e - i, period);
      const auto stretch = relu ? epilogue_stretch<T, true> : epilogue_stretch<T, false>;
      stretch(acc + i, len, scale, s1.data() + phase, shift.data() + phase, z ? z + i : nullptr, y + i);
      i += len;
    }
  });
}

template void dequantize_compensate<int32_t>(int32_t*, size_t, int, double, const float*, const float*, float*, float*,
                                             bool);
template void dequantize_compensate<int64_t>(int64_t*, size_t, int, double, const float*, const float*, float*, float*,
                                             bool);

}  // namespace dsptrain
