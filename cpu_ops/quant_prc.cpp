// Octo's parameterized range clipping (Zhou et al. 2021): the squared quantization error
// of each candidate clip ratio, and the error quantizer built on it. Element i of a chunk
// goes into lane (its rank among the chunk's nonzero values) % 8, lanes and chunks added
// in order: the sums depend on the data only, never on the thread count or ISA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_features.h"
#include "quant.h"
#include "quant_chunks.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPTRAIN_X86 1
#endif

#include "target_clones.h"

namespace dsptrain {
namespace {

// Eight running sums (element i into lane i % 8), added in lane order at the end: a
// result that depends only on n, never on the thread count or the instruction set.
constexpr int kLanes = 8;

inline double clip_error(float x, double inv, double step, double top_code) {
  const double m = std::fabs(static_cast<double>(x));
  const double e = std::min(std::floor(m * inv + 0.5), top_code) * step - m;
  return e * e;
}

double clip_error_scalar(const float* x, size_t begin, size_t end, double step, double top_code, double* lane) {
  const double inv = 1.0 / step;
  for (size_t i = begin; i < end; ++i) lane[(i - begin) % kLanes] += clip_error(x[i], inv, step, top_code);
  return 0;
}

#ifdef DSPTRAIN_X86
// the same arithmetic, eight lanes in two AVX2 vectors (no FMA: the product and the sum
// round separately, as in the scalar code)
__attribute__((target("avx2"))) void clip_error_avx2(const float* x, size_t begin, size_t end, double step,
                                                      double top_code, double* lane) {
  const __m256d inv = _mm256_set1_pd(1.0 / step), st = _mm256_set1_pd(step), top = _mm256_set1_pd(top_code);
  const __m256d half = _mm256_set1_pd(0.5), sign = _mm256_set1_pd(-0.0);
  __m256d acc0 = _mm256_loadu_pd(lane), acc1 = _mm256_loadu_pd(lane + 4);
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m256 v = _mm256_loadu_ps(x + i);
    for (int h = 0; h < 2; ++h) {
      const __m256d m = _mm256_andnot_pd(sign, _mm256_cvtps_pd(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v)));
      const __m256d q = _mm256_min_pd(_mm256_round_pd(_mm256_add_pd(_mm256_mul_pd(m, inv), half), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), top);
      const __m256d e = _mm256_sub_pd(_mm256_mul_pd(q, st), m);
      if (h) acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(e, e));
      else acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(e, e));
    }
  }
  _mm256_storeu_pd(lane, acc0);
  _mm256_storeu_pd(lane + 4, acc1);
  clip_error_scalar(x, i, end, step, top_code, lane);   // i - begin is a multiple of kLanes: lanes line up
}

// Every ratio in one pass (up to kLanes of them): each element is loaded and widened
// once, and the ratios' sums are independent chains. Lane l of ratio r still sums the
// elements i with i % 8 == l in order, the same arithmetic: the same bits as above.
// (The maskz forms, all lanes on, because GCC 12 warns inside its unmasked ones.)
__attribute__((target("avx512f"))) void clip_errors_avx512(const float* x, size_t begin, size_t end,
                                                            const double* steps, int count, double top_code,
                                                            double* lanes) {
  __m512d inv[kLanes], st[kLanes], acc[kLanes];
  const __m512d top = _mm512_set1_pd(top_code), half = _mm512_set1_pd(0.5);
  const __m512i magnitude = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFLL);   // |x|: the sign bit cleared
  for (int r = 0; r < count; ++r) {
    inv[r] = _mm512_set1_pd(1.0 / steps[r]);
    st[r] = _mm512_set1_pd(steps[r]);
    acc[r] = _mm512_loadu_pd(lanes + r * kLanes);
  }
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    const __m512d m = _mm512_castsi512_pd(_mm512_and_epi64(_mm512_castpd_si512(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x + i))), magnitude));
    for (int r = 0; r < count; ++r) {
      const __m512d q = _mm512_maskz_min_pd(0xFF,
          _mm512_maskz_roundscale_pd(0xFF, _mm512_add_pd(_mm512_mul_pd(m, inv[r]), half),
                                     _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), top);
      const __m512d e = _mm512_sub_pd(_mm512_mul_pd(q, st[r]), m);
      acc[r] = _mm512_add_pd(acc[r], _mm512_mul_pd(e, e));
    }
  }
  for (int r = 0; r < count; ++r) {
    _mm512_storeu_pd(lanes + r * kLanes, acc[r]);
    clip_error_scalar(x, i, end, steps[r], top_code, lanes + r * kLanes);
  }
}
#endif

