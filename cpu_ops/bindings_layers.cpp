// The mobile CNNs' layers (layers_f32.h): activations, squeeze-excitation's product,
// channel concat / slice / pad / shuffle (any dtype: int8 recipes move channels too).
#include <cstring>

#include "bindings.h"
#include "bn_grid.h"
#include "layers_f32.h"
#include "pool_pad_f32.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

ActFn parse_fn(const char* op, const std::string& name, const std::vector<double>& params) {
  static const std::pair<const char*, int> kNames[] = {{"clip", 2}, {"hardsigmoid", 2}, {"hardswish", 0},
                                                       {"sigmoid", 0}, {"silu", 0}, {"tanh", 0}};
  for (int i = 0; i < 6; ++i) {
    if (name != kNames[i].first) continue;
    if (int(params.size()) != kNames[i].second)
      fail(std::string(op) + ": " + name + " takes " + std::to_string(kNames[i].second) + " params, got " +
           std::to_string(params.size()));
    return static_cast<ActFn>(i);
  }
  fail(std::string(op) + ": activation '" + name + "' is not one of clip, hardsigmoid, hardswish, sigmoid, silu, tanh");
}

double param(const std::vector<double>& p, size_t i) { return i < p.size() ? p[i] : 0.0; }

// Any-dtype image (N, H, W, C), C-contiguous.
py::array image(const char* op, const char* name, const py::handle& obj) {
  if (!py::isinstance<py::array>(obj)) fail(std::string(op) + ": " + name + " must be a numpy array");
  auto a = py::array::ensure(obj, py::array::c_style);
  if (a.ndim() < 1) fail(std::string(op) + ": " + name + " must have a channel dimension, got a scalar");
  return a;
}

size_t rows_of(const py::array& a) { return a.ndim() ? size_t(a.size() / a.shape(a.ndim() - 1)) : 1; }
size_t channels_of(const py::array& a) { return size_t(a.shape(a.ndim() - 1)); }

py::array like(const py::array& a, size_t channels) {
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
  shape.back() = py::ssize_t(channels);
  return py::array(a.dtype(), shape);
}

// (images, pixels, channels) of x and whether g scales channels (g (N, 1, 1, C)) or matches x.
std::tuple<size_t, size_t, size_t, bool> mul_shape(const char* op, const Array<float>& x, const Array<float>& g) {
  const size_t c = channels_of(x), images = x.ndim() ? size_t(x.shape(0)) : 1;
  if (g.ndim() == x.ndim() && std::equal(g.shape(), g.shape() + g.ndim(), x.shape()))
    return {images, rows_of(x) / std::max<size_t>(images, 1), c, false};
  bool per_channel = x.ndim() == 4 && g.ndim() == 4 && g.shape(0) == x.shape(0) && g.shape(1) == 1 &&
                     g.shape(2) == 1 && g.shape(3) == x.shape(3);
  if (!per_channel)
    fail(std::string(op) + ": g " + shape_str(g) + " is neither x's shape " + shape_str(x) + " nor (N, 1, 1, C)");
  return {images, size_t(x.shape(1) * x.shape(2)), c, true};
}

// ---------------------------------------------------------------- the bindings

auto py_act_f32(const py::handle& obj, const std::string& fn, const std::vector<double>& params) {
  auto x = checked<float>("act_f32", "x", obj, -1);
  const ActFn f = parse_fn("act_f32", fn, params);
  py::array_t<float> y(dims(x));
  float* p = y.mutable_data();
  py::gil_scoped_release nogil;
  act_f32(x.data(), x.size(), f, param(params, 0), param(params, 1), p);
  return y;
}

auto py_act_bwd_f32(const py::handle& err_obj, const py::handle& x_obj, const std::string& fn,
                          const std::vector<double>& params) {
  auto err = checked<float>("act_bwd_f32", "err", err_obj, -1);
  auto x = checked<float>("act_bwd_f32", "x", x_obj, -1);
  check_same("act_bwd_f32", "err", err, "x", x);
  const ActFn f = parse_fn("act_bwd_f32", fn, params);
  py::array_t<float> dx(dims(x));
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  act_bwd_f32(err.data(), x.data(), x.size(), f, param(params, 0), param(params, 1), p);
  return dx;
}

