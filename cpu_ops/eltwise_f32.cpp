// Float element-wise loops; chunked over the thread pool only when a tensor is large
// enough to pay for waking it (kTaskGrainBytes).
#include "eltwise_f32.h"

#include <algorithm>
#include <vector>

#include "thread_pool.h"

#include "target_clones.h"

namespace dsptrain {
namespace {

DSPTRAIN_CLONES void relu_loop(const float* x, size_t b, size_t e, float* y) {
  // NumPy's maximum(x, 0) keeps x when x >= 0 (so -0.0 stays -0.0) and when x is NaN
  for (size_t i = b; i < e; ++i) y[i] = (x[i] >= 0.0f || x[i] != x[i]) ? x[i] : 0.0f;
}

DSPTRAIN_CLONES void relu_bwd_loop(const float* err, const float* y, size_t b, size_t e, float* dx) {
  for (size_t i = b; i < e; ++i) dx[i] = y[i] > 0.0f ? err[i] : 0.0f;
}

DSPTRAIN_CLONES void comp_fwd_rows(const float* z, const float* s1, const float* shift, size_t r0, size_t r1,
                                   int c, float* y) {
  for (size_t r = r0; r < r1; ++r)
    for (int j = 0; j < c; ++j) y[r * c + j] = z[r * c + j] * s1[j] + shift[j];
}

template <typename F>
void elementwise(size_t n, size_t bytes, F body) {
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(static_cast<int>((n + 4095) / 4096), bytes, [&](int b, int e) {
    body(static_cast<size_t>(b) * 4096, std::min(n, static_cast<size_t>(e) * 4096));
  });
}

}  // namespace

void relu_f32(const float* x, size_t n, float* y) {
  elementwise(n, 8 * n, [&](size_t b, size_t e) { relu_loop(x, b, e, y); });
}

void relu_bwd_f32(const float* err, const float* y, size_t n, float* dx) {
  elementwise(n, 12 * n, [&](size_t b, size_t e) { relu_bwd_loop(err, y, b, e, dx); });
}

void compensation_fwd(const float* z, const float* scale, const float* shift, size_t rows, int channels, float* y) {
  std::vector<float> s1(channels);
  for (int j = 0; j < channels; ++j) s1[j] = 1.0f + scale[j];
  const size_t bytes = 8 * rows * channels;
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_ranges(static_cast<int>(rows), bytes, [&](int b, int e) { comp_fwd_rows(z, s1.data(), shift, b, e, channels, y); });
}

void compensation_bwd(const float* err, const float* z, const float* scale, size_t rows, int channels, float* dz,
                      float* d_scale, float* d_shift) {
  std::vector<double> s1(channels), gs(channels, 0.0), gb(channels, 0.0);
  for (int j = 0; j < channels; ++j) s1[j] = static_cast<double>(1.0f + scale[j]);
  // one pass, rows in order: the sums are NumPy's row-by-row reduction over the leading axes
  for (size_t r = 0; r < rows; ++r) {
    const float* e = err + r * channels;
    const float* zr = z + r * channels;
    float* d = dz + r * channels;
    for (int j = 0; j < channels; ++j) {
      const double ev = e[j];
      d[j] = static_cast<float>(ev * s1[j]);
      gs[j] += ev * static_cast<double>(zr[j]);
      gb[j] += ev;
    }
  }
  for (int j = 0; j < channels; ++j) {
    d_scale[j] = static_cast<float>(gs[j]);
    d_shift[j] = static_cast<float>(gb[j]);
  }
}

}  // namespace dsptrain