// The nonzero |x| of x[0, n) in order into out (which has n + kCompactSlack room); returns
// their count. NaN counts as nonzero (it stays in the sums, as in the reference).
constexpr size_t kCompactSlack = 16;

DSPTRAIN_CLONES size_t nonzero_magnitudes_scalar(const float* x, size_t begin, size_t n, float* out, size_t k) {
  for (size_t i = begin; i < n; ++i) {
    out[k] = std::fabs(x[i]);
    k += !(x[i] == 0.0f);
  }
  return k;
}

#ifdef DSPTRAIN_X86
__attribute__((target("avx512f"))) size_t nonzero_magnitudes_avx512(const float* x, size_t n, float* out) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  size_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(_mm512_loadu_ps(x + i)), magnitude));
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _mm512_storeu_ps(out + k, _mm512_maskz_compress_ps(keep, v));   // 16 written, popcount kept
    k += static_cast<size_t>(__builtin_popcount(keep));
  }
  return nonzero_magnitudes_scalar(x, i, n, out, k);
}
#endif

size_t nonzero_magnitudes(const float* x, size_t n, float* out) {
#ifdef DSPTRAIN_X86
  const bool avx512 = cpu_features().avx512f;
  if (avx512) return nonzero_magnitudes_avx512(x, n, out);
#endif
  return nonzero_magnitudes_scalar(x, 0, n, out, 0);
}

double clip_error_loop(const float* x, size_t begin, size_t end, double step, double top_code) {
  double lane[kLanes] = {};
#ifdef DSPTRAIN_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) clip_error_avx2(x, begin, end, step, top_code, lane);
  else clip_error_scalar(x, begin, end, step, top_code, lane);
#else
  clip_error_scalar(x, begin, end, step, top_code, lane);
#endif
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// The nonzero x[i] of x[0, n) in order into values and their i into index (both with
// n + kCompactSlack room); returns their count, and max |x| (NaN above infinity, as
// absmax_f's bit order) in top.
DSPTRAIN_CLONES size_t nonzero_entries_scalar(const float* x, size_t begin, size_t n, float* values, uint32_t* index,
                                              size_t k, uint32_t* top_bits) {
  uint32_t m = *top_bits;
  for (size_t i = begin; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    m = std::max(m, bits & 0x7FFFFFFFu);
    values[k] = x[i];
    index[k] = static_cast<uint32_t>(i);
    k += !(x[i] == 0.0f);
  }
  *top_bits = m;
  return k;
}

#ifdef DSPTRAIN_X86
__attribute__((target("avx512f"))) size_t nonzero_entries_avx512(const float* x, size_t n, float* values,
                                                                  uint32_t* index, uint32_t* top_bits) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), sixteen = _mm512_set1_epi32(16);
  __m512i at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), top = _mm512_setzero_si512();
  size_t k = 0, i = 0;
  for (; i + 16 <= n; i += 16, at = _mm512_add_epi32(at, sixteen)) {
    const __m512 v = _mm512_loadu_ps(x + i);
    top = _mm512_max_epu32(top, _mm512_and_epi32(_mm512_castps_si512(v), magnitude));
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _mm512_storeu_ps(values + k, _mm512_maskz_compress_ps(keep, v));
    _mm512_storeu_si512(index + k, _mm512_maskz_compress_epi32(keep, at));
    k += static_cast<size_t>(__builtin_popcount(keep));
  }
  *top_bits = _mm512_reduce_max_epu32(top);
  return nonzero_entries_scalar(x, i, n, values, index, k, top_bits);
}
#endif

size_t nonzero_entries(const float* x, size_t n, float* values, uint32_t* index, uint32_t* top_bits) {
  *top_bits = 0;
#ifdef DSPTRAIN_X86
  const bool avx512 = cpu_features().avx512f;
  if (avx512) return nonzero_entries_avx512(x, n, values, index, top_bits);
#endif
  return nonzero_entries_scalar(x, 0, n, values, index, 0, top_bits);
}

// np.argmin's index: the first NaN if there is one, else the first least value
int argmin_first(const double* v, int count) {
  int best = 0;
  for (int r = 0; r < count; ++r) {
    if (std::isnan(v[r])) return r;
    if (v[r] < v[best]) best = r;
  }
  return best;
}

