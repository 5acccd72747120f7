// The only file that includes pybind11: it turns the plain C++ kernels of cpu_ops/
// into the `dsptrain._cpu_ops` module. Here, and only here, arguments are checked
// (a user error is a ValueError naming the argument and its value), arrays are made
// contiguous, outputs allocated, and the GIL released around every kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "conv.h"
#include "conv_cols.h"
#include "cpu_features.h"
#include "eltwise.h"
#include "eltwise_f32.h"
#include "gemm.h"
#include "gemm_exact.h"
#include "loss.h"
#include "pool.h"
#include "pool_f32.h"
#include "quant.h"
#include "requant.h"
#include "scratch.h"
#include "thread_pool.h"
#include "threefry.h"
#include "update_f32.h"
#include "update.h"

namespace py = pybind11;
using namespace dsptrain;

namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

std::string shape_str(const py::array& a) {
  std::ostringstream s;
  s << "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s << (i ? ", " : "") << a.shape(i);
  s << (a.ndim() == 1 ? ",)" : ")");
  return s.str();
}

[[noreturn]] void fail(const std::string& msg) { throw py::value_error(msg); }

// `obj` as a C-contiguous array of exactly dtype T (never a silent cast) with `ndim` dims.
template <typename T>
Array<T> checked(const char* op, const char* name, const py::handle& obj, int ndim) {
  if (!py::isinstance<py::array>(obj)) fail(std::string(op) + ": " + name + " must be a numpy array");
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array_t<T>>(a))
    fail(std::string(op) + ": " + name + " must be " + std::string(py::str(py::dtype::of<T>())) + ", got " +
         std::string(py::str(a.dtype())));
  if (ndim >= 0 && a.ndim() != ndim)
    fail(std::string(op) + ": " + name + " must have " + std::to_string(ndim) + " dims, got shape " + shape_str(a));
  return Array<T>::ensure(a);
}

// Accumulators may be int32 or int64: which one is in `is64`.
struct Acc {
  py::array arr;
  bool is64;
};
Acc checked_acc(const char* op, const py::handle& obj) {
  if (py::isinstance<py::array_t<int32_t>>(obj)) return {checked<int32_t>(op, "acc", obj, -1), false};
  if (py::isinstance<py::array_t<int64_t>>(obj)) return {checked<int64_t>(op, "acc", obj, -1), true};
  fail(std::string(op) + ": acc must be int32 or int64, got " +
       (py::isinstance<py::array>(obj) ? std::string(py::str(py::reinterpret_borrow<py::array>(obj).dtype()))
                                        : std::string(py::str(py::type::of(obj)))));
}

double conv_macs(const ConvShape& s) { return double(s.n) * s.oh() * s.ow() * s.o * s.kh * s.kw * s.c; }

bool needs_int64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }

std::vector<py::ssize_t> dims(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

RoundMode parse_mode(const char* op, const std::string& mode) {
  if (mode == "round") return RoundMode::kRound;
  if (mode == "psto") return RoundMode::kPsto;
  if (mode == "sto") return RoundMode::kSto;
  fail(std::string(op) + ": rounding mode '" + mode + "' is not one of round, psto, sto");
}

// rng: None or (seed, step, tensor_id, offset); Python ints are reduced mod 2^32.
struct Rng {
  RngKey key;
  bool given = false;
};
Rng parse_rng(const py::object& rng) {
  Rng r;
  if (rng.is_none()) return r;
  auto t = rng.cast<py::tuple>();
  auto u32 = [](const py::handle& v) {  // Python's `v & 0xFFFFFFFF`, negatives included
    return static_cast<uint32_t>(py::reinterpret_borrow<py::object>(v).attr("__and__")(0xFFFFFFFFu).cast<uint64_t>());
  };
  r.key.seed = u32(t[0]);
  r.key.step = u32(t[1]);
  r.key.tensor_id = u32(t[2]);
  r.key.offset = u32(t[3]);
  r.given = true;
  return r;
}

void check_shift(const char* op, int shift, RoundMode mode, const Rng& rng) {
  if (shift > 62) fail(std::string(op) + ": shift " + std::to_string(shift) + " is larger than 62");
  if (shift > 0 && mode == RoundMode::kSto && !rng.given) fail("stochastic rounding needs an RngKey");
}

void check_positive(const char* op, const char* name, int v) {
  if (v <= 0) fail(std::string(op) + ": " + name + " must be positive, got " + std::to_string(v));
}

// ---------------------------------------------------------------- convolutions
ConvShape conv_shape(const char* op, const py::array& x, const py::array& w, int stride, int pad) {
  check_positive(op, "stride", stride);
  if (pad < 0) fail(std::string(op) + ": pad must be >= 0, got " + std::to_string(pad));
  ConvShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)),
              int(w.shape(0)), int(w.shape(1)), int(w.shape(2)), stride, pad};
  if (w.shape(3) != s.c)
    fail(std::string(op) + ": weight shape " + shape_str(w) + " does not match input channels " + std::to_string(s.c));
  if (s.h + 2 * pad < s.kh || s.w + 2 * pad < s.kw)
    fail(std::string(op) + ": kernel " + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
         " is larger than the padded input " + std::to_string(s.h + 2 * pad) + "x" + std::to_string(s.w + 2 * pad));
  return s;
}

// Runs `kernel(T* out)` into a fresh int32/int64 array of `shape`, GIL released.
template <typename Kernel>
py::array run_acc(bool is64, const std::vector<py::ssize_t>& shape, Kernel kernel) {
  if (is64) {
    py::array_t<int64_t> out(shape);
    int64_t* p = out.mutable_data();
    py::gil_scoped_release nogil;
    kernel(p);
    return out;
  }
  py::array_t<int32_t> out(shape);
  int32_t* p = out.mutable_data();
  py::gil_scoped_release nogil;
  kernel(p);
  return out;
}

