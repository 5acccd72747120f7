// Around the int8 products: the requantizing epilogue, ReLU, max-pool, NITI's loss
// gradient and update.
#include "bindings.h"

using namespace dsptrain;
using namespace dsptrain::bind;

// ---------------------------------------------------------------- the bindings
namespace {

// ------------------------------------------------------------ epilogue
auto py_absmax(const py::handle& obj) {
  const Acc a = checked_acc("absmax", obj);
  const size_t n = a.arr.size();
  const void* p = a.arr.data();
  py::gil_scoped_release nogil;
  return a.is64 ? absmax(static_cast<const int64_t*>(p), n) : absmax(static_cast<const int32_t*>(p), n);
}

auto py_requantize(const py::handle& obj, int shift, int bits, const std::string& mode, const py::object& rng) {
  const Acc a = checked_acc("requantize", obj);
  const RoundMode rm = parse_mode("requantize", mode);
  const Rng r = parse_rng(rng);
  check_shift("requantize", shift, rm, r);
  if (bits < 2 || bits > 8) fail("requantize: bits must be in [2, 8], got " + std::to_string(bits));
  py::array_t<int8_t> out(dims(a.arr));
  int8_t* q = out.mutable_data();
  const size_t n = a.arr.size();
  const void* p = a.arr.data();
  int used;
  {
    py::gil_scoped_release nogil;
    used = a.is64 ? requantize(static_cast<const int64_t*>(p), n, shift, bits, rm, r.key, q)
                  : requantize(static_cast<const int32_t*>(p), n, shift, bits, rm, r.key, q);
  }
  if (used > 0 && rm == RoundMode::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  return py::make_tuple(out, used);
}

auto py_shift_round(const py::handle& obj, int shift, const std::string& mode, const py::object& rng) {
  const Acc a = checked_acc("shift_round", obj);
  const RoundMode rm = parse_mode("shift_round", mode);
  const Rng r = parse_rng(rng);
  check_shift("shift_round", shift, rm, r);
  py::array_t<int8_t> out(dims(a.arr));
  int8_t* q = out.mutable_data();
  const size_t n = a.arr.size();
  const void* p = a.arr.data();
  {
    py::gil_scoped_release nogil;
    if (a.is64) shift_round(static_cast<const int64_t*>(p), n, shift, rm, r.key, q);
    else shift_round(static_cast<const int32_t*>(p), n, shift, rm, r.key, q);
  }
  return out;
}

// ------------------------------------------------------------ element-wise and pooling
auto py_relu_s8(const py::handle& obj) {
  auto x = checked<int8_t>("relu_s8", "x", obj, -1);
  py::array_t<int8_t> y(dims(x));
  int8_t* p = y.mutable_data();
  py::gil_scoped_release nogil;
  relu_s8(x.data(), x.size(), p);
  return y;
}

auto py_relu_bwd_s8(const py::handle& err_obj, const py::handle& y_obj) {
  auto err = checked<int8_t>("relu_bwd_s8", "err", err_obj, -1);
  auto y = checked<int8_t>("relu_bwd_s8", "y", y_obj, -1);
  check_same("relu_bwd_s8", "err", err, "y", y);
  py::array_t<int8_t> dx(dims(err));
  int8_t* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  relu_bwd_s8(err.data(), y.data(), err.size(), p);
  return dx;
}

auto py_maxpool_s8(const py::handle& obj, int kernel, int stride) {
  return maxpool_forward<int8_t>("maxpool_s8", obj, kernel, stride, maxpool_s8);
}

auto py_maxpool_bwd_s8(const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride,
                             std::pair<int, int> in_hw) {
  auto err = checked<int8_t>("maxpool_bwd_s8", "err", err_obj, 4);
  auto idx = checked<uint8_t>("maxpool_bwd_s8", "argmax", idx_obj, 4);
  check_positive("maxpool_bwd_s8", "kernel", kernel);
  check_positive("maxpool_bwd_s8", "stride", stride);
  check_same("maxpool_bwd_s8", "err", err, "argmax", idx);
  const PoolShape s{int(err.shape(0)), in_hw.first, in_hw.second, int(err.shape(3)), kernel, stride};
  if (in_hw.first < kernel || in_hw.second < kernel || s.oh() != err.shape(1) || s.ow() != err.shape(2))
    fail_pool_err_vs_in_hw("maxpool_bwd_s8", err, in_hw, kernel, stride);
  const uint8_t* ip = idx.data();
  // A max reduction vectorises; the loop that names the value runs only on failure. The
  // size is read once: idx.size() multiplies the shape out on every call, which kept the
  // loop scalar (3 ms of a VGG-11 step at one thread).
  const py::ssize_t count = idx.size();
  uint8_t top = 0;
  for (py::ssize_t i = 0; i < count; ++i) top = std::max(top, ip[i]);
  for (py::ssize_t i = 0; top >= kernel * kernel && i < count; ++i)
    if (ip[i] >= kernel * kernel) fail("maxpool_bwd_s8: argmax value " + std::to_string(ip[i]) + " is outside the " +
                                       std::to_string(kernel) + "x" + std::to_string(kernel) + " window");
  py::array_t<int8_t> dx(std::vector<py::ssize_t>{s.n, s.h, s.w, s.c});
  int8_t* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  maxpool_bwd_s8(err.data(), ip, s, p);
  return dx;
}

// ------------------------------------------------------------ NITI loss and update
auto py_niti_loss_grad_s8(const py::handle& logits_obj, int exponent, const py::handle& labels_obj,
                                const py::object& rng) {
  const char* op = "niti_loss_grad_s8";
  if (!py::isinstance<py::array>(logits_obj) || py::reinterpret_borrow<py::array>(logits_obj).dtype().kind() != 'i')
    fail(std::string(op) + ": logits must be a signed integer array");
  auto logits = Array<int64_t>::ensure(logits_obj);
  if (logits.ndim() != 2) fail(std::string(op) + ": logits must be [batch, classes], got " + shape_str(logits));
  auto labels = Array<int64_t>::ensure(labels_obj);
  if (!labels || labels.ndim() != 1 || labels.shape(0) != logits.shape(0))
    fail(std::string(op) + ": labels must be [batch] with batch " + std::to_string(logits.shape(0)));
  const int batch = int(logits.shape(0)), classes = int(logits.shape(1));
  for (int i = 0; i < batch; ++i)
    if (labels.data()[i] < 0 || labels.data()[i] >= classes)
      fail(std::string(op) + ": label " + std::to_string(labels.data()[i]) + " at row " + std::to_string(i) +
           " is outside [0, " + std::to_string(classes) + ")");
  const Rng r = parse_rng(rng);
  if (!r.given) fail("stochastic rounding needs an RngKey");
  py::array_t<int8_t> out(std::vector<py::ssize_t>{batch, classes});
  int8_t* p = out.mutable_data();
  py::gil_scoped_release nogil;
  niti_loss_grad(logits.data(), batch, classes, exponent, labels.data(), r.key, p);
  return out;
}

auto py_niti_update_s8(const py::handle& w_obj, const py::handle& g_obj, int mu, const std::string& mode,
                             const py::object& rng) {
  auto w = checked<int8_t>("niti_update_s8", "w", w_obj, -1);
  const Acc g = checked_acc("niti_update_s8", g_obj);
  check_same("niti_update_s8", "w", w, "grad", g.arr);
  const RoundMode rm = parse_mode("niti_update_s8", mode);
  const Rng r = parse_rng(rng);
  if (rm == RoundMode::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  py::array_t<int8_t> out(dims(w));
  int8_t* p = out.mutable_data();
  const size_t n = w.size();
  const void* gp = g.arr.data();
  py::gil_scoped_release nogil;
  if (g.is64) niti_update(w.data(), static_cast<const int64_t*>(gp), n, mu, rm, r.key, p);
  else niti_update(w.data(), static_cast<const int32_t*>(gp), n, mu, rm, r.key, p);
  return out;
}

}  // namespace

void dsptrain::bind::def_int8_elementwise(py::module_& m) {
  m.def("absmax", &py_absmax, py::arg("acc"));
  m.def("requantize", &py_requantize, py::arg("acc"), py::arg("shift"), py::arg("bits"), py::arg("mode"),
        py::arg("rng"), "Range estimate (shift < 0) and shift_round in one call: (int8, shift).");
  m.def("shift_round", &py_shift_round, py::arg("acc"), py::arg("shift"), py::arg("mode"), py::arg("rng"),
        "numerics.shift_round by exactly `shift` (no saturation check): int8.");
  m.def("relu_s8", &py_relu_s8, py::arg("x"));
  m.def("relu_bwd_s8", &py_relu_bwd_s8, py::arg("err"), py::arg("y"));
  m.def("maxpool_s8", &py_maxpool_s8, py::arg("x"), py::arg("kernel"), py::arg("stride"));
  m.def("maxpool_bwd_s8", &py_maxpool_bwd_s8, py::arg("err"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"),
        py::arg("in_hw"));
  m.def("niti_loss_grad_s8", &py_niti_loss_grad_s8, py::arg("logits"), py::arg("exponent"), py::arg("labels"),
        py::arg("rng"));
  m.def("niti_update_s8", &py_niti_update_s8, py::arg("w"), py::arg("grad"), py::arg("mu"), py::arg("mode"),
        py::arg("rng"));
}
