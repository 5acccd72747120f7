// Float element-wise loops; chunked over the thread pool only when a tensor is large
// enough to pay for waking it (kTaskGrainBytes).
#include "eltwise_f32.h"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cpu_features.h"
#include "thread_pool.h"

#include "target_clones.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSPTRAIN_ELTWISE_AVX512 1
#endif

namespace dsptrain {
namespace {

#ifdef DSPTRAIN_ELTWISE_AVX512
bool has_avx512() { return cpu_features().avx512vl; }

inline __mmask16 first_lanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// The compensation layer a row at a time, its channels in the vector lanes (masked past
// the last): a layer's few channels (6, 16) left the compiler's loop over them scalar.
// The same float32 multiply then add per element as comp_fwd_rows.
__attribute__((target("avx512f"))) void comp_fwd_rows_avx512(const float* z, const float* s1, const float* shift,
                                                              size_t r0, size_t r1, int c, float* y) {
  for (int j0 = 0; j0 < c; j0 += 16) {
    const __mmask16 m = first_lanes(c - j0);
    const __m512 a = _mm512_maskz_loadu_ps(m, s1 + j0), b = _mm512_maskz_loadu_ps(m, shift + j0);
    for (size_t r = r0; r < r1; ++r) {
      const size_t at = r * c + j0;
      _mm512_mask_storeu_ps(y + at, m, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, z + at), a), b));
    }
  }
}

#endif

DSPTRAIN_CLONES void relu_loop(const float* x, size_t b, size_t e, float* y) {
  for (size_t i = b; i < e; ++i) y[i] = relu_select(x[i]);
}

DSPTRAIN_CLONES void relu_bwd_loop(const float* err, const float* y, size_t b, size_t e, float* dx) {
  for (size_t i = b; i < e; ++i) dx[i] = relu_gate(err[i], y[i]);
}

DSPTRAIN_CLONES void comp_fwd_rows(const float* z, const float* s1, const float* shift, size_t r0, size_t r1,
                                   int c, float* y) {
  for (size_t r = r0; r < r1; ++r)
    for (int j = 0; j < c; ++j) y[r * c + j] = z[r * c + j] * s1[j] + shift[j];
}

#ifdef DSPTRAIN_ELTWISE_AVX512
// comp_bwd_chunk's whole blocks, NV vectors of eight positions at a time with their sums
// in registers (GCC kept them in memory): the same double multiply and add per element,
// so the same bits.
template <int NV>
__attribute__((target("avx512f"))) void comp_bwd_panel(const float* err, const float* z, const double* s1, size_t at,
                                                        size_t blocks, size_t width, float* dz, double* ss, double* sb) {
  __m512d as[NV], ab[NV], sc[NV];
  for (int v = 0; v < NV; ++v) {
    as[v] = _mm512_loadu_pd(ss + 8 * v);
    ab[v] = _mm512_loadu_pd(sb + 8 * v);
    sc[v] = _mm512_loadu_pd(s1 + 8 * v);
  }
  for (size_t b = 0; b < blocks; ++b, at += width) {
    for (int v = 0; v < NV; ++v) {
      const __m512d e = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(err + at + 8 * v));
      const __m512d zz = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(z + at + 8 * v));
      _mm256_storeu_ps(dz + at + 8 * v, _mm512_maskz_cvtpd_ps(0xFF, _mm512_mul_pd(e, sc[v])));
      as[v] = _mm512_add_pd(as[v], _mm512_mul_pd(e, zz));
      ab[v] = _mm512_add_pd(ab[v], e);
    }
  }
  for (int v = 0; v < NV; ++v) {
    _mm512_storeu_pd(ss + 8 * v, as[v]);
    _mm512_storeu_pd(sb + 8 * v, ab[v]);
  }
}