// Runs `kernel(T* acc, int64_t* absmax)` into per-thread scratch, then requantizes into
// int8 `shape` (with the kernel's own max |acc| when it took one: absmax >= 0).
template <typename Kernel>
py::tuple run_requant(bool is64, const std::vector<py::ssize_t>& shape, int shift, RoundMode mode, const Rng& rng,
                      Kernel kernel) {
  py::array_t<int8_t> out(shape);
  int8_t* q = out.mutable_data();
  const size_t n = static_cast<size_t>(out.size());
  int used;
  {
    py::gil_scoped_release nogil;
    if (is64) {
      thread_local Kept<std::vector<int64_t>> acc;
      if (acc.size() < n) acc.resize(n);
      int64_t absmax = -1;
      kernel(acc.data(), &absmax);
      used = requantize(acc.data(), n, shift, 8, mode, rng.key, q, absmax);
    } else {
      thread_local Kept<std::vector<int32_t>> acc;
      if (acc.size() < n) acc.resize(n);
      int64_t absmax = -1;
      kernel(acc.data(), &absmax);
      used = requantize(acc.data(), n, shift, 8, mode, rng.key, q, absmax);
    }
  }
  return py::make_tuple(out, used);
}

struct GemmArgs {
  Array<int8_t> a, b;
  int m, n, k;
};
GemmArgs gemm_args(const char* op, const py::handle& a_obj, const py::handle& b_obj) {
  auto a = checked<int8_t>(op, "a", a_obj, 2);
  auto b = checked<int8_t>(op, "b", b_obj, 2);
  if (a.shape(1) != b.shape(1))
    fail(std::string(op) + ": a " + shape_str(a) + " and b " + shape_str(b) + " differ in K (a @ b.T)");
  return {a, b, int(a.shape(0)), int(b.shape(0)), int(a.shape(1))};
}

template <typename T>
void gemm_any(const GemmArgs& g, T* c, int64_t* absmax = nullptr) {  // absmax: int32 only
  MatrixS8 a{g.a.data(), g.k, 1}, b{g.b.data(), g.k, 1};
  if constexpr (std::is_same_v<T, int64_t>) gemm_s8_s64(a, b, g.m, g.n, g.k, c);
  else gemm_s8_s32(a, b, g.m, g.n, g.k, c, false, absmax);
}

struct ConvArgs {
  Array<int8_t> x, w;
  ConvShape s;
};

ConvArgs bwd_data_args(const char* op, const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                       std::pair<int, int> in_hw) {
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  check_positive(op, "in_hw height", in_hw.first);
  check_positive(op, "in_hw width", in_hw.second);
  py::array_t<int8_t> x_like(std::vector<py::ssize_t>{1, in_hw.first, in_hw.second, w.shape(3)});
  ConvShape s = conv_shape(op, x_like, w, stride, pad);
  s.n = int(err.shape(0));
  if (err.shape(1) != s.oh() || err.shape(2) != s.ow() || err.shape(3) != s.o)
    fail(std::string(op) + ": err shape " + shape_str(err) + " does not match in_hw (" + std::to_string(s.h) + ", " +
         std::to_string(s.w) + "), weights " + shape_str(w) + ", stride " + std::to_string(stride) + ", pad " +
         std::to_string(pad));
  return {err, w, s};
}

// ---------------------------------------------------------------- packed weights
struct PackedWeights {
  PackedB packed;
};


// ---------------------------------------------------------------- float recipes
FloatRound parse_float_mode(const char* op, const std::string& mode) {
  if (mode == "round") return FloatRound::kRound;
  if (mode == "nearest_even") return FloatRound::kNearestEven;
  if (mode == "sto") return FloatRound::kSto;
  fail(std::string(op) + ": rounding mode '" + mode + "' is not one of round, nearest_even, sto");
}

bool is_f64(const py::handle& obj) { return py::isinstance<py::array_t<double>>(obj); }

template <typename F>
py::array quantize_any(const Array<F>& x, double step, int bits, FloatRound mode, const Rng& r) {
  const int qmax = (1 << (bits - 1)) - 1;
  const size_t n = x.size();
  const F* p = x.data();
  if (bits <= 8) {
    py::array_t<int8_t> q(dims(x));
    int8_t* out = q.mutable_data();
    py::gil_scoped_release nogil;
    quantize_float(p, n, step, qmax, mode, r.key, out);
    return std::move(q);
  }
  py::array_t<int16_t> q(dims(x));
  int16_t* out = q.mutable_data();
  py::gil_scoped_release nogil;
  quantize_float(p, n, step, qmax, mode, r.key, out);
  return std::move(q);
}

void check_same(const char* op, const char* a_name, const py::array& a, const char* b_name, const py::array& b) {
  if (dims(a) != dims(b)) fail(std::string(op) + ": " + a_name + " " + shape_str(a) + " and " + b_name + " " + shape_str(b) + " differ in shape");
}

PoolShape pool_shape(const char* op, const py::array& x, int kernel, int stride) {
  check_positive(op, "kernel", kernel);
  check_positive(op, "stride", stride);
  if (kernel > 16) fail(std::string(op) + ": kernel " + std::to_string(kernel) + " does not fit a uint8 argmax");
  const PoolShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)), kernel, stride};
  if (s.h < kernel || s.w < kernel) fail(std::string(op) + ": kernel " + std::to_string(kernel) + " is larger than x " + shape_str(x));
  return s;
}