auto py_mul_f32(const py::handle& x_obj, const py::handle& g_obj) {
  auto x = checked<float>("mul_f32", "x", x_obj, -1);
  auto g = checked<float>("mul_f32", "g", g_obj, -1);
  auto [images, pixels, c, per_channel] = mul_shape("mul_f32", x, g);
  py::array_t<float> y(dims(x));
  float* p = y.mutable_data();
  py::gil_scoped_release nogil;
  mul_f32(x.data(), g.data(), images, pixels, c, per_channel, p);
  return y;
}

auto py_mul_bwd_f32(const py::handle& err_obj, const py::handle& x_obj, const py::handle& g_obj) {
  auto err = checked<float>("mul_bwd_f32", "err", err_obj, -1);
  auto x = checked<float>("mul_bwd_f32", "x", x_obj, -1);
  auto g = checked<float>("mul_bwd_f32", "g", g_obj, -1);
  check_same("mul_bwd_f32", "err", err, "x", x);
  auto [images, pixels, c, per_channel] = mul_shape("mul_bwd_f32", x, g);
  py::array_t<float> dx(dims(x)), dg(dims(g));
  float *pdx = dx.mutable_data(), *pdg = dg.mutable_data();
  {
    py::gil_scoped_release nogil;
    mul_bwd_f32(err.data(), x.data(), g.data(), images, pixels, c, per_channel, pdx, pdg);
  }
  return py::make_tuple(dx, dg);
}

auto py_concat_channels(const std::vector<py::handle>& objs) {
  if (objs.empty()) fail("concat_channels: no parts");
  std::vector<py::array> parts;
  std::vector<const uint8_t*> data;
  std::vector<size_t> widths;
  size_t total = 0;
  for (size_t i = 0; i < objs.size(); ++i) {
    parts.push_back(image("concat_channels", "part", objs[i]));
    const py::array& a = parts.back();
    if (!a.dtype().is(parts[0].dtype()) || a.ndim() != parts[0].ndim() ||
        !std::equal(a.shape(), a.shape() + a.ndim() - 1, parts[0].shape()))
      fail("concat_channels: part " + std::to_string(i) + " " + shape_str(a) + " does not match part 0 " +
           shape_str(parts[0]) + " but for its channels");
    data.push_back(static_cast<const uint8_t*>(a.data()));
    widths.push_back(channels_of(a));
    total += widths.back();
  }
  py::array out = like(parts[0], total);
  auto* p = static_cast<uint8_t*>(out.mutable_data());
  const size_t rows = rows_of(parts[0]), elem = size_t(parts[0].itemsize());
  py::gil_scoped_release nogil;
  concat_channels(data.data(), widths.data(), int(data.size()), rows, elem, p);
  return out;
}

auto py_slice_channels(const py::handle& obj, int start, int stop) {
  py::array x = image("slice_channels", "x", obj);
  const int c = int(channels_of(x));
  if (start < 0 || stop > c || start >= stop)
    fail("slice_channels: [" + std::to_string(start) + ", " + std::to_string(stop) + ") is not inside " +
         std::to_string(c) + " channels");
  py::array out = like(x, size_t(stop - start));
  auto* p = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(x.data());
  const size_t rows = rows_of(x), elem = size_t(x.itemsize());
  py::gil_scoped_release nogil;
  slice_channels(src, rows, size_t(c), size_t(start), size_t(stop - start), elem, p);
  return out;
}

auto py_pad_channels(const py::handle& obj, int start, int channels) {
  py::array err = image("pad_channels", "err", obj);
  const int w = int(channels_of(err));
  if (start < 0 || start + w > channels)
    fail("pad_channels: " + std::to_string(w) + " channels at " + std::to_string(start) + " do not fit " +
         std::to_string(channels));
  py::array out = like(err, size_t(channels));
  auto* p = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(err.data());
  const size_t rows = rows_of(err), elem = size_t(err.itemsize());
  py::gil_scoped_release nogil;
  pad_channels(src, rows, size_t(w), size_t(start), size_t(channels), elem, p);
  return out;
}

