// The update is an element-wise pass over the weights, on the thread pool: the rounded
// step and the subtraction in one loop per (accumulator type, rounding mode), compiled for
// AVX-512, AVX2 and baseline x86 (target_clones), so the gradient is read once after its
// range (a pass that rounded into w_new and a second that subtracted cost a VGG-11 step
// 4.5 ms at one thread).
#include "update.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

#include "round_lanes.h"
#endif

#include "cpu_features.h"
#include "requant.h"
#include "target_clones.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

// w_new[i] = clip(w[i] - shift_round(grad[i])) over [begin, end); element i draws
// random_u32(key, i), as shift_round's.
template <typename T, RoundMode kMode>
inline __attribute__((always_inline)) void update_loop(const int8_t* __restrict w, const T* __restrict grad,
                                                      size_t begin, size_t end, int shift, const RngKey& key,
                                                      int8_t* __restrict w_new) {
  if (shift <= 0) {
    for (size_t i = begin; i < end; ++i) w_new[i] = clip_s8(int32_t{w[i]} - clip_s8(grad[i]));
    return;
  }
  if constexpr (std::is_same_v<T, int32_t>) {
    if (shift <= 31) {  // 32-bit magnitudes, as requant.cpp's round_loop
      for (size_t i = begin; i < end; ++i) {
        const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
        w_new[i] = clip_s8(int32_t{w[i]} - shift_round_one<uint32_t>(grad[i], shift, kMode, rand));
      }
      return;
    }
  }
  for (size_t i = begin; i < end; ++i) {
    const uint32_t rand = kMode == RoundMode::kSto ? random_u32(key, i) : 0;
    w_new[i] = clip_s8(int32_t{w[i]} - shift_round_one(grad[i], shift, kMode, rand));
  }
}

#define DSPTRAIN_UPDATE_LOOP(T, MODE, NAME)                                                                     \
  DSPTRAIN_CLONES void NAME(const int8_t* w, const T* g, size_t b, size_t e, int s, const RngKey& k, int8_t* out) { \
    update_loop<T, MODE>(w, g, b, e, s, k, out);                                                                 \
  }
DSPTRAIN_UPDATE_LOOP(int32_t, RoundMode::kRound, update_round_s32)
DSPTRAIN_UPDATE_LOOP(int32_t, RoundMode::kPsto, update_psto_s32)
DSPTRAIN_UPDATE_LOOP(int32_t, RoundMode::kSto, update_sto_s32)
DSPTRAIN_UPDATE_LOOP(int64_t, RoundMode::kRound, update_round_s64)
DSPTRAIN_UPDATE_LOOP(int64_t, RoundMode::kPsto, update_psto_s64)
DSPTRAIN_UPDATE_LOOP(int64_t, RoundMode::kSto, update_sto_s64)
#undef DSPTRAIN_UPDATE_LOOP

#if defined(__x86_64__) || defined(_M_X64)
// update_loop for int32 gradients in round or psto mode, shift 0..30, sixteen lanes at a
// time: the products' own rounding in registers (round_lanes.h), then the subtraction and
// the clip. The compiled loop's branches kept it at about twice memory's time: VGG-11's
// 512 x 512 x 3 x 3 update (psto), one thread, 0.68 -> 0.2 ms past the range pass.
__attribute__((target("avx512f,avx512bw"))) void update_lanes_s32(const int8_t* w, const int32_t* grad, size_t begin,
                                                                  size_t end, int shift, RoundMode mode,
                                                                  int8_t* w_new) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 m = end - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (end - i)) - 1);
    const __m512i g = _mm512_maskz_loadu_epi32(m, grad + i);
    const __m512i wv = _mm512_cvtepi8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8(m, w + i)));
    const __m512i d = _mm512_sub_epi32(wv, shift_round_lanes(g, shift, mode));
    _mm512_mask_cvtepi32_storeu_epi8(w_new + i, m, _mm512_min_epi32(_mm512_max_epi32(d, lo), hi));
  }
}
#endif

template <typename T>
using UpdateFn = void (*)(const int8_t*, const T*, size_t, size_t, int, const RngKey&, int8_t*);

UpdateFn<int32_t> update_fn(RoundMode mode, const int32_t*) {
  return mode == RoundMode::kRound ? update_round_s32 : mode == RoundMode::kPsto ? update_psto_s32 : update_sto_s32;
}
UpdateFn<int64_t> update_fn(RoundMode mode, const int64_t*) {
  return mode == RoundMode::kRound ? update_round_s64 : mode == RoundMode::kPsto ? update_psto_s64 : update_sto_s64;
}

}  // namespace

template <typename T>
void niti_update(const int8_t* w, const T* grad, size_t n, int mu, RoundMode mode, const RngKey& key,
                 int8_t* w_new) {
  const int b = range_bits(absmax(grad, n));
  if (b == 0) {  // an all-zero gradient leaves the weights as they are
    std::memcpy(w_new, w, n);
    return;
  }
  const int shift = std::max(b - mu, 0);
  const UpdateFn<T> loop = update_fn(mode, grad);
#if defined(__x86_64__) || defined(_M_X64)
  const bool lanes = std::is_same_v<T, int32_t> && mode != RoundMode::kSto && shift <= 30 && cpu_features().avx512bw;
#endif
  const int units = static_cast<int>((n + 4095) / 4096);
  parallel_ranges(units, n * (sizeof(T) + 2), [&](int u0, int u1) {
    const size_t begin = static_cast<size_t>(u0) * 4096, end = std::min(n, static_cast<size_t>(u1) * 4096);
#if defined(__x86_64__) || defined(_M_X64)
    if constexpr (std::is_same_v<T, int32_t>) {
      if (lanes) {
        update_lanes_s32(w, grad, begin, end, shift, mode, w_new);
        return;
      }
    }
#endif
    loop(w, grad, begin, end, shift, key, w_new);
  });
}

template void niti_update<int32_t>(const int8_t*, const int32_t*, size_t, int, RoundMode, const RngKey&, int8_t*);
template void niti_update<int64_t>(const int8_t*, const int64_t*, size_t, int, RoundMode, const RngKey&, int8_t*);

}  // namespace dsptrain
