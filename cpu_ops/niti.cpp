// The loss gradient is small ([batch, classes]) and runs single-threaded; NumPy's int64
// arithmetic wraps, so the wide products here use unsigned (wrapping) multiplies.
#include "niti.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "requant.h"
#include "thread_pool.h"

namespace dsptrain {
namespace {

constexpr int64_t kLog2eQ15 = 47274;  // log2(e) * 2^15
constexpr int kLossScaleBits = 11, kLossShift = 4, kTaylorBelow = -7, kMinExponent = -30;

int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t floor_div(int64_t a, int64_t b) {  // NumPy's //; b == 0 gives 0 as NumPy does
  if (b == 0) return 0;
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// w_new[i] = clip(w[i] - w_new[i]): the update, w_new holding the rounded step.
void subtract_step(const int8_t* __restrict w, size_t n, int8_t* __restrict w_new) {
  for (size_t i = 0; i < n; ++i) w_new[i] = clip_s8(int32_t{w[i]} - int32_t{w_new[i]});
}

}  // namespace

void niti_loss_grad(const int64_t* logits, int batch, int classes, int exponent, const int64_t* labels,
                    const RngKey& key, int8_t* grad) {
  const int e = std::max(exponent, kMinExponent);
  std::vector<int64_t> p(static_cast<size_t>(batch) * classes);
  std::vector<int32_t> p32(p.size());
  for (int b = 0; b < batch; ++b) {
    const int64_t* s_in = logits + static_cast<ptrdiff_t>(b) * classes;
    int64_t* row = p.data() + static_cast<ptrdiff_t>(b) * classes;
    if (e > kTaylorBelow) {
      for (int j = 0; j < classes; ++j) {
        int64_t s = s_in[j] * kLog2eQ15 / (int64_t{1} << 15);  // C division: toward zero
        s = e >= 0 ? wrap_mul(s, int64_t{1} << e) : s / (int64_t{1} << -e);
        row[j] = s;
      }
      const int64_t top = *std::max_element(row, row + classes) - 10;
      for (int j = 0; j < classes; ++j) row[j] = (int64_t{1} << std::max<int64_t>(row[j] - top, 0)) - 1;
    } else {
      for (int j = 0; j < classes; ++j) {
        const int64_t s = s_in[j];
        row[j] = wrap_add(wrap_add(int64_t{1} << (1 - 2 * e), wrap_mul(s, int64_t{1} << (1 - e))), wrap_mul(s, s));
      }
    }
    int64_t total = 0;
    for (int j = 0; j < classes; ++j) total = wrap_add(total, row[j]);
    int64_t normalised_sum = 0;
    for (int j = 0; j < classes; ++j) {
      row[j] = floor_div(wrap_mul(row[j], int64_t{1} << kLossScaleBits), total);
      normalised_sum = wrap_add(normalised_sum, row[j]);
    }
    row[labels[b]] -= normalised_sum;
  }
  for (size_t i = 0; i < p.size(); ++i) p32[i] = static_cast<int32_t>(p[i]);
  shift_round(p32.data(), p32.size(), kLossShift, RoundMode::kSto, key, grad);
}

template <typename T>
void niti_update(const int8_t* w, const T* grad, size_t n, int mu, RoundMode mode, const RngKey& key,
                 int8_t* w_new) {
  const int b = range_bits(absmax(grad, n));
  if (b == 0) {  // an all-zero gradient leaves the weights as they are
    std::memcpy(w_new, w, n);
    return;
  }
  shift_round(grad, n, std::max(b - mu, 0), mode, key, w_new);  // w_new holds the step
  // On the pool, through a function of restrict pointers so that the loop vectorises (int8
  // stores may alias anything the lambda captured).
  const int units = static_cast<int>((n + 4095) / 4096);
  parallel_ranges(units, n * 2, [&](int u0, int u1) {
    const size_t begin = static_cast<size_t>(u0) * 4096, end = std::min(n, static_cast<size_t>(u1) * 4096);
    subtract_step(w + begin, end - begin, w_new + begin);
  });
}

template void niti_update<int32_t>(const int8_t*, const int32_t*, size_t, int, RoundMode, const RngKey&, int8_t*);
template void niti_update<int64_t>(const int8_t*, const int64_t*, size_t, int, RoundMode, const RngKey&, int8_t*);

}  // namespace dsptrain