auto py_channel_shuffle(const py::handle& obj, int groups) {
  py::array x = image("channel_shuffle", "x", obj);
  const int c = int(channels_of(x));
  if (groups < 1 || c % groups)
    fail("channel_shuffle: " + std::to_string(groups) + " groups do not divide " + std::to_string(c) + " channels");
  py::array out = like(x, size_t(c));
  auto* p = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(x.data());
  const size_t rows = rows_of(x), elem = size_t(x.itemsize());
  py::gil_scoped_release nogil;
  channel_shuffle(src, rows, size_t(c), size_t(groups), elem, p);
  return out;
}

auto py_bn_fwd_f32(const py::handle& x_obj, const py::handle& g_obj, const py::handle& b_obj,
                         const py::handle& m_obj, const py::handle& v_obj, bool training, double momentum, double eps) {
  auto x = checked<float>("bn_fwd_f32", "x", x_obj, -1);
  const size_t c = x.ndim() ? channels_of(x) : 0, rows = x.ndim() ? rows_of(x) : 0;
  Array<float> p[4];
  const char* names[4] = {"gamma", "beta", "mean", "var"};
  const py::handle objs[4] = {g_obj, b_obj, m_obj, v_obj};
  for (int i = 0; i < 4; ++i) {
    p[i] = checked<float>("bn_fwd_f32", names[i], objs[i], 1);
    if (size_t(p[i].shape(0)) != c)
      fail(std::string("bn_fwd_f32: ") + names[i] + " " + shape_str(p[i]) + " does not match " + std::to_string(c) +
           " channels of x " + shape_str(x));
  }
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<float> y(dims(x)), xhat(dims(x)), inv(cs), mean(cs), var(cs);
  float *py_ = y.mutable_data(), *ph = xhat.mutable_data(), *pi = inv.mutable_data(), *pm = mean.mutable_data(),
        *pv = var.mutable_data();
  {
    py::gil_scoped_release nogil;
    bn_fwd_f32(x.data(), rows, c, p[0].data(), p[1].data(), p[2].data(), p[3].data(), training, momentum, eps, py_,
               ph, pi, pm, pv);
  }
  return py::make_tuple(y, xhat, inv, mean, var);
}

auto py_bn_bwd_f32(const py::handle& e_obj, const py::handle& h_obj, const py::handle& i_obj,
                         const py::handle& g_obj) {
  auto err = checked<float>("bn_bwd_f32", "err", e_obj, -1);
  auto xhat = checked<float>("bn_bwd_f32", "xhat", h_obj, -1);
  check_same("bn_bwd_f32", "err", err, "xhat", xhat);
  auto inv = checked<float>("bn_bwd_f32", "inv_std", i_obj, 1);
  auto gamma = checked<float>("bn_bwd_f32", "gamma", g_obj, 1);
  const size_t c = channels_of(err), rows = rows_of(err);
  if (size_t(inv.shape(0)) != c || size_t(gamma.shape(0)) != c)
    fail("bn_bwd_f32: inv_std " + shape_str(inv) + " or gamma " + shape_str(gamma) + " does not match err " +
         shape_str(err));
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<float> dx(dims(err)), dg(cs), db(cs);
  float *px = dx.mutable_data(), *pg = dg.mutable_data(), *pb = db.mutable_data();
  {
    py::gil_scoped_release nogil;
    bn_bwd_f32(err.data(), xhat.data(), inv.data(), gamma.data(), rows, c, px, pg, pb);
  }
  return py::make_tuple(dx, dg, db);
}

