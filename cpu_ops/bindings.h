// What every binding file shares (bindings*.cpp; only they include pybind11): argument
// checks that turn a user error into a ValueError naming the argument and its value,
// C-contiguous arrays of exactly the kernel's dtype, rounding modes, RNG keys, shapes.
// Each family's bindings live in their own file and register through one def_* below;
// bindings.cpp makes the module.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "conv.h"
#include "conv_cols.h"
#include "cpu_features.h"
#include "eltwise.h"
#include "eltwise_f32.h"
#include "gemm.h"
#include "conv_exact.h"
#include "gemm_exact.h"
#include "gemm_fp16_chunked.h"
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

namespace dsptrain {
namespace bind {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

inline std::string shape_str(const py::array& a) {
  std::ostringstream s;
  s << "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s << (i ? ", " : "") << a.shape(i);
  s << (a.ndim() == 1 ? ",)" : ")");
  return s.str();
}

[[noreturn]] inline void fail(const std::string& msg) { throw py::value_error(msg); }

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
inline Acc checked_acc(const char* op, const py::handle& obj) {
  if (py::isinstance<py::array_t<int32_t>>(obj)) return {checked<int32_t>(op, "acc", obj, -1), false};
  if (py::isinstance<py::array_t<int64_t>>(obj)) return {checked<int64_t>(op, "acc", obj, -1), true};
  fail(std::string(op) + ": acc must be int32 or int64, got " +
       (py::isinstance<py::array>(obj) ? std::string(py::str(py::reinterpret_borrow<py::array>(obj).dtype()))
                                        : std::string(py::str(py::type::of(obj)))));
}

inline double conv_macs(const ConvShape& s) { return double(s.n) * s.oh() * s.ow() * s.o * s.kh * s.kw * s.c; }

inline bool needs_int64(long long depth) { return depth * 127LL * 127LL >= (1LL << 31); }

inline std::vector<py::ssize_t> dims(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

// A kernel's scratch items (scratch.h) as the {name: bytes} dict the memory planner reads.
inline py::dict scratch_dict(const ScratchList& items) {
  py::dict out;
  for (const auto& [name, bytes] : items) out[py::str(name)] = bytes;
  return out;
}

inline RoundMode parse_mode(const char* op, const std::string& mode) {
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
inline Rng parse_rng(const py::object& rng) {
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

inline void check_shift(const char* op, int shift, RoundMode mode, const Rng& rng) {
  if (shift > 62) fail(std::string(op) + ": shift " + std::to_string(shift) + " is larger than 62");
  if (shift > 0 && mode == RoundMode::kSto && !rng.given) fail("stochastic rounding needs an RngKey");
}

inline void check_positive(const char* op, const char* name, int v) {
  if (v <= 0) fail(std::string(op) + ": " + name + " must be positive, got " + std::to_string(v));
}

// ---------------------------------------------------------------- convolutions
// The checks every convolution binding (dense, depthwise) makes of its geometry.
inline void check_stride_pad(const char* op, int stride, int pad) {
  check_positive(op, "stride", stride);
  if (pad < 0) fail(std::string(op) + ": pad must be >= 0, got " + std::to_string(pad));
}

// A (height, width) argument -- in_hw, kernel -- of positive sizes.
inline void check_hw(const char* op, const std::string& name, std::pair<int, int> hw) {
  check_positive(op, (name + " height").c_str(), hw.first);
  check_positive(op, (name + " width").c_str(), hw.second);
}

// A kh x kw kernel (each at least 1) within an h x w input padded by `pad` on every side.
inline void check_kernel_fits(const char* op, int kh, int kw, int h, int w, int pad) {
  if (kh < 1 || kw < 1 || h + 2 * pad < kh || w + 2 * pad < kw)
    fail(std::string(op) + ": kernel " + std::to_string(kh) + "x" + std::to_string(kw) +
         " does not fit the padded input " + std::to_string(h + 2 * pad) + "x" + std::to_string(w + 2 * pad));
}

// A backward-data pass's err that is not the output its in_hw, weights, stride and pad give.
[[noreturn]] inline void fail_err_vs_in_hw(const char* op, const py::array& err, int h, int w, const py::array& weights,
                                           int stride, int pad) {
  fail(std::string(op) + ": err shape " + shape_str(err) + " does not match in_hw (" + std::to_string(h) + ", " +
       std::to_string(w) + "), weights " + shape_str(weights) + ", stride " + std::to_string(stride) + ", pad " +
       std::to_string(pad));
}

// A weight-gradient pass's err that is not the output its x, kernel, stride and pad give.
[[noreturn]] inline void fail_err_vs_x(const char* op, const py::array& err, const py::array& x, int kh, int kw,
                                       int stride, int pad) {
  fail(std::string(op) + ": err shape " + shape_str(err) + " does not match x " + shape_str(x) + " with kernel (" +
       std::to_string(kh) + ", " + std::to_string(kw) + "), stride " + std::to_string(stride) + ", pad " +
       std::to_string(pad));
}

inline ConvShape conv_shape(const char* op, const py::array& x, const py::array& w, int stride, int pad) {
  check_stride_pad(op, stride, pad);
  ConvShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)),
              int(w.shape(0)), int(w.shape(1)), int(w.shape(2)), stride, pad};
  if (w.shape(3) != s.c)
    fail(std::string(op) + ": weight shape " + shape_str(w) + " does not match input channels " + std::to_string(s.c));
  check_kernel_fits(op, s.kh, s.kw, s.h, s.w, pad);
  return s;
}

// The shape of a backward-data pass: err and w given, the input's height and width asked
// for; err must be the output shape that input, w, stride and pad give.
inline ConvShape conv_shape_from_in_hw(const char* op, const py::array& err, const py::array& w, int stride, int pad,
                                       std::pair<int, int> in_hw) {
  check_hw(op, "in_hw", in_hw);
  py::array_t<int8_t> x_like(std::vector<py::ssize_t>{1, in_hw.first, in_hw.second, w.shape(3)});
  ConvShape s = conv_shape(op, x_like, w, stride, pad);
  s.n = int(err.shape(0));
  if (err.shape(1) != s.oh() || err.shape(2) != s.ow() || err.shape(3) != s.o)
    fail_err_vs_in_hw(op, err, s.h, s.w, w, stride, pad);
  return s;
}

// The shape of a weight-gradient pass: x and err given, the kernel size asked for; err must
// be the output shape that x, the kernel, stride and pad give.
inline ConvShape conv_shape_from_err(const char* op, const py::array& err, const py::array& x, int stride, int pad,
                                     std::pair<int, int> kernel) {
  check_hw(op, "kernel", kernel);
  py::array_t<int8_t> w_like(std::vector<py::ssize_t>{err.shape(3), kernel.first, kernel.second, x.shape(3)});
  const ConvShape s = conv_shape(op, x, w_like, stride, pad);
  if (err.shape(0) != s.n || err.shape(1) != s.oh() || err.shape(2) != s.ow())
    fail_err_vs_x(op, err, x, s.kh, s.kw, stride, pad);
  return s;
}

inline void check_same(const char* op, const char* a_name, const py::array& a, const char* b_name, const py::array& b) {
  if (dims(a) != dims(b)) fail(std::string(op) + ": " + a_name + " " + shape_str(a) + " and " + b_name + " " + shape_str(b) + " differ in shape");
}

inline PoolShape pool_shape(const char* op, const py::array& x, int kernel, int stride) {
  check_positive(op, "kernel", kernel);
  check_positive(op, "stride", stride);
  if (kernel > 16) fail(std::string(op) + ": kernel " + std::to_string(kernel) + " does not fit a uint8 argmax");
  const PoolShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)), kernel, stride};
  if (s.h < kernel || s.w < kernel) fail(std::string(op) + ": kernel " + std::to_string(kernel) + " is larger than x " + shape_str(x));
  return s;
}

