// FP8's depthwise passes with FP16 products and chunked FP16 sums (dwconv_fp16.h).
#include "dwconv_fp16.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "thread_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_DW_F16C 1
#define DSPTRAIN_F16C_TARGET __attribute__((target("avx2,f16c")))
#endif

namespace dsptrain {
namespace {

// Nearest FP16 value (ties to even, subnormals, overflow to infinity), one rounding from float
// or from double: the hardware's conversion where the compiler has a half type (AArch64's
// __fp16: fcvt h, s|d; x86 GCC >= 12's _Float16), else by hand.
#if defined(__aarch64__)
inline float fp16(float v) { return static_cast<float>(static_cast<__fp16>(v)); }
inline float fp16(double v) { return static_cast<float>(static_cast<__fp16>(v)); }
#elif defined(__FLT16_MAX__)
inline float fp16(float v) { return static_cast<float>(static_cast<_Float16>(v)); }
inline float fp16(double v) { return static_cast<float>(static_cast<_Float16>(v)); }
#else
template <typename T>
float fp16(T v) {
  if (!std::isfinite(v) || v == T(0)) return static_cast<float>(v);
  int e;
  std::frexp(std::fabs(v), &e);  // |v| in [2**(e-1), 2**e)
  const int quantum = std::max(e - 1, -14) - 10;
  const T r = std::ldexp(std::nearbyint(std::ldexp(std::fabs(v), -quantum)), quantum);
  return std::copysign(r >= T(65520) ? INFINITY : static_cast<float>(r), static_cast<float>(v));
}
#endif

// One chunked sum step: a run's running sum with product p added.
inline float add_product(float acc, float p, bool fp16_adds) { return fp16_adds ? fp16(acc + fp16(p)) : acc + p; }

// Rows of an [rows, ...] output split into tasks for the pool.
template <typename Fn>
void over_rows(int rows, double macs, Fn fn) {
  SerialScope serial(small_op(macs));
  const int tasks = std::max(1, std::min(rows, 4 * pool_threads()));
  parallel_for(tasks, [&](int t) {
    const int r0 = static_cast<int>(static_cast<long long>(rows) * t / tasks);
    const int r1 = static_cast<int>(static_cast<long long>(rows) * (t + 1) / tasks);
    for (int r = r0; r < r1; ++r) fn(r);
  });
}

#ifdef DSPTRAIN_DW_F16C
bool has_f16c() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
}

DSPTRAIN_F16C_TARGET inline __m256 fp16x8(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The forward's channels [0, c8) of one output pixel, 8 at a time: the scalar loop's operations lane by lane.
DSPTRAIN_F16C_TARGET void fwd_pixel_f16c(const float* x, const float* w, const DwShape& s, int n, int oy, int ox,
                                         int c8, int chunk, bool fp16_adds, float* y) {
  const int taps = s.taps(), c = s.c;
  for (int ch = 0; ch < c8; ch += 8) {
    __m256 total = _mm256_setzero_ps();
    for (int r0 = 0; r0 < taps; r0 += chunk) {
      __m256 acc = _mm256_setzero_ps();
      for (int t = r0; t < std::min(r0 + chunk, taps); ++t) {
        const int iy = oy * s.stride + t / s.kw - s.pad, ix = ox * s.stride + t % s.kw - s.pad;
        const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
        const __m256 xv = inside ? _mm256_loadu_ps(x + ((static_cast<size_t>(n) * s.h + iy) * s.w + ix) * c + ch)
                                 : _mm256_setzero_ps();
        alignas(32) float wl[8];
        for (int l = 0; l < 8; ++l) wl[l] = w[static_cast<size_t>(ch + l) * taps + t];
        const __m256 p = _mm256_mul_ps(xv, _mm256_load_ps(wl));
        acc = fp16_adds ? fp16x8(_mm256_add_ps(acc, fp16x8(p))) : _mm256_add_ps(acc, p);
      }
      acc = fp16x8(acc);
      total = r0 == 0 ? acc : fp16x8(_mm256_add_ps(total, acc));
    }
    _mm256_storeu_ps(y + ch, total);
  }
}

// One weight-gradient step of channels [0, c8), 8 at a time: acc += x * e, as add_product does.
DSPTRAIN_F16C_TARGET void wgrad_step_f16c(float* acc, const float* xv, const float* e, int c8, bool fp16_adds) {
  for (int ch = 0; ch < c8; ch += 8) {
    const __m256 zero = _mm256_setzero_ps();  // 0 * e off the image (its sign is e's), 0 * 0 past the pixels
    const __m256 p = _mm256_mul_ps(xv ? _mm256_loadu_ps(xv + ch) : zero, e ? _mm256_loadu_ps(e + ch) : zero);
    const __m256 a = _mm256_loadu_ps(acc + ch);
    _mm256_storeu_ps(acc + ch, fp16_adds ? fp16x8(_mm256_add_ps(a, fp16x8(p))) : _mm256_add_ps(a, p));
  }
}

// Backward data's step for channels [0, c8), 8 at a time: out += double(fp16(e * w)) (exact).
DSPTRAIN_F16C_TARGET void bwd_data_step_f16c(double* out, const float* e, const float* w, int taps, int t, int c8) {
  for (int ch = 0; ch < c8; ch += 8) {
    alignas(32) float wl[8];
    for (int l = 0; l < 8; ++l) wl[l] = w[static_cast<size_t>(ch + l) * taps + t];
    const __m256 p = fp16x8(_mm256_mul_ps(_mm256_loadu_ps(e + ch), _mm256_load_ps(wl)));
    _mm256_storeu_pd(out + ch, _mm256_add_pd(_mm256_loadu_pd(out + ch), _mm256_cvtps_pd(_mm256_castps256_ps128(p))));
    _mm256_storeu_pd(out + ch + 4, _mm256_add_pd(_mm256_loadu_pd(out + ch + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
  }
}
#endif

// Channels [0, c8) go 8 at a time where the CPU has F16C (the same bits), the rest one by one.
int vector_channels(int c) {
#ifdef DSPTRAIN_DW_F16C
  if (has_f16c()) return c / 8 * 8;
#endif
  return 0;
}

}  // namespace

void dwconv2d_fwd_fp16_chunked(const float* x, const float* w, const DwShape& s, int chunk, bool fp16_adds, float* y) {
  const int oh = s.oh(), ow = s.ow(), taps = s.taps(), c = s.c;
  chunk = std::max(1, std::min(chunk, taps));
  const int c8 = vector_channels(c);
  over_rows(s.n * oh, double(s.n) * oh * ow * c * taps, [&](int row) {
    const int n = row / oh, oy = row % oh;
    for (int ox = 0; ox < ow; ++ox) {
#ifdef DSPTRAIN_DW_F16C
      if (c8) fwd_pixel_f16c(x, w, s, n, oy, ox, c8, chunk, fp16_adds, y + ((static_cast<size_t>(n) * oh + oy) * ow + ox) * c);
#endif
      for (int ch = c8; ch < c; ++ch) {
        float total = 0.0f;
        for (int r0 = 0; r0 < taps; r0 += chunk) {
          float acc = 0.0f;
          for (int t = r0; t < std::min(r0 + chunk, taps); ++t) {
            const int iy = oy * s.stride + t / s.kw - s.pad, ix = ox * s.stride + t % s.kw - s.pad;
            const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
            const float xv = inside ? x[((static_cast<size_t>(n) * s.h + iy) * s.w + ix) * c + ch] : 0.0f;
            acc = add_product(acc, xv * w[static_cast<size_t>(ch) * taps + t], fp16_adds);
          }
          acc = fp16(acc);
          total = r0 == 0 ? acc : fp16(total + acc);
        }
        y[((static_cast<size_t>(n) * oh + oy) * ow + ox) * c + ch] = total;
      }
    }
  });
}

void dwconv2d_bwd_data_fp16(const float* err, const float* w, const DwShape& s, float* dx) {
  const int oh = s.oh(), ow = s.ow(), taps = s.taps(), c = s.c, c8 = vector_channels(c);
  over_rows(s.n * s.h, double(s.n) * oh * ow * c * taps, [&](int row) {
    const int n = row / s.h, y = row % s.h;
    std::vector<double> sums(static_cast<size_t>(s.w) * c, 0.0);
    for (int i = 0; i < s.kh; ++i) {
      const int sy = y + s.pad - i;  // = oy * stride
      if (sy < 0 || sy % s.stride || sy / s.stride >= oh) continue;
      const float* erow = err + (static_cast<size_t>(n) * oh + sy / s.stride) * ow * c;
      for (int x = 0; x < s.w; ++x)
        for (int j = 0; j < s.kw; ++j) {
          const int sx = x + s.pad - j;
          if (sx < 0 || sx % s.stride || sx / s.stride >= ow) continue;
          const float* e = erow + static_cast<size_t>(sx / s.stride) * c;
          double* out = sums.data() + static_cast<size_t>(x) * c;
#ifdef DSPTRAIN_DW_F16C
          if (c8) bwd_data_step_f16c(out, e, w, taps, i * s.kw + j, c8);
#endif
          for (int ch = c8; ch < c; ++ch) out[ch] += fp16(e[ch] * w[static_cast<size_t>(ch) * taps + i * s.kw + j]);
        }
    }
    float* d = dx + (static_cast<size_t>(n) * s.h + y) * s.w * c;
    for (size_t k = 0; k < sums.size(); ++k) d[k] = fp16(sums[k]);
  });
}

void dwconv2d_bwd_weight_fp16_chunked(const float* err, const float* x, const DwShape& s, int chunk, bool fp16_adds,
                                      float* dw) {
  const int oh = s.oh(), ow = s.ow(), taps = s.taps(), c = s.c;
  const long long pixels = static_cast<long long>(s.n) * oh * ow;
  chunk = static_cast<int>(std::max(1LL, std::min<long long>(chunk, pixels)));
  const long long padded = (pixels + chunk - 1) / chunk * chunk;
  const int c8 = vector_channels(c);
  over_rows(taps, double(pixels) * c * taps, [&](int t) {   // a task per tap: each sums every pixel, in order
    const int i = t / s.kw, j = t % s.kw;
    std::vector<float> total(c, 0.0f), acc(c);
    for (long long r0 = 0; r0 < padded; r0 += chunk) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (long long m = r0; m < r0 + chunk; ++m) {
        if (m >= pixels) {  // the last run's padding: 0 * 0
#ifdef DSPTRAIN_DW_F16C
          if (c8) wgrad_step_f16c(acc.data(), nullptr, nullptr, c8, fp16_adds);
#endif
          for (int ch = c8; ch < c; ++ch) acc[ch] = add_product(acc[ch], 0.0f, fp16_adds);
          continue;
        }
        const int n = static_cast<int>(m / (oh * ow)), p = static_cast<int>(m % (oh * ow));
        const int iy = p / ow * s.stride + i - s.pad, ix = p % ow * s.stride + j - s.pad;
        const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
        const float* e = err + static_cast<size_t>(m) * c;
        const float* xv = inside ? x + ((static_cast<size_t>(n) * s.h + iy) * s.w + ix) * c : nullptr;
#ifdef DSPTRAIN_DW_F16C
        if (c8) wgrad_step_f16c(acc.data(), xv, e, c8, fp16_adds);
#endif
        for (int ch = c8; ch < c; ++ch) acc[ch] = add_product(acc[ch], (xv ? xv[ch] : 0.0f) * e[ch], fp16_adds);
      }
      for (int ch = 0; ch < c; ++ch) {
        const float run = fp16(acc[ch]);
        total[ch] = r0 == 0 ? run : fp16(total[ch] + run);
      }
    }
    for (int ch = 0; ch < c; ++ch) dw[static_cast<size_t>(ch) * taps + t] = total[ch];
  });
}

}  // namespace dsptrain