auto py_channel_mean_f32(const py::handle& obj) {
  auto x = checked<float>("channel_mean_f32", "x", obj, 4);
  const size_t n = size_t(x.shape(0)), pixels = size_t(x.shape(1) * x.shape(2)), c = size_t(x.shape(3));
  py::array_t<float> out(std::vector<py::ssize_t>{py::ssize_t(n), py::ssize_t(c)});
  float* p = out.mutable_data();
  py::gil_scoped_release nogil;
  channel_mean_f32(x.data(), n, pixels, c, p);
  return out;
}

auto py_channel_sum_f32(const py::handle& obj) {
  auto x = checked<float>("channel_sum_f32", "x", obj, -1);
  const size_t c = channels_of(x), rows = rows_of(x);
  py::array_t<float> out(std::vector<py::ssize_t>{py::ssize_t(c)});
  float* p = out.mutable_data();
  py::gil_scoped_release nogil;
  channel_sum_f32(x.data(), rows, c, p);
  return out;
}

auto py_add_f32(const py::handle& a_obj, const py::handle& b_obj) {
  auto a = checked<float>("add_f32", "a", a_obj, -1);
  auto b = checked<float>("add_f32", "b", b_obj, -1);
  check_same("add_f32", "a", a, "b", b);
  py::array_t<float> y(dims(a));
  float* p = y.mutable_data();
  py::gil_scoped_release nogil;
  add_f32(a.data(), b.data(), a.size(), p);
  return y;
}

auto py_bn_fwd_grid_f32(const py::handle& x_obj, const py::handle& g_obj, const py::handle& b_obj,
                        const py::handle& m_obj, const py::handle& v_obj, bool training, double momentum, double eps,
                        int stat_bits, int affine_bits) {
  const char* op = "bn_fwd_grid_f32";
  auto x = checked<float>(op, "x", x_obj, -1);
  const size_t c = x.ndim() ? channels_of(x) : 0, rows = x.ndim() ? rows_of(x) : 0;
  if (stat_bits < 2 || stat_bits > 24 || affine_bits < 2 || affine_bits > 24)
    fail(std::string(op) + ": grid bits " + std::to_string(stat_bits) + ", " + std::to_string(affine_bits) +
         " must be in 2..24");
  Array<float> p[4];
  const char* names[4] = {"gamma", "beta", "mean", "var"};
  const py::handle objs[4] = {g_obj, b_obj, m_obj, v_obj};
  for (int i = 0; i < 4; ++i) {
    p[i] = checked<float>(op, names[i], objs[i], 1);
    if (size_t(p[i].shape(0)) != c)
      fail(std::string(op) + ": " + names[i] + " " + shape_str(p[i]) + " does not match " + std::to_string(c) +
           " channels of x " + shape_str(x));
  }
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<float> y(dims(x)), xhat(dims(x)), inv(cs), mean(cs), var(cs);
  float *py_ = y.mutable_data(), *ph = xhat.mutable_data(), *pi = inv.mutable_data(), *pm = mean.mutable_data(),
        *pv = var.mutable_data();
  {
    py::gil_scoped_release nogil;
    bn_fwd_grid_f32(x.data(), rows, c, p[0].data(), p[1].data(), p[2].data(), p[3].data(), training, momentum, eps,
                    stat_bits, affine_bits, py_, ph, pi, pm, pv);
  }
  return py::make_tuple(y, xhat, inv, mean, var);
}