// the whole blocks of rows [r0, r1): panels of up to eight vectors of the block's width
void comp_bwd_blocks_avx512(const float* err, const float* z, const double* s1, size_t at, size_t blocks,
                            size_t width, float* dz, double* ss, double* sb) {
  for (size_t p = 0; p < width; p += 64) {
    const int nv = static_cast<int>(std::min<size_t>(64, width - p) / 8);
    auto run = [&](auto k) {
      comp_bwd_panel<decltype(k)::value>(err, z, s1 + p, at + p, blocks, width, dz, ss + p, sb + p);
    };
    switch (nv) {
      case 1: run(std::integral_constant<int, 1>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 3: run(std::integral_constant<int, 3>{}); break;
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 5: run(std::integral_constant<int, 5>{}); break;
      case 6: run(std::integral_constant<int, 6>{}); break;
      case 7: run(std::integral_constant<int, 7>{}); break;
      default: run(std::integral_constant<int, 8>{}); break;
    }
  }
}
#endif

// Octo's compensation backward over rows [r0, r1): dz = float(e * (1 + scale)) per element,
// and the sums of e * z and of e per position of a `group`-row block (flat index i of the
// block is channel i % c) into sums[0, width) and sums[width, 2 * width); the rows past
// the last whole block add into the same positions.
void comp_bwd_chunk(const float* err, const float* z, const double* s1, size_t r0, size_t r1, int c,
                                    int group, float* dz, double* sums) {
  const size_t width = static_cast<size_t>(group) * c;
  double* ss = sums;
  double* sb = sums + width;
  size_t at = r0 * c;
  const size_t end = r1 * c;
#ifdef DSPTRAIN_ELTWISE_AVX512
  if (has_avx512()) {
    const size_t blocks = (end - at) / width;
    comp_bwd_blocks_avx512(err, z, s1, at, blocks, width, dz, ss, sb);
    at += blocks * width;
  }
#endif
  for (; at + width <= end; at += width) {
    const float* e = err + at;
    const float* zz = z + at;
    float* d = dz + at;
    for (size_t i = 0; i < width; ++i) {
      const double ev = e[i];
      d[i] = static_cast<float>(ev * s1[i]);
      ss[i] += ev * static_cast<double>(zz[i]);
      sb[i] += ev;
    }
  }
  for (size_t i = 0; at + i < end; ++i) {
    const double ev = err[at + i];
    dz[at + i] = static_cast<float>(ev * s1[i]);
    ss[i] += ev * static_cast<double>(z[at + i]);
    sb[i] += ev;
  }
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
  parallel_ranges(static_cast<int>(rows), bytes, [&](int b, int e) {
#ifdef DSPTRAIN_ELTWISE_AVX512
    if (has_avx512()) return comp_fwd_rows_avx512(z, s1.data(), shift, b, e, channels, y);
#endif
    comp_fwd_rows(z, s1.data(), shift, b, e, channels, y);
  });
}

void compensation_bwd(const float* err, const float* z, const float* scale, size_t rows, int channels, float* dz,
                      float* d_scale, float* d_shift, const float* gate) {
  if (gate == nullptr) return compensation_bwd_rows(nullptr, err, z, scale, rows, channels, dz, d_scale, d_shift);
  // gated (a ReLU's backward folded in): a chunk's err where gate > 0, else +0.0, as
  // relu_bwd_f32 gives it
  const size_t c = static_cast<size_t>(channels);
  const ErrorRows gated = [&](size_t r0, size_t r1) {
    thread_local std::vector<float> out;
    if (out.size() < (r1 - r0) * c) out.resize((r1 - r0) * c);
    relu_bwd_loop(err + r0 * c, gate + r0 * c, 0, (r1 - r0) * c, out.data());
    return static_cast<const float*>(out.data());
  };
  compensation_bwd_rows(&gated, nullptr, z, scale, rows, channels, dz, d_scale, d_shift);
}

void compensation_bwd_rows(const ErrorRows* make_err, const float* err, const float* z, const float* scale, size_t rows,
                           int channels, float* dz, float* d_scale, float* d_shift) {
  const int c = channels;
  std::vector<double> gs(c, 0.0), gb(c, 0.0);
  if (rows == 0 || c == 0) {
    std::fill(d_scale, d_scale + c, 0.0f);
    std::fill(d_shift, d_shift + c, 0.0f);
    return;
  }
  // A block of `group` rows holds a multiple of eight elements and at least 32, so its
  // flat loop vectorises whole and keeps several independent sums in flight (a chain of
  // adds row after row, a channel's sum, was the op's cost for few channels).
  int group = 8 / std::gcd(c, 8);
  while (group * c < 32) group *= 2;
  const size_t width = static_cast<size_t>(group) * c;
  std::vector<double> s1(width);
  for (size_t i = 0; i < width; ++i) s1[i] = static_cast<double>(1.0f + scale[i % c]);
  // Fixed chunks of rows, each with its own partial sums added in chunk order: the same
  // sums at any thread count.
  const size_t chunk_rows = static_cast<size_t>(group) * std::max<size_t>(1, 8192 / width);
  const size_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  std::vector<double> part(chunks * 2 * width, 0.0);
  const size_t bytes = 12 * rows * c;
  SerialScope serial(bytes < kTaskGrainBytes);
  parallel_for(static_cast<int>(chunks), [&](int t) {
    const size_t r0 = static_cast<size_t>(t) * chunk_rows, r1 = std::min(rows, r0 + chunk_rows);
    double* sums = part.data() + static_cast<size_t>(t) * 2 * width;
    if (make_err == nullptr) return comp_bwd_chunk(err, z, s1.data(), r0, r1, c, group, dz, sums);
    // the chunk's error made into a cache-sized buffer, then the same chunk from its first
    // row (r0 is a multiple of `group`: the same blocks and sum positions, the same sums)
    const size_t at = r0 * c;
    comp_bwd_chunk((*make_err)(r0, r1), z + at, s1.data(), 0, r1 - r0, c, group, dz + at, sums);
  });
  for (size_t t = 0; t < chunks; ++t) {
    const double* ps = part.data() + t * 2 * width;
    for (size_t i = 0; i < width; ++i) {
      gs[i % c] += ps[i];
      gb[i % c] += ps[width + i];
    }
  }
  for (int j = 0; j < c; ++j) {
    d_scale[j] = static_cast<float>(gs[j]);
    d_shift[j] = static_cast<float>(gb[j]);
  }
}

}  // namespace dsptrain
