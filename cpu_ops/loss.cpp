// The loss gradient is small ([batch, classes]) and runs single-threaded; NumPy's int64
// arithmetic wraps, so the wide products here use unsigned (wrapping) multiplies.
#include "loss.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "requant.h"

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

}  // namespace dsptrain