auto py_bn_bwd_grid_f32(const py::handle& e_obj, const py::handle& h_obj, const py::handle& i_obj,
                        const py::handle& g_obj, int error_bits, int affine_bits) {
  const char* op = "bn_bwd_grid_f32";
  auto err = checked<float>(op, "err", e_obj, -1);
  auto xhat = checked<float>(op, "xhat", h_obj, -1);
  check_same(op, "err", err, "xhat", xhat);
  auto inv = checked<float>(op, "inv_std", i_obj, 1);
  auto gamma = checked<float>(op, "gamma", g_obj, 1);
  const size_t c = err.ndim() ? channels_of(err) : 0, rows = err.ndim() ? rows_of(err) : 0;
  if (size_t(inv.shape(0)) != c || size_t(gamma.shape(0)) != c)
    fail(std::string(op) + ": inv_std " + shape_str(inv) + " and gamma " + shape_str(gamma) + " must have the " +
         std::to_string(c) + " channels of err " + shape_str(err));
  if (error_bits < 2 || error_bits > 24 || affine_bits < 2 || affine_bits > 24)
    fail(std::string(op) + ": grid bits " + std::to_string(error_bits) + ", " + std::to_string(affine_bits) +
         " must be in 2..24");
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<float> dx(dims(err)), dg(cs), db(cs);
  float *pd = dx.mutable_data(), *pg = dg.mutable_data(), *pb = db.mutable_data();
  {
    py::gil_scoped_release nogil;
    bn_bwd_grid_f32(err.data(), xhat.data(), inv.data(), gamma.data(), rows, c, error_bits, affine_bits, pd, pg, pb);
  }
  return py::make_tuple(dx, dg, db);
}

auto py_dropout_apply_f32(const py::handle& x_obj, const py::handle& keep_obj, double p) {
  auto x = checked<float>("dropout_apply_f32", "x", x_obj, -1);
  auto keep = checked<bool>("dropout_apply_f32", "keep", keep_obj, -1);
  check_same("dropout_apply_f32", "x", x, "keep", keep);
  if (!(p >= 0 && p < 1)) fail("dropout_apply_f32: p " + std::to_string(p) + " is not in [0, 1)");
  py::array_t<float> y(dims(x));
  float* out = y.mutable_data();
  const float share = static_cast<float>(1 - p);   // the judge's np.float32(1 - p)
  py::gil_scoped_release nogil;
  dropout_apply_f32(x.data(), keep.data(), size_t(x.size()), share, out);
  return y;
}

auto py_bias_add_f32(const py::handle& y_obj, const py::handle& b_obj) {
  auto y = checked<float>("bias_add_f32", "y", y_obj, -1);
  auto b = checked<float>("bias_add_f32", "b", b_obj, 1);
  const size_t c = channels_of(y);
  if (size_t(b.shape(0)) != c)
    fail("bias_add_f32: b has " + std::to_string(b.shape(0)) + " values, y has " + std::to_string(c) + " channels");
  py::array_t<float> out(dims(y));   // y + b in a new array, as the judge returns
  float* p = out.mutable_data();
  std::memcpy(p, y.data(), size_t(y.size()) * sizeof(float));
  py::gil_scoped_release nogil;
  bias_add_f32(p, b.data(), rows_of(y), c);
  return out;
}

auto py_channel_mean_bwd_f32(const py::handle& err_obj, std::pair<int, int> hw) {
  auto err = checked<float>("channel_mean_bwd_f32", "err", err_obj, -1);
  const size_t c = channels_of(err), n = rows_of(err);
  if (hw.first < 1 || hw.second < 1 || (err.ndim() != 2 && err.ndim() != 4) ||
      (err.ndim() == 4 && (err.shape(1) != 1 || err.shape(2) != 1)))
    fail("channel_mean_bwd_f32: err must be (N, C) or (N, 1, 1, C) and the image at least 1x1, got err " +
         shape_str(err) + " and " + std::to_string(hw.first) + "x" + std::to_string(hw.second));
  py::array_t<float> dx(std::vector<py::ssize_t>{py::ssize_t(n), hw.first, hw.second, py::ssize_t(c)});
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  channel_mean_bwd_f32(err.data(), n, size_t(hw.first) * size_t(hw.second), c, p);
  return dx;
}