void def_float_recipe_ops(py::module_& m) {
  m.def("absmax_f", [](const py::handle& obj) {
    if (is_f64(obj)) {
      auto x = checked<double>("absmax_f", "x", obj, -1);
      py::gil_scoped_release nogil;
      return absmax_float(x.data(), x.size());
    }
    auto x = checked<float>("absmax_f", "x", obj, -1);
    py::gil_scoped_release nogil;
    return absmax_float(x.data(), x.size());
  }, py::arg("x"), "max |x| of a float32/float64 array, as a Python float.");
  m.def("quantize_f", [](const py::handle& obj, double step, int bits, const std::string& mode, const py::object& rng) {
    const FloatRound fm = parse_float_mode("quantize_f", mode);
    const Rng r = parse_rng(rng);
    if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
    if (bits < 2 || bits > 16) fail("quantize_f: bits must be in [2, 16], got " + std::to_string(bits));
    if (!(step > 0)) fail("quantize_f: step must be > 0, got " + std::to_string(step));
    if (is_f64(obj)) return quantize_any(checked<double>("quantize_f", "x", obj, -1), step, bits, fm, r);
    return quantize_any(checked<float>("quantize_f", "x", obj, -1), step, bits, fm, r);
  }, py::arg("x"), py::arg("step"), py::arg("bits"), py::arg("mode"), py::arg("rng"),
     "clip(round(x / step), +-(2**(bits-1) - 1)): int8 for bits <= 8, else int16.");
  m.def("dequantize", [](const py::handle& obj, double scale) {
    const Acc a = checked_acc("dequantize", obj);
    py::array_t<float> out(dims(a.arr));
    float* p = out.mutable_data();
    const size_t n = a.arr.size();
    const void* src = a.arr.data();
    py::gil_scoped_release nogil;
    if (a.is64) dequantize(static_cast<const int64_t*>(src), n, scale, p);
    else dequantize(static_cast<const int32_t*>(src), n, scale, p);
    return out;
  }, py::arg("acc"), py::arg("scale"), "float32(double(acc) * scale).");
  m.def("prc_squared_errors", [](const py::handle& obj, double top, std::vector<double> ratios, int qmax) {
    auto x = checked<float>("prc_squared_errors", "x", obj, -1);
    std::vector<double> errors(ratios.size());
    {
      py::gil_scoped_release nogil;
      prc_squared_errors(x.data(), x.size(), top, ratios.data(), static_cast<int>(ratios.size()), qmax, errors.data());
    }
    return errors;
  }, py::arg("x"), py::arg("top"), py::arg("ratios"), py::arg("qmax"));
  m.def("quantize_mls", [](const py::handle& obj, int group, double top, double tensor_scale, int kmax, int qmax,
                           const std::string& mode, const py::object& rng) {
    auto x = checked<float>("quantize_mls", "x", obj, -1);
    const FloatRound fm = parse_float_mode("quantize_mls", mode);
    const Rng r = parse_rng(rng);
    if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
    const int channels = x.ndim() ? int(x.shape(x.ndim() - 1)) : 1;
    if (group < 1 || channels % group) fail("quantize_mls: group " + std::to_string(group) + " does not divide " + std::to_string(channels) + " channels");
    if (kmax < 0 || qmax * (1LL << kmax) > 32767) fail("quantize_mls: qmax " + std::to_string(qmax) + " * 2**" + std::to_string(kmax) + " does not fit int16");
    py::array_t<int16_t> out(dims(x));
    int16_t* p = out.mutable_data();
    const size_t rows = channels ? x.size() / channels : 0;
    py::gil_scoped_release nogil;
    quantize_mls(x.data(), rows, channels, group, top, tensor_scale, kmax, qmax, fm, r.key, p);
    return out;
  }, py::arg("x"), py::arg("group"), py::arg("top"), py::arg("tensor_scale"), py::arg("kmax"), py::arg("qmax"),
     py::arg("mode"), py::arg("rng"), "MLS elements with their group shift applied (int16).");

  m.def("round_float", [](const py::handle& obj, int exponent_bits, int mantissa_bits, const std::string& mode,
                          const py::object& rng) {
    const FloatRound fm = parse_float_mode("round_float", mode);
    const Rng r = parse_rng(rng);
    if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
    if (exponent_bits < 2 || exponent_bits > 8 || mantissa_bits < 0 || mantissa_bits > 23)
      fail("round_float: format 1-" + std::to_string(exponent_bits) + "-" + std::to_string(mantissa_bits) + " is not a float32 subset");
    auto run = [&](auto x) {
      py::array_t<float> out(dims(x));
      float* p = out.mutable_data();
      py::gil_scoped_release nogil;
      round_float_grid(x.data(), x.size(), exponent_bits, mantissa_bits, fm, r.key, p);
      return out;
    };
    if (is_f64(obj)) return run(checked<double>("round_float", "x", obj, -1));
    return run(checked<float>("round_float", "x", obj, -1));
  }, py::arg("x"), py::arg("exponent_bits"), py::arg("mantissa_bits"), py::arg("mode"), py::arg("rng"),
     "x on a small-float grid (FP8, FP16), as float32.");
  m.def("relu_f32", [](const py::handle& obj) {
    auto x = checked<float>("relu_f32", "x", obj, -1);
    py::array_t<float> y(dims(x));
    float* p = y.mutable_data();
    py::gil_scoped_release nogil;
    relu_f32(x.data(), x.size(), p);
    return y;
  }, py::arg("x"));
  m.def("relu_bwd_f32", [](const py::handle& err_obj, const py::handle& y_obj) {
    auto err = checked<float>("relu_bwd_f32", "err", err_obj, -1);
    auto y = checked<float>("relu_bwd_f32", "y", y_obj, -1);
    check_same("relu_bwd_f32", "err", err, "y", y);
    py::array_t<float> dx(dims(err));
    float* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    relu_bwd_f32(err.data(), y.data(), err.size(), p);
    return dx;
  }, py::arg("err"), py::arg("y"));
  m.def("compensation_fwd", [](const py::handle& z_obj, const py::handle& s_obj, const py::handle& b_obj) {
    auto z = checked<float>("compensation_fwd", "z", z_obj, -1);
    auto scale = checked<float>("compensation_fwd", "scale", s_obj, 1);
    auto shift = checked<float>("compensation_fwd", "shift", b_obj, 1);
    const int c = z.ndim() ? int(z.shape(z.ndim() - 1)) : 0;
    if (scale.shape(0) != c || shift.shape(0) != c)
      fail("compensation_fwd: scale " + shape_str(scale) + " and shift " + shape_str(shift) + " must have z's " + std::to_string(c) + " channels");
    py::array_t<float> y(dims(z));
    float* p = y.mutable_data();
    py::gil_scoped_release nogil;
    compensation_fwd(z.data(), scale.data(), shift.data(), c ? z.size() / c : 0, c, p);
    return y;
  }, py::arg("z"), py::arg("scale"), py::arg("shift"));
  m.def("compensation_bwd", [](const py::handle& e_obj, const py::handle& z_obj, const py::handle& s_obj) {
    auto err = checked<float>("compensation_bwd", "err", e_obj, -1);
    auto z = checked<float>("compensation_bwd", "z", z_obj, -1);
    auto scale = checked<float>("compensation_bwd", "scale", s_obj, 1);
    check_same("compensation_bwd", "err", err, "z", z);
    const int c = z.ndim() ? int(z.shape(z.ndim() - 1)) : 0;
    if (scale.shape(0) != c) fail("compensation_bwd: scale " + shape_str(scale) + " must have z's " + std::to_string(c) + " channels");
    py::array_t<float> dz(dims(z)), ds(std::vector<py::ssize_t>{c}), db(std::vector<py::ssize_t>{c});
    float *pz = dz.mutable_data(), *ps = ds.mutable_data(), *pb = db.mutable_data();
    {
      py::gil_scoped_release nogil;
      compensation_bwd(err.data(), z.data(), scale.data(), c ? z.size() / c : 0, c, pz, ps, pb);
    }
    return py::make_tuple(dz, ds, db);
  }, py::arg("err"), py::arg("z"), py::arg("scale"));
  m.def("maxpool_f32", [](const py::handle& obj, int kernel, int stride) {
    auto x = checked<float>("maxpool_f32", "x", obj, 4);
    const PoolShape s = pool_shape("maxpool_f32", x, kernel, stride);
    std::vector<py::ssize_t> shape{s.n, s.oh(), s.ow(), s.c};
    py::array_t<float> y(shape);
    py::array_t<uint8_t> idx(shape);
    float* yp = y.mutable_data();
    uint8_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release nogil;
      maxpool_f32(x.data(), s, yp, ip);
    }
    return py::make_tuple(y, idx);
  }, py::arg("x"), py::arg("kernel"), py::arg("stride"));
  m.def("maxpool_bwd_f32", [](const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride,
                              std::pair<int, int> in_hw) {
    auto err = checked<float>("maxpool_bwd_f32", "err", err_obj, 4);
    auto idx = checked<uint8_t>("maxpool_bwd_f32", "argmax", idx_obj, 4);
    check_same("maxpool_bwd_f32", "err", err, "argmax", idx);
    py::array_t<float> x_like(std::vector<py::ssize_t>{err.shape(0), in_hw.first, in_hw.second, err.shape(3)});
    const PoolShape s = pool_shape("maxpool_bwd_f32", x_like, kernel, stride);
    if (s.oh() != err.shape(1) || s.ow() != err.shape(2))
      fail("maxpool_bwd_f32: err " + shape_str(err) + " does not match in_hw (" + std::to_string(in_hw.first) + ", " +
           std::to_string(in_hw.second) + "), kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride));
    py::array_t<float> dx(dims(x_like));
    float* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    maxpool_bwd_f32(err.data(), idx.data(), s, p);
    return dx;
  }, py::arg("err"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"), py::arg("in_hw"));
  m.def("sgd_f32", [](const py::handle& w_obj, const py::handle& g_obj, const py::handle& v_obj, float lr, float momentum,
                      float weight_decay, bool nesterov) {
    auto w = checked<float>("sgd_f32", "w", w_obj, -1);
    auto g = checked<float>("sgd_f32", "grad", g_obj, -1);
    auto v = checked<float>("sgd_f32", "v", v_obj, -1);
    check_same("sgd_f32", "w", w, "grad", g);
    check_same("sgd_f32", "w", w, "v", v);
    py::array_t<float> w_new(dims(w)), v_new(dims(w));
    float *pw = w_new.mutable_data(), *pv = v_new.mutable_data();
    {
      py::gil_scoped_release nogil;
      std::copy(w.data(), w.data() + w.size(), pw);
      std::copy(v.data(), v.data() + v.size(), pv);
      sgd_f32(pw, g.data(), pv, w.size(), lr, momentum, weight_decay, nesterov);
    }
    return py::make_tuple(w_new, v_new);
  }, py::arg("w"), py::arg("grad"), py::arg("v"), py::arg("lr"), py::arg("momentum"), py::arg("weight_decay"),
     py::arg("nesterov"), "PyTorch's SGD step in float32: (new w, new velocity).");
  m.def("matmul_s16", [](const py::handle& a_obj, const py::handle& b_obj, bool a_transposed) {
    auto a = checked<int16_t>("matmul_s16", "a", a_obj, 2);
    auto b = checked<int16_t>("matmul_s16", "b", b_obj, 2);
    const int m = int(a.shape(a_transposed ? 1 : 0)), k = int(a.shape(a_transposed ? 0 : 1)), n = int(b.shape(1));
    if (b.shape(0) != k)
      fail("matmul_s16: a " + shape_str(a) + (a_transposed ? " (transposed)" : "") + " and b " + shape_str(b) +
           " differ in K (op(a) @ b, b is [K, N])");
    py::array_t<int64_t> c(std::vector<py::ssize_t>{m, n});
    int64_t* p = c.mutable_data();
    py::gil_scoped_release nogil;
    matmul_s16_s64(a.data(), a_transposed, b.data(), m, n, k, p);
    return c;
  }, py::arg("a"), py::arg("b"), py::arg("a_transposed"),
     "int16 (a.T if a_transposed else a) @ b[K,N] -> int64 [M,N], exact.");
  m.def("im2col", [](const py::handle& obj, int kh, int kw, int stride, int pad) {
    check_positive("im2col", "stride", stride);
    check_positive("im2col", "kh", kh);
    check_positive("im2col", "kw", kw);
    auto run = [&](auto x) {
      using T = typename decltype(x)::value_type;
      const int n = int(x.shape(0)), h = int(x.shape(1)), w = int(x.shape(2)), c = int(x.shape(3));
      const int oh = (h + 2 * pad - kh) / stride + 1, ow = (w + 2 * pad - kw) / stride + 1;
      if (pad < 0 || oh < 1 || ow < 1)
        fail("im2col: kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " does not fit x " + shape_str(x) +
             " padded by " + std::to_string(pad));
      const Col2imShape s{n, oh, ow, kh, kw, c, h, w, stride, pad};
      py::array_t<T> cols(std::vector<py::ssize_t>{static_cast<py::ssize_t>(n) * oh * ow, static_cast<py::ssize_t>(kh) * kw * c});
      T* p = cols.mutable_data();
      py::gil_scoped_release nogil;
      im2col_copy(x.data(), s, p);
      return cols;
    };
    if (py::isinstance<py::array_t<int16_t>>(obj)) return py::array(run(checked<int16_t>("im2col", "x", obj, 4)));
    return py::array(run(checked<float>("im2col", "x", obj, 4)));
  }, py::arg("x"), py::arg("kh"), py::arg("kw"), py::arg("stride"), py::arg("pad"),
     "NHWC int16/float32 -> [N*OH*OW, KH*KW*C] patches (zero padding), its own dtype.");
  m.def("col2im", [](const py::handle& obj, std::vector<int> err_nhw, std::vector<int> kernel_hwc, int stride, int pad,
                     std::pair<int, int> in_hw) {
    if (err_nhw.size() != 3 || kernel_hwc.size() != 3)
      fail("col2im: err_nhw must be (n, oh, ow) and kernel_hwc (kh, kw, c)");
    check_positive("col2im", "stride", stride);
    const Col2imShape s{err_nhw[0], err_nhw[1], err_nhw[2], kernel_hwc[0], kernel_hwc[1], kernel_hwc[2],
                        in_hw.first, in_hw.second, stride, pad};
    auto run = [&](auto dcols) {
      using T = typename decltype(dcols)::value_type;
      if (dcols.shape(0) != static_cast<py::ssize_t>(s.n) * s.oh * s.ow || dcols.shape(1) != static_cast<py::ssize_t>(s.kh) * s.kw * s.c)
        fail("col2im: dcols " + shape_str(dcols) + " is not [n*oh*ow, kh*kw*c] of the given shapes");
      py::array_t<T> dx(std::vector<py::ssize_t>{s.n, s.h, s.w, s.c});
      T* p = dx.mutable_data();
      py::gil_scoped_release nogil;
      col2im_add(dcols.data(), s, p);
      return dx;
    };
    if (py::isinstance<py::array_t<int64_t>>(obj)) return py::array(run(checked<int64_t>("col2im", "dcols", obj, 2)));
    return py::array(run(checked<double>("col2im", "dcols", obj, 2)));
  }, py::arg("dcols"), py::arg("err_nhw"), py::arg("kernel_hwc"), py::arg("stride"), py::arg("pad"), py::arg("in_hw"),
     "Scatter-add patch sums (int64 or float64) onto NHWC: a convolution's backward data.");
  m.def("matmul_fp16_chunked", [](const py::handle& a_obj, const py::handle& b_obj, bool a_transposed, int chunk,
                                  bool fp16_adds) {
    auto a = checked<float>("matmul_fp16_chunked", "a", a_obj, 2);
    auto b = checked<float>("matmul_fp16_chunked", "b", b_obj, 2);
    const int m = int(a.shape(a_transposed ? 1 : 0)), k = int(a.shape(a_transposed ? 0 : 1)), n = int(b.shape(1));
    if (b.shape(0) != k)
      fail("matmul_fp16_chunked: a " + shape_str(a) + (a_transposed ? " (transposed)" : "") + " and b " + shape_str(b) +
           " differ in K (op(a) @ b, b is [K, N])");
    check_positive("matmul_fp16_chunked", "chunk", chunk);
    py::array_t<float> c(std::vector<py::ssize_t>{m, n});
    float* p = c.mutable_data();
    py::gil_scoped_release nogil;
    if (k == 0) std::fill(p, p + static_cast<size_t>(m) * n, 0.0f);
    else matmul_fp16_chunked(a.data(), a_transposed, b.data(), m, n, k, chunk, fp16_adds, p);
    return c;
  }, py::arg("a"), py::arg("b"), py::arg("a_transposed"), py::arg("chunk"), py::arg("fp16_adds"),
     "FP16 values (a.T if a_transposed else a) @ b[K,N] with chunk-based FP16 accumulation, as float32.");
}

}  // namespace

PYBIND11_MODULE(_cpu_ops, m) {
  m.doc() = "dsptrain native CPU kernels";

  // ------------------------------------------------------------ machine
  m.def("cpu_features", [] {
    const auto f = detect_cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["avx_vnni"] = f.avx_vnni;
    d["avx512_vnni"] = f.avx512_vnni;
    d["amx_int8"] = f.amx_int8;
    d["neon"] = f.neon;
    d["neon_dotprod"] = f.neon_dotprod;
    return d;
  }, "The SIMD features of this CPU, as the kernels see them.");
  m.def("supported_isas", [] {
    std::vector<std::string> out;
    for (Isa isa : {Isa::kAmx, Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kAvx2, Isa::kNeonDot, Isa::kScalar})
      if (isa_supported(isa)) out.push_back(isa_name(isa));
    return out;
  }, "GEMM paths this build and CPU can run, fastest first.");
  m.def("isa", [] { return std::string(isa_name(active_isa())); }, "The GEMM path in use.");
  m.def("set_isa", [](const std::string& name) {
    Isa isa;
    if (!isa_from_name(name, &isa)) fail("unknown ISA '" + name + "'; choose amx, avx512vnni, avxvnni, avx2, neon or scalar");
    if (!isa_supported(isa)) fail("ISA '" + name + "' is not supported by this CPU or build");
    set_active_isa(isa);
  }, py::arg("name"), "Force a GEMM path (DSPTRAIN_CPU_ISA).");
  m.def("threads", &pool_threads, "Threads the kernels run on.");
  m.def("set_threads", &set_thread_limit, py::arg("threads"),
        "Caps the kernels' threads (1 .. the pool's size); returns the cap in force.");
  m.def("serial_below_macs", &serial_below_macs, "Products smaller than this many MACs run single-threaded.");
  m.def("set_serial_below_macs", &set_serial_below_macs, py::arg("macs"));

  // ------------------------------------------------------------ RNG (for tests)
  m.def("threefry2x32", [](uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
    const auto r = threefry2x32_20(k0, k1, c0, c1);
    return py::make_tuple(r.x0, r.x1);
  }, "Threefry-2x32-20 of one counter: (word0, word1).");
  m.def("random_u32", [](const py::object& rng, size_t count) {
    const Rng r = parse_rng(rng);
    py::array_t<uint32_t> out(count);
    uint32_t* p = out.mutable_data();
    for (size_t i = 0; i < count; ++i) p[i] = random_u32(r.key, i);
    return out;
  }, py::arg("rng"), py::arg("count"), "numerics.random_u32 for rng=(seed, step, tensor_id, offset).");

  // ------------------------------------------------------------ GEMM
  m.def("gemm_s8", [](const py::handle& a, const py::handle& b) {
    const GemmArgs g = gemm_args("gemm_s8", a, b);
    SerialScope serial(small_op(double(g.m) * g.n * g.k));
    return run_acc(needs_int64(g.k), {g.m, g.n}, [&](auto* c) { gemm_any(g, c); });
  }, py::arg("a"), py::arg("b"), "int8 a[M,K] @ b[N,K].T -> int32 (int64 for long K).");

  py::class_<PackedWeights>(m, "PackedWeights", "b[N,K] packed for the GEMM path that was active when packed.")
      .def_property_readonly("isa", [](const PackedWeights& p) { return std::string(isa_name(p.packed.isa)); })
      .def_property_readonly("shape", [](const PackedWeights& p) { return py::make_tuple(p.packed.n, p.packed.k); })
      .def_property_readonly("nbytes", [](const PackedWeights& p) { return p.packed.data.size(); });
  m.def("pack_weights", [](const py::handle& b_obj) {
    auto b = checked<int8_t>("pack_weights", "b", b_obj, 2);
    if (needs_int64(b.shape(1)))
      fail("pack_weights: K = " + std::to_string(b.shape(1)) + " needs int64 accumulators; use gemm_s8");
    auto out = std::make_unique<PackedWeights>();
    {
      py::gil_scoped_release nogil;
      pack_b(MatrixS8{b.data(), b.shape(1), 1}, int(b.shape(0)), int(b.shape(1)), active_isa(), &out->packed);
    }
    return out;
  }, py::arg("b"), "Pack weights b[N,K] once for gemm_packed.");
  m.def("gemm_packed", [](const py::handle& a_obj, const PackedWeights& pw) {
    auto a = checked<int8_t>("gemm_packed", "a", a_obj, 2);
    if (a.shape(1) != pw.packed.k)
      fail("gemm_packed: a " + shape_str(a) + " has K != packed weights' K " + std::to_string(pw.packed.k));
    py::array_t<int32_t> out(std::vector<py::ssize_t>{a.shape(0), pw.packed.n});
    int32_t* c = out.mutable_data();
    py::gil_scoped_release nogil;
    gemm_packed(MatrixS8{a.data(), a.shape(1), 1}, int(a.shape(0)), pw.packed, c, pw.packed.n);
    return out;
  }, py::arg("a"), py::arg("packed"), "a[M,K] @ packed^T -> int32.");
  m.def("gemm_requant_s8", [](const py::handle& a, const py::handle& b, int shift, const std::string& mode,
                              const py::object& rng) {
    const GemmArgs g = gemm_args("gemm_requant_s8", a, b);
    const RoundMode rm = parse_mode("gemm_requant_s8", mode);
    const Rng r = parse_rng(rng);
    check_shift("gemm_requant_s8", shift, rm, r);
    SerialScope serial(small_op(double(g.m) * g.n * g.k));
    return run_requant(needs_int64(g.k), {g.m, g.n}, shift, rm, r, [&](auto* c, int64_t* mx) { gemm_any(g, c, mx); });
  }, py::arg("a"), py::arg("b"), py::arg("shift"), py::arg("mode"), py::arg("rng"),
     "gemm_s8 then requantize (shift < 0: estimate it). Returns (int8, shift).");

  // ------------------------------------------------------------ convolutions
  m.def("conv2d_s8", [](const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
    auto x = checked<int8_t>("conv2d_s8", "x", x_obj, 4);
    auto w = checked<int8_t>("conv2d_s8", "w", w_obj, 4);
    const ConvShape s = conv_shape("conv2d_s8", x, w, stride, pad);
    SerialScope serial(small_op(conv_macs(s)));
    return run_acc(needs_int64(s.kh * s.kw * s.c), {s.n, s.oh(), s.ow(), s.o},
                   [&](auto* y) { conv2d_fwd(x.data(), w.data(), s, y); });
  }, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"));
  m.def("conv2d_requant_s8", [](const py::handle& x_obj, const py::handle& w_obj, int stride, int pad, int shift,
                                const std::string& mode, const py::object& rng) {
    auto x = checked<int8_t>("conv2d_requant_s8", "x", x_obj, 4);
    auto w = checked<int8_t>("conv2d_requant_s8", "w", w_obj, 4);
    const ConvShape s = conv_shape("conv2d_requant_s8", x, w, stride, pad);
    const RoundMode rm = parse_mode("conv2d_requant_s8", mode);
    const Rng r = parse_rng(rng);
    check_shift("conv2d_requant_s8", shift, rm, r);
    SerialScope serial(small_op(conv_macs(s)));
    return run_requant(needs_int64(s.kh * s.kw * s.c), {s.n, s.oh(), s.ow(), s.o}, shift, rm, r,
                       [&](auto* y, int64_t* mx) { conv2d_fwd(x.data(), w.data(), s, y, mx); });
  }, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"), py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("conv2d_bwd_data_s8", [](const py::handle& err, const py::handle& w, int stride, int pad,
                                 std::pair<int, int> in_hw) {
    const ConvArgs c = bwd_data_args("conv2d_bwd_data_s8", err, w, stride, pad, in_hw);
    SerialScope serial(small_op(conv_macs(c.s)));
    return run_acc(needs_int64(c.s.o * c.s.kh * c.s.kw), {c.s.n, c.s.h, c.s.w, c.s.c},
                   [&](auto* dx) { conv2d_bwd_data(c.x.data(), c.w.data(), c.s, dx); });
  }, py::arg("err"), py::arg("w"), py::arg("stride"), py::arg("pad"), py::arg("in_hw"));
  m.def("conv2d_bwd_data_requant_s8", [](const py::handle& err, const py::handle& w, int stride, int pad,
                                         std::pair<int, int> in_hw, int shift, const std::string& mode,
                                         const py::object& rng) {
    const ConvArgs c = bwd_data_args("conv2d_bwd_data_requant_s8", err, w, stride, pad, in_hw);
    const RoundMode rm = parse_mode("conv2d_bwd_data_requant_s8", mode);
    const Rng r = parse_rng(rng);
    check_shift("conv2d_bwd_data_requant_s8", shift, rm, r);
    SerialScope serial(small_op(conv_macs(c.s)));
    return run_requant(needs_int64(c.s.o * c.s.kh * c.s.kw), {c.s.n, c.s.h, c.s.w, c.s.c}, shift, rm, r,
                       [&](auto* dx, int64_t* mx) { conv2d_bwd_data(c.x.data(), c.w.data(), c.s, dx, mx); });
  }, py::arg("err"), py::arg("w"), py::arg("stride"), py::arg("pad"), py::arg("in_hw"), py::arg("shift"),
     py::arg("mode"), py::arg("rng"));
  m.def("conv_algorithm", [](const std::string& pass, const py::handle& x_obj, const py::handle& w_obj, int stride,
                             int pad) {
    auto x = checked<int8_t>("conv_algorithm", "x", x_obj, 4);
    auto w = checked<int8_t>("conv_algorithm", "w", w_obj, 4);
    const ConvShape s = conv_shape("conv_algorithm", x, w, stride, pad);
    if (pass == "forward") return std::string(conv_algorithm(ConvPass::kForward, s));
    if (pass == "backward_data") return std::string(conv_algorithm(ConvPass::kBackwardData, s));
    if (pass == "backward_weight") return std::string(conv_algorithm(ConvPass::kBackwardWeight, s));
    fail("conv_algorithm: pass '" + pass + "' is not one of forward, backward_data, backward_weight");
  }, py::arg("pass_"), py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
     "The algorithm a convolution pass of this shape runs on the active ISA (for tests).");
  m.def("scratch_bytes", [](const std::string& pass, std::vector<int> shape, bool requant) {
    // shape: (n, h, w, c, o, kh, kw, stride, pad) of a convolution pass, or (m, n, k) of a gemm.
    ScratchList items;
    if (pass == "gemm" && shape.size() == 3) items = gemm_scratch(shape[0], shape[1], shape[2], requant);
    else if (shape.size() == 9) {
      const ConvShape s{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8]};
      if (pass == "forward") items = conv_scratch(ConvPass::kForward, s, requant);
      else if (pass == "backward_data") items = conv_scratch(ConvPass::kBackwardData, s, requant);
      else if (pass == "backward_weight") items = conv_scratch(ConvPass::kBackwardWeight, s, requant);
      else fail("scratch_bytes: pass '" + pass + "' is not one of gemm, forward, backward_data, backward_weight");
    } else fail("scratch_bytes: " + pass + " takes " + (pass == "gemm" ? "3" : "9") + " sizes, got " + std::to_string(shape.size()));
    py::dict out;
    for (const auto& [name, bytes] : items) out[py::str(name)] = bytes;
    return out;
  }, py::arg("pass_"), py::arg("shape"), py::arg("requant"),
     "Bytes of the kernels' own grow-only scratch by buffer, for one pass of this shape (scratch.h).");
  m.def("release_scratch", [] { return release_scratch(); },
        "Free the kernels' kept scratch of every thread (call between steps); returns the bytes it held.");
  m.def("conv2d_bwd_weight_s8", [](const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                   std::pair<int, int> kernel) {
    const char* op = "conv2d_bwd_weight_s8";
    auto err = checked<int8_t>(op, "err", err_obj, 4);
    auto x = checked<int8_t>(op, "x", x_obj, 4);
    check_positive(op, "kernel height", kernel.first);
    check_positive(op, "kernel width", kernel.second);
    py::array_t<int8_t> w_like(std::vector<py::ssize_t>{err.shape(3), kernel.first, kernel.second, x.shape(3)});
    const ConvShape s = conv_shape(op, x, w_like, stride, pad);
    if (err.shape(0) != s.n || err.shape(1) != s.oh() || err.shape(2) != s.ow())
      fail(std::string(op) + ": err shape " + shape_str(err) + " does not match x " + shape_str(x) + " with kernel (" +
           std::to_string(s.kh) + ", " + std::to_string(s.kw) + "), stride " + std::to_string(stride) + ", pad " +
           std::to_string(pad));
    SerialScope serial(small_op(conv_macs(s)));
    return run_acc(needs_int64(static_cast<long long>(s.n) * s.oh() * s.ow()), {s.o, s.kh, s.kw, s.c},
                   [&](auto* dw) { conv2d_bwd_weight(err.data(), x.data(), s, dw); });
  }, py::arg("err"), py::arg("x"), py::arg("stride"), py::arg("pad"), py::arg("kernel"));

  // ------------------------------------------------------------ epilogue
  m.def("absmax", [](const py::handle& obj) {
    const Acc a = checked_acc("absmax", obj);
    const size_t n = a.arr.size();
    const void* p = a.arr.data();
    py::gil_scoped_release nogil;
    return a.is64 ? absmax(static_cast<const int64_t*>(p), n) : absmax(static_cast<const int32_t*>(p), n);
  }, py::arg("acc"));
  m.def("requantize", [](const py::handle& obj, int shift, int bits, const std::string& mode, const py::object& rng) {
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
  }, py::arg("acc"), py::arg("shift"), py::arg("bits"), py::arg("mode"), py::arg("rng"),
     "Range estimate (shift < 0) and shift_round in one call: (int8, shift).");

  m.def("shift_round", [](const py::handle& obj, int shift, const std::string& mode, const py::object& rng) {
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
  }, py::arg("acc"), py::arg("shift"), py::arg("mode"), py::arg("rng"),
     "numerics.shift_round by exactly `shift` (no saturation check): int8.");

  // ------------------------------------------------------------ element-wise and pooling
  m.def("relu_s8", [](const py::handle& obj) {
    auto x = checked<int8_t>("relu_s8", "x", obj, -1);
    py::array_t<int8_t> y(dims(x));
    int8_t* p = y.mutable_data();
    py::gil_scoped_release nogil;
    relu_s8(x.data(), x.size(), p);
    return y;
  }, py::arg("x"));
  m.def("relu_bwd_s8", [](const py::handle& err_obj, const py::handle& y_obj) {
    auto err = checked<int8_t>("relu_bwd_s8", "err", err_obj, -1);
    auto y = checked<int8_t>("relu_bwd_s8", "y", y_obj, -1);
    if (dims(err) != dims(y)) fail("relu_bwd_s8: err " + shape_str(err) + " and y " + shape_str(y) + " differ in shape");
    py::array_t<int8_t> dx(dims(err));
    int8_t* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    relu_bwd_s8(err.data(), y.data(), err.size(), p);
    return dx;
  }, py::arg("err"), py::arg("y"));
  m.def("maxpool_s8", [](const py::handle& obj, int kernel, int stride) {
    auto x = checked<int8_t>("maxpool_s8", "x", obj, 4);
    check_positive("maxpool_s8", "kernel", kernel);
    check_positive("maxpool_s8", "stride", stride);
    if (kernel > 16) fail("maxpool_s8: kernel " + std::to_string(kernel) + " does not fit a uint8 argmax");
    const PoolShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)), kernel, stride};
    if (s.h < kernel || s.w < kernel) fail("maxpool_s8: kernel " + std::to_string(kernel) + " is larger than x " + shape_str(x));
    std::vector<py::ssize_t> shape{s.n, s.oh(), s.ow(), s.c};
    py::array_t<int8_t> y(shape);
    py::array_t<uint8_t> idx(shape);
    int8_t* yp = y.mutable_data();
    uint8_t* ip = idx.mutable_data();
    {
      py::gil_scoped_release nogil;
      maxpool_s8(x.data(), s, yp, ip);
    }
    return py::make_tuple(y, idx);
  }, py::arg("x"), py::arg("kernel"), py::arg("stride"));
  m.def("maxpool_bwd_s8", [](const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride,
                             std::pair<int, int> in_hw) {
    auto err = checked<int8_t>("maxpool_bwd_s8", "err", err_obj, 4);
    auto idx = checked<uint8_t>("maxpool_bwd_s8", "argmax", idx_obj, 4);
    check_positive("maxpool_bwd_s8", "kernel", kernel);
    check_positive("maxpool_bwd_s8", "stride", stride);
    if (dims(err) != dims(idx)) fail("maxpool_bwd_s8: err " + shape_str(err) + " and argmax " + shape_str(idx) + " differ in shape");
    const PoolShape s{int(err.shape(0)), in_hw.first, in_hw.second, int(err.shape(3)), kernel, stride};
    if (in_hw.first < kernel || in_hw.second < kernel || s.oh() != err.shape(1) || s.ow() != err.shape(2))
      fail("maxpool_bwd_s8: err " + shape_str(err) + " does not match in_hw (" + std::to_string(in_hw.first) + ", " +
           std::to_string(in_hw.second) + "), kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride));
    const uint8_t* ip = idx.data();
    uint8_t top = 0;  // a max reduction vectorises; the loop that names the value runs only on failure
    for (py::ssize_t i = 0; i < idx.size(); ++i) top = std::max(top, ip[i]);
    for (py::ssize_t i = 0; top >= kernel * kernel && i < idx.size(); ++i)
      if (ip[i] >= kernel * kernel) fail("maxpool_bwd_s8: argmax value " + std::to_string(ip[i]) + " is outside the " +
                                         std::to_string(kernel) + "x" + std::to_string(kernel) + " window");
    py::array_t<int8_t> dx(std::vector<py::ssize_t>{s.n, s.h, s.w, s.c});
    int8_t* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    maxpool_bwd_s8(err.data(), ip, s, p);
    return dx;
  }, py::arg("err"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"), py::arg("in_hw"));

  // ------------------------------------------------------------ NITI loss and update
  m.def("niti_loss_grad_s8", [](const py::handle& logits_obj, int exponent, const py::handle& labels_obj,
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
  }, py::arg("logits"), py::arg("exponent"), py::arg("labels"), py::arg("rng"));
  m.def("niti_update_s8", [](const py::handle& w_obj, const py::handle& g_obj, int mu, const std::string& mode,
                             const py::object& rng) {
    auto w = checked<int8_t>("niti_update_s8", "w", w_obj, -1);
    const Acc g = checked_acc("niti_update_s8", g_obj);
    if (dims(w) != dims(g.arr))
      fail("niti_update_s8: w " + shape_str(w) + " and grad " + shape_str(g.arr) + " differ in shape");
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
  }, py::arg("w"), py::arg("grad"), py::arg("mu"), py::arg("mode"), py::arg("rng"));

  def_float_recipe_ops(m);
}
