// WAGEUBN's integer batch norm (bn_grid.h). Serial: its cost is a few passes over the
// activation, small beside the products around it.
#include "bn_grid.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dsptrain {
namespace {

int ceil_log2(double t) {   // exact (float_ops.ceil_log2)
  int e = 0;
  const double m = std::frexp(t, &e);
  return m == 0.5 ? e - 1 : e;
}

// The step of a `bits`-bit power-of-two grid covering `top` (> 0), and one value on it.
double grid_step(double top, int bits) { return std::ldexp(1.0, ceil_log2(top) - (bits - 1)); }

double on_step(double v, double step, int bits) {
  const double qmax = std::ldexp(1.0, bits - 1) - 1;
  const double q = std::min(std::floor(std::fabs(v) / step + 0.5), qmax);
  return q == 0.0 ? 0.0 : (v < 0 ? -q : q) * step;
}

void on_grid(std::vector<double>& v, int bits) {
  double top = 0.0;
  for (double a : v) top = std::max(top, std::fabs(a));
  if (top == 0.0) {
    std::fill(v.begin(), v.end(), 0.0);
    return;
  }
  const double step = grid_step(top, bits);
  for (double& a : v) a = on_step(a, step, bits);
}

std::vector<double> gridded(const float* p, size_t n, int bits) {
  std::vector<double> v(p, p + n);
  on_grid(v, bits);
  return v;
}

}  // namespace

void bn_fwd_grid_f32(const float* x, size_t rows, size_t channels, const float* gamma, const float* beta,
                     const float* mean, const float* var, bool training, double momentum, double eps, int stat_bits,
                     int affine_bits, float* y, float* xhat, float* inv_std, float* new_mean, float* new_var) {
  const size_t c = channels;
  std::vector<double> mu(c, 0.0), sigma2(c, 0.0), inv(c);
  if (training) {
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < c; ++j) mu[j] += x[r * c + j];
    for (double& m : mu) m /= double(rows);
    on_grid(mu, stat_bits);
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < c; ++j) {
        const double d = x[r * c + j] - mu[j];
        sigma2[j] += d * d;
      }
    for (double& s : sigma2) s /= double(rows);
    on_grid(sigma2, stat_bits);
    // the judge's (1 - momentum) * running is NumPy's float32 product (a Python float times a
    // float32 array), the batch's share float64
    const float keep = static_cast<float>(1 - momentum);
    for (size_t j = 0; j < c; ++j) {
      const double unbiased = sigma2[j] * double(rows) / double(std::max<size_t>(rows, 2) - 1);
      new_mean[j] = static_cast<float>(double(keep * mean[j]) + momentum * mu[j]);
      new_var[j] = static_cast<float>(double(keep * var[j]) + momentum * unbiased);
    }
  } else {
    for (size_t j = 0; j < c; ++j) {
      mu[j] = mean[j];
      sigma2[j] = var[j];
      new_mean[j] = mean[j];
      new_var[j] = var[j];
    }
  }
  for (size_t j = 0; j < c; ++j) inv[j] = 1.0 / std::sqrt(sigma2[j] + eps);
  on_grid(inv, stat_bits);
  for (size_t j = 0; j < c; ++j) inv_std[j] = static_cast<float>(inv[j]);
  double top = 0.0;   // x-hat's grid: the whole tensor's range, then each value on it
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) top = std::max(top, std::fabs((x[r * c + j] - mu[j]) * inv[j]));
  const double step = top == 0.0 ? 1.0 : grid_step(top, stat_bits);
  const std::vector<double> g = gridded(gamma, c, affine_bits), b = gridded(beta, c, affine_bits);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) {
      const double h = top == 0.0 ? 0.0 : on_step((x[r * c + j] - mu[j]) * inv[j], step, stat_bits);
      xhat[r * c + j] = static_cast<float>(h);
      y[r * c + j] = static_cast<float>(g[j] * h + b[j]);
    }
}

void bn_bwd_grid_f32(const float* err, const float* xhat, const float* inv_std, const float* gamma, size_t rows,
                     size_t channels, int error_bits, int affine_bits, float* dx, float* d_gamma, float* d_beta) {
  const size_t c = channels, n = rows * channels;
  double top = 0.0;
  for (size_t i = 0; i < n; ++i) top = std::max(top, std::fabs(double(err[i])));
  const double step = top == 0.0 ? 1.0 : grid_step(top, error_bits);
  std::vector<double> e(n), db(c, 0.0), dg(c, 0.0);
  for (size_t i = 0; i < n; ++i) e[i] = top == 0.0 ? 0.0 : on_step(err[i], step, error_bits);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) db[j] += e[r * c + j];
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) dg[j] += e[r * c + j] * double(xhat[r * c + j]);
  const std::vector<double> g = gridded(gamma, c, affine_bits);
  const double count = double(rows);
  for (size_t j = 0; j < c; ++j) {
    d_gamma[j] = static_cast<float>(dg[j]);
    d_beta[j] = static_cast<float>(db[j]);
  }
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) {
      const size_t at = r * c + j;
      dx[at] = static_cast<float>(g[j] * double(inv_std[j]) / count * (count * e[at] - db[j] -
                                                                         double(xhat[at]) * dg[j]));
    }
}

}  // namespace dsptrain