auto py_softmax_xent_grad_f32(const py::handle& logits_obj, const py::handle& labels_obj, double divisor) {
  auto logits = checked<float>("softmax_xent_grad_f32", "logits", logits_obj, 2);
  auto labels = checked<int64_t>("softmax_xent_grad_f32", "labels", labels_obj, 1);
  const size_t rows = size_t(logits.shape(0)), classes = size_t(logits.shape(1));
  if (size_t(labels.shape(0)) != rows || classes < 1 || !(divisor > 0))
    fail("softmax_xent_grad_f32: logits " + shape_str(logits) + " need one label a row (got " + shape_str(labels) +
         ") and a divisor > 0 (got " + std::to_string(divisor) + ")");
  const int64_t* l = labels.data();
  for (size_t r = 0; r < rows; ++r)
    if (l[r] < 0 || size_t(l[r]) >= classes)
      fail("softmax_xent_grad_f32: label " + std::to_string(l[r]) + " of row " + std::to_string(r) + " is not in [0, " +
           std::to_string(classes) + ")");
  py::array_t<float> grad(dims(logits));
  float* p = grad.mutable_data();
  py::gil_scoped_release nogil;
  softmax_xent_grad_f32(logits.data(), l, rows, classes, divisor, p);
  return grad;
}

PadPoolShape pad_pool_shape(const char* op, size_t n, std::pair<int, int> in_hw, size_t c, std::pair<int, int> out_hw,
                            int kernel, int stride, int pad) {
  const auto [h, w] = in_hw;
  const auto [oh, ow] = out_hw;
  if (kernel < 1 || kernel > 15 || stride < 1 || pad < 0 || pad >= kernel || h < 1 || w < 1 || oh < 1 || ow < 1 ||
      long(oh - 1) * stride - pad >= h || long(ow - 1) * stride - pad >= w)
    fail(std::string(op) + ": kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) + ", pad " +
         std::to_string(pad) + " do not make " + std::to_string(oh) + "x" + std::to_string(ow) + " windows that start on a " +
         std::to_string(h) + "x" + std::to_string(w) + " image (kernel 1-15, pad < kernel)");
  return {n, size_t(h), size_t(w), c, size_t(oh), size_t(ow), kernel, stride, pad};
}

auto py_maxpool_pad_f32(const py::handle& obj, int kernel, int stride, int pad, std::pair<int, int> out_hw) {
  auto x = checked<float>("maxpool_pad_f32", "x", obj, 4);
  const auto s = pad_pool_shape("maxpool_pad_f32", size_t(x.shape(0)), {int(x.shape(1)), int(x.shape(2))},
                                size_t(x.shape(3)), out_hw, kernel, stride, pad);
  std::vector<py::ssize_t> shape{py::ssize_t(s.n), py::ssize_t(s.oh), py::ssize_t(s.ow), py::ssize_t(s.c)};
  py::array_t<float> y(shape);
  py::array_t<uint8_t> idx(shape);
  float* py_ = y.mutable_data();
  uint8_t* pi = idx.mutable_data();
  {
    py::gil_scoped_release nogil;
    maxpool_pad_f32(x.data(), s, py_, pi);
  }
  return py::make_tuple(y, idx);
}

auto py_maxpool_pad_bwd_f32(const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride, int pad,
                            std::pair<int, int> in_hw) {
  auto err = checked<float>("maxpool_pad_bwd_f32", "err", err_obj, 4);
  auto idx = checked<uint8_t>("maxpool_pad_bwd_f32", "argmax", idx_obj, 4);
  check_same("maxpool_pad_bwd_f32", "err", err, "argmax", idx);
  const auto s = pad_pool_shape("maxpool_pad_bwd_f32", size_t(err.shape(0)), in_hw, size_t(err.shape(3)),
                                {int(err.shape(1)), int(err.shape(2))}, kernel, stride, pad);
  py::array_t<float> dx(std::vector<py::ssize_t>{py::ssize_t(s.n), py::ssize_t(s.h), py::ssize_t(s.w), py::ssize_t(s.c)});
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  maxpool_pad_bwd_f32(err.data(), idx.data(), s, p);
  return dx;
}

}  // namespace