// The ratios' sums of one chunk's nonzero values x[0, k) (signed: the kernels take |x|)
void chunk_sums(const float* x, size_t k, double top, const double* ratios, int count, int qmax, double* sums) {
#ifdef DSPTRAIN_X86
  const bool avx512 = cpu_features().avx512f;
  if (avx512) {
    for (int r0 = 0; r0 < count; r0 += kLanes) {   // up to eight ratios per pass
      const int rs = std::min(kLanes, count - r0);
      double steps[kLanes], lanes[kLanes * kLanes] = {};
      for (int r = 0; r < rs; ++r) steps[r] = ratios[r0 + r] * top / qmax;
      clip_errors_avx512(x, 0, k, steps, rs, qmax, lanes);
      for (int r = 0; r < rs; ++r) {
        double sum = 0;
        for (int l = 0; l < kLanes; ++l) sum += lanes[r * kLanes + l];
        sums[r0 + r] = sum;
      }
    }
    return;
  }
#endif
  for (int r = 0; r < count; ++r) sums[r] = clip_error_loop(x, 0, k, ratios[r] * top / qmax, qmax);
}

// the chunks' sums added in chunk order
void total_sums(const std::vector<double>& part, size_t chunks, int count, double* errors) {
  for (int r = 0; r < count; ++r) {
    double sum = 0;
    for (size_t t = 0; t < chunks; ++t) sum += part[t * count + r];
    errors[r] = sum;
  }
}

}  // namespace

// A zero adds exactly 0 to every ratio's sum (its code is 0, its error 0): the ratios run
// over each chunk's nonzero values only. Backward errors behind ReLU and max-pool are
// mostly zeros (about 87 % of LeNet-5's conv errors).
void prc_squared_errors(const float* x, size_t n, double top, const double* ratios, int count, int qmax,
                        double* errors) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks * count, 0.0);
  for_chunks(n, sizeof(float) * count, [&](size_t t, size_t b0, size_t e0) {
    thread_local std::vector<float> kept;
    if (kept.size() < e0 - b0 + kCompactSlack) kept.resize(e0 - b0 + kCompactSlack);
    const size_t k = nonzero_magnitudes(x + b0, e0 - b0, kept.data());
    chunk_sums(kept.data(), k, top, ratios, count, qmax, part.data() + t * count);
  });
  total_sums(part, chunks, count, errors);
}


template <typename Q>
double prc_quantize(const float* x, size_t n, double prev_ratio, double momentum, const double* ratios, int count,
                    int qmax, FloatRound mode, const RngKey& key, Q* q, double* ratio_out) {
  // the range, then the search: prc_squared_errors itself, so the same sums bit for bit
  const double top = absmax_float(x, n);
  double best = 1.0;
  if (top != 0.0) {
    std::vector<double> errors(count);
    prc_squared_errors(x, n, top, ratios, count, qmax, errors.data());
    best = ratios[argmin_first(errors.data(), count)];
  }
  const double ratio = (1 - momentum) * prev_ratio + momentum * best;
  *ratio_out = ratio;
  const double limit = ratio * top;
  if (limit == 0.0) {
    std::fill(q, q + n, Q{0});
    return 1.0;
  }
  const double step = limit / qmax;
  if (mode == FloatRound::kSto) {   // the random word is the element's: every element is rounded
    quantize_float(x, n, step, qmax, mode, key, q);
    return step;
  }
  // round and nearest_even give 0 for a zero: each chunk's nonzero values are divided, in
  // buffers of one chunk per thread (kept, as prc_squared_errors' own: 36 bytes a chunk
  // element; buffers of the whole tensor were fresh pages every step)
  for_chunks(n, sizeof(float) + sizeof(Q), [&](size_t, size_t b0, size_t e0) {
    thread_local std::vector<float> values;
    thread_local std::vector<uint32_t> index;
    thread_local std::vector<Q> codes;
    const size_t len = e0 - b0;
    if (values.size() < len + kCompactSlack) {
      values.resize(len + kCompactSlack);
      index.resize(len + kCompactSlack);
      codes.resize(len + kCompactSlack);
    }
    float* v = values.data();
    uint32_t* at = index.data();
    Q* c = codes.data();
    uint32_t unused;
    const size_t k = nonzero_entries(x + b0, len, v, at, &unused);
    quantize_float(v, k, step, qmax, mode, key, c);   // inside a task: runs inline
    Q* out = q + b0;
    std::memset(out, 0, len * sizeof(Q));
    for (size_t j = 0; j < k; ++j) out[at[j]] = c[j];
  });
  return step;
}

template double prc_quantize<int8_t>(const float*, size_t, double, double, const double*, int, int, FloatRound,
                                     const RngKey&, int8_t*, double*);
template double prc_quantize<int16_t>(const float*, size_t, double, double, const double*, int, int, FloatRound,
                                      const RngKey&, int16_t*, double*);

}  // namespace dsptrain