// A pooling backward's err that is not the output its in_hw, kernel and stride give.
[[noreturn]] inline void fail_pool_err_vs_in_hw(const char* op, const py::array& err, std::pair<int, int> in_hw,
                                                int kernel, int stride) {
  fail(std::string(op) + ": err " + shape_str(err) + " does not match in_hw (" + std::to_string(in_hw.first) + ", " +
       std::to_string(in_hw.second) + "), kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride));
}

// A max-pool forward binding (maxpool_s8, maxpool_f32, relu_maxpool_f32): x checked as
// NHWC of dtype T, the pooled y and its uint8 argmax allocated, `pool` run without the GIL
// as pool(x, shape, y, argmax); returns (y, argmax).
template <typename T, typename Pool>
py::tuple maxpool_forward(const char* op, const py::handle& obj, int kernel, int stride, Pool pool) {
  auto x = checked<T>(op, "x", obj, 4);
  const PoolShape s = pool_shape(op, x, kernel, stride);
  std::vector<py::ssize_t> shape{s.n, s.oh(), s.ow(), s.c};
  py::array_t<T> y(shape);
  py::array_t<uint8_t> idx(shape);
  T* yp = y.mutable_data();
  uint8_t* ip = idx.mutable_data();
  {
    py::gil_scoped_release nogil;
    pool(x.data(), s, yp, ip);
  }
  return py::make_tuple(y, idx);
}

// Each registers one family of kernels on the module (its own bindings_<family>.cpp).
void def_int8_products(py::module_& m);     // bindings_int8.cpp: GEMM, convolutions, packed weights
void def_int8_elementwise(py::module_& m);  // bindings_int8_eltwise.cpp: epilogue, ReLU, pooling, loss, update
void def_quantizers(py::module_& m);        // bindings_quant.cpp: the emulated recipes' quantizers and dequantizers
void def_float_layers(py::module_& m);      // bindings_float_layers.cpp: float ReLU, pools, Octo's compensation, updates
void def_exact_products(py::module_& m);    // bindings_exact.cpp: MLS's int16 and FP8's chunked-FP16 products, patches
void def_fp32_products(py::module_& m);     // bindings_fp32.cpp: the FP32 recipe's GEMM and convolutions
void def_memory(py::module_& m);            // bindings_memory.cpp: the array pool as NumPy's allocator
void def_dwconv(py::module_& m);            // bindings_dwconv.cpp: the depthwise convolutions
void def_layers(py::module_& m);            // bindings_layers.cpp: mobile CNNs' activations, SE product, channel moves
void def_bn_casts(py::module_& m);          // bindings_bn_cast.cpp: NITI's batch norm fused with its casts

}  // namespace bind
}  // namespace dsptrain