void dsptrain::bind::def_layers(py::module_& m) {
  m.def("act_f32", &py_act_f32, py::arg("x"), py::arg("function"), py::arg("params"), "nn.Nonlinearity's function of x, float32.");
  m.def("act_bwd_f32", &py_act_bwd_f32, py::arg("err"), py::arg("x"), py::arg("function"), py::arg("params"), "d input of act_f32 (PyTorch's).");
  m.def("mul_f32", &py_mul_f32, py::arg("x"), py::arg("g"), "x * g, g of x's shape or (N, 1, 1, C).");
  m.def("mul_bwd_f32", &py_mul_bwd_f32, py::arg("err"), py::arg("x"), py::arg("g"), "(err * g, d g summed over H, W when g scales channels).");
  m.def("concat_channels", &py_concat_channels, py::arg("parts"), "NHWC images joined along channels (any dtype).");
  m.def("slice_channels", &py_slice_channels, py::arg("x"), py::arg("start"), py::arg("stop"), "Channels [start, stop), contiguous.");
  m.def("pad_channels", &py_pad_channels, py::arg("err"), py::arg("start"), py::arg("channels"), "err at channels [start, start + C) of zeros.");
  m.def("channel_shuffle", &py_channel_shuffle, py::arg("x"), py::arg("groups"), "ShuffleNet's channel shuffle.");
  m.def("bn_fwd_f32", &py_bn_fwd_f32, py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("mean"), py::arg("var"), py::arg("training"),
     py::arg("momentum"), py::arg("eps"), "(y, xhat, inv_std, new running mean, new running var).");
  m.def("bn_bwd_f32", &py_bn_bwd_f32, py::arg("err"), py::arg("xhat"), py::arg("inv_std"), py::arg("gamma"), "(d x, d gamma, d beta).");
  m.def("bn_fwd_grid_f32", &py_bn_fwd_grid_f32, py::arg("x"), py::arg("gamma"), py::arg("beta"), py::arg("mean"),
        py::arg("var"), py::arg("training"), py::arg("momentum"), py::arg("eps"), py::arg("stat_bits"),
        py::arg("affine_bits"), "bn_fwd_f32 with WAGEUBN's grids: (y, xhat, inv_std, new mean, new var).");
  m.def("bn_bwd_grid_f32", &py_bn_bwd_grid_f32, py::arg("err"), py::arg("xhat"), py::arg("inv_std"), py::arg("gamma"),
        py::arg("error_bits"), py::arg("affine_bits"), "bn_bwd_f32 with WAGEUBN's grids: (d x, d gamma, d beta).");
  m.def("channel_mean_f32", &py_channel_mean_f32, py::arg("x"), "The mean of each image's channels over H and W: (N, C).");
  m.def("channel_sum_f32", &py_channel_sum_f32, py::arg("x"), "Each channel summed over every other axis (a bias gradient).");
  m.def("add_f32", &py_add_f32, py::arg("a"), py::arg("b"), "a + b, float32.");
  m.def("dropout_apply_f32", &py_dropout_apply_f32, py::arg("x"), py::arg("keep"), py::arg("p"),
        "x / (1 - p) where keep, else 0, float32: dropout's forward and backward.");
  m.def("bias_add_f32", &py_bias_add_f32, py::arg("y"), py::arg("b"), "y + b over the last axis, float32.");
  m.def("softmax_xent_grad_f32", &py_softmax_xent_grad_f32, py::arg("logits"), py::arg("labels"), py::arg("divisor"),
        "(softmax(logits) - onehot(labels)) / divisor, float32: the float recipes' loss gradient.");
  m.def("channel_mean_bwd_f32", &py_channel_mean_bwd_f32, py::arg("err"), py::arg("in_hw"),
        "The global average pool's input error: err (N, C) / (H * W) at every pixel, (N, H, W, C).");
  m.def("maxpool_pad_f32", &py_maxpool_pad_f32, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("pad"),
        py::arg("out_hw"), "Max-pool with -inf padding (and ceil_mode's windows): (y, argmax).");
  m.def("maxpool_pad_bwd_f32", &py_maxpool_pad_bwd_f32, py::arg("err"), py::arg("argmax"), py::arg("kernel"),
        py::arg("stride"), py::arg("pad"), py::arg("in_hw"), "The input error of maxpool_pad_f32, (N, H, W, C).");
}
