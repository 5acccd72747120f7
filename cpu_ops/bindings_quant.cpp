// The emulated recipes' quantizers: ranges, rounding to integer and small-float grids,
// Octo's range-clipping search, MLS's group-aligned elements, and the dequantizers that
// turn a product's int32 sums back into floats (with Octo's compensation layer).
#include "bindings.h"
#include "quant_mls.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

// ---------------------------------------------------------------- float recipes
FloatRound parse_float_mode(const char* op, const std::string& mode) {
  if (mode == "round") return FloatRound::kRound;
  if (mode == "nearest_even") return FloatRound::kNearestEven;
  if (mode == "sto") return FloatRound::kSto;
  fail(std::string(op) + ": rounding mode '" + mode + "' is not one of round, nearest_even, sto");
}

bool is_f64(const py::handle& obj) { return py::isinstance<py::array_t<double>>(obj); }

// x's channels (its last dimension) for MLS's two quantizers, after the checks they share:
// the group divides them, and qmax (at least least_qmax) * 2**kmax fits int16.
int mls_channels(const char* op, const Array<float>& x, int group, int kmax, int qmax, int least_qmax) {
  const int channels = x.ndim() ? int(x.shape(x.ndim() - 1)) : 1;
  if (group < 1 || channels % group)
    fail(std::string(op) + ": group " + std::to_string(group) + " does not divide " + std::to_string(channels) + " channels");
  if (qmax < least_qmax || kmax < 0 || qmax * (1LL << kmax) > 32767)
    fail(std::string(op) + ": qmax " + std::to_string(qmax) + " * 2**" + std::to_string(kmax) + " does not fit int16");
  return channels;
}

// MLS elements (quant.h: quantize_mls) of x into `aligned`: the one-pass AVX-512 lanes where
// they apply, else the general loop. Called without the GIL.
void mls_elements(const Array<float>& x, int channels, int group, double top, double tensor_scale, int kmax,
                  int qmax, FloatRound mode, const RngKey& key, int16_t* aligned) {
  const size_t rows = channels ? x.size() / channels : 0;
  if (!quantize_mls_lanes(x.data(), rows * channels, group, top, tensor_scale, kmax, qmax, mode, key, aligned))
    quantize_mls(x.data(), rows, channels, group, top, tensor_scale, kmax, qmax, mode, key, aligned);
}

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

// ---------------------------------------------------------------- the bindings

auto py_absmax_f(const py::handle& obj) {
  if (is_f64(obj)) {
    auto x = checked<double>("absmax_f", "x", obj, -1);
    py::gil_scoped_release nogil;
    return absmax_float(x.data(), x.size());
  }
  auto x = checked<float>("absmax_f", "x", obj, -1);
  py::gil_scoped_release nogil;
  return absmax_float(x.data(), x.size());
}

auto py_quantize_f(const py::handle& obj, double step, int bits, const std::string& mode, const py::object& rng) {
  const FloatRound fm = parse_float_mode("quantize_f", mode);
  const Rng r = parse_rng(rng);
  if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  if (bits < 2 || bits > 16) fail("quantize_f: bits must be in [2, 16], got " + std::to_string(bits));
  if (!(step > 0)) fail("quantize_f: step must be > 0, got " + std::to_string(step));
  if (is_f64(obj)) return quantize_any(checked<double>("quantize_f", "x", obj, -1), step, bits, fm, r);
  return quantize_any(checked<float>("quantize_f", "x", obj, -1), step, bits, fm, r);
}

auto py_dequantize(const py::handle& obj, double scale) {
  if (py::isinstance<py::array_t<int8_t>>(obj)) {   // an int8 tensor entering a float op (NITI's mixed layers)
    auto q = checked<int8_t>("dequantize", "acc", obj, -1);
    py::array_t<float> out(dims(q));
    float* p = out.mutable_data();
    const int8_t* src = q.data();
    const size_t n = q.size();
    py::gil_scoped_release nogil;
    dequantize(src, n, scale, p);
    return out;
  }
  const Acc a = checked_acc("dequantize", obj);
  py::array_t<float> out(dims(a.arr));
  float* p = out.mutable_data();
  const size_t n = a.arr.size();
  const void* src = a.arr.data();
  py::gil_scoped_release nogil;
  if (a.is64) dequantize(static_cast<const int64_t*>(src), n, scale, p);
  else dequantize(static_cast<const int32_t*>(src), n, scale, p);
  return out;
}

auto py_dequantize_compensate(const py::handle& obj, double scale, const py::handle& s_obj,
                                    const py::handle& b_obj, bool in_place, bool relu) {
  Acc a = checked_acc("dequantize_compensate", obj);
  auto cs = checked<float>("dequantize_compensate", "comp_scale", s_obj, 1);
  auto cb = checked<float>("dequantize_compensate", "comp_shift", b_obj, 1);
  const py::ssize_t c = a.arr.ndim() ? a.arr.shape(a.arr.ndim() - 1) : 0;
  if (cs.size() != c || cb.size() != c)
    fail("dequantize_compensate: comp_scale " + shape_str(cs) + " and comp_shift " + shape_str(cb) +
         " must have the sums' " + std::to_string(c) + " channels");
  in_place = in_place && !a.is64 && a.arr.writeable();
  py::array_t<float> y(dims(a.arr));
  py::array z = in_place ? py::array(a.arr.attr("view")(py::dtype::of<float>())) : py::array(py::array_t<float>(dims(a.arr)));
  float* pz = in_place ? nullptr : static_cast<float*>(z.mutable_data());
  float* py_ = y.mutable_data();
  void* src = in_place ? a.arr.mutable_data() : const_cast<void*>(a.arr.data());   // written only in place
  const size_t n = a.arr.size();
  {
    py::gil_scoped_release nogil;
    if (a.is64) dequantize_compensate(static_cast<int64_t*>(src), n, static_cast<int>(c), scale, cs.data(), cb.data(), pz, py_, relu);
    else dequantize_compensate(static_cast<int32_t*>(src), n, static_cast<int>(c), scale, cs.data(), cb.data(), pz, py_, relu);
  }
  return py::make_tuple(z, y);
}

auto py_dequantize_in_place(py::array_t<int32_t> acc, double scale) {
  if (!(acc.flags() & py::array::c_style) || !acc.writeable())
    fail("dequantize_in_place: acc must be a writable C-contiguous int32 array");
  int32_t* p = acc.mutable_data();
  const size_t n = acc.size();
  py::gil_scoped_release nogil;
  dequantize_in_place(p, n, scale);
}

auto py_prc_squared_errors(const py::handle& obj, double top, std::vector<double> ratios, int qmax) {
  auto x = checked<float>("prc_squared_errors", "x", obj, -1);
  std::vector<double> errors(ratios.size());
  {
    py::gil_scoped_release nogil;
    prc_squared_errors(x.data(), x.size(), top, ratios.data(), static_cast<int>(ratios.size()), qmax, errors.data());
  }
  return errors;
}

auto py_prc_quantize(const py::handle& obj, double prev_ratio, double momentum, std::vector<double> ratios,
                           int bits, const std::string& mode, const py::object& rng) {
  auto x = checked<float>("prc_quantize", "x", obj, -1);
  const FloatRound fm = parse_float_mode("prc_quantize", mode);
  const Rng r = parse_rng(rng);
  if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  if (bits < 2 || bits > 16) fail("prc_quantize: bits must be in [2, 16], got " + std::to_string(bits));
  if (ratios.empty()) fail("prc_quantize: no candidate ratios");
  if (static_cast<uint64_t>(x.size()) >= (uint64_t{1} << 32)) fail("prc_quantize: x " + shape_str(x) + " has 2**32 elements or more");
  const int qmax = (1 << (bits - 1)) - 1;
  double step = 1.0, ratio = 0.0;
  auto run = [&](auto q) {
    auto* p = q.mutable_data();
    {
      py::gil_scoped_release nogil;
      step = prc_quantize(x.data(), x.size(), prev_ratio, momentum, ratios.data(), static_cast<int>(ratios.size()), qmax,
                          fm, r.key, p, &ratio);
    }
    return py::tuple(py::make_tuple(q, step, ratio));
  };
  if (bits <= 8) return run(py::array_t<int8_t>(dims(x)));
  return run(py::array_t<int16_t>(dims(x)));
}

auto py_quantize_mls(const py::handle& obj, int group, double top, double tensor_scale, int kmax, int qmax,
                           const std::string& mode, const py::object& rng) {
  auto x = checked<float>("quantize_mls", "x", obj, -1);
  const FloatRound fm = parse_float_mode("quantize_mls", mode);
  const Rng r = parse_rng(rng);
  if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  const int channels = mls_channels("quantize_mls", x, group, kmax, qmax, 0);
  py::array_t<int16_t> out(dims(x));
  py::gil_scoped_release nogil;
  mls_elements(x, channels, group, top, tensor_scale, kmax, qmax, fm, r.key, out.mutable_data());
  return out;
}

// absmax_f and quantize_mls in one call: MLS quantizes 15 tensors a LeNet-5 step, and each
  // hook call is a Python round trip through the executor (float_ops.quantize_mls_ranged the judge)
auto py_quantize_mls_ranged(const py::handle& obj, int group, int kmax, int qmax, const std::string& mode,
                                  const py::object& rng) {
  auto x = checked<float>("quantize_mls_ranged", "x", obj, -1);
  const FloatRound fm = parse_float_mode("quantize_mls_ranged", mode);
  const Rng r = parse_rng(rng);
  if (fm == FloatRound::kSto && !r.given) fail("stochastic rounding needs an RngKey");
  const int channels = mls_channels("quantize_mls_ranged", x, group, kmax, qmax, 1);   // it divides by qmax
  py::array_t<int16_t> out(dims(x));
  int16_t* p = out.mutable_data();
  double top = 0.0;
  {
    py::gil_scoped_release nogil;
    top = x.size() ? absmax_float(x.data(), x.size()) : 0.0;
    if (top == 0.0) std::fill(p, p + x.size(), int16_t{0});
    else mls_elements(x, channels, group, top, top / qmax, kmax, qmax, fm, r.key, p);
  }
  return py::make_tuple(out, top);
}

auto py_round_float(const py::handle& obj, int exponent_bits, int mantissa_bits, const std::string& mode,
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
}

}  // namespace

void dsptrain::bind::def_quantizers(py::module_& m) {
  m.def("absmax_f", &py_absmax_f, py::arg("x"), "max |x| of a float32/float64 array, as a Python float.");
  m.def("quantize_f", &py_quantize_f, py::arg("x"), py::arg("step"), py::arg("bits"), py::arg("mode"), py::arg("rng"),
        "clip(round(x / step), +-(2**(bits-1) - 1)): int8 for bits <= 8, else int16.");
  m.def("dequantize", &py_dequantize, py::arg("acc"), py::arg("scale"), "float32(double(acc) * scale); acc int8, int32 or int64.");
  m.def("dequantize_compensate", &py_dequantize_compensate, py::arg("acc"), py::arg("scale"), py::arg("comp_scale"),
        py::arg("comp_shift"), py::arg("in_place"),
        py::arg("relu") = false, "Octo's product epilogue: (z, y), z = float32(double(acc) * scale) (over acc's memory when in_place and int32), "
        "y = (1 + comp_scale) * z + comp_shift per channel, float32 (relu: then relu_f32).");
  m.def("dequantize_in_place", &py_dequantize_in_place, py::arg("acc").noconvert(), py::arg("scale"),
        "float32(double(acc) * scale) written over acc's own int32 elements (read it as float32 after).");
  m.def("prc_squared_errors", &py_prc_squared_errors, py::arg("x"), py::arg("top"), py::arg("ratios"),
        py::arg("qmax"));
  m.def("prc_quantize", &py_prc_quantize, py::arg("x"), py::arg("prev_ratio"), py::arg("momentum"), py::arg("ratios"),
        py::arg("bits"), py::arg("mode"), py::arg("rng"), "Octo's range-clipped error quantizer: (q, step, ratio).");
  m.def("quantize_mls", &py_quantize_mls, py::arg("x"), py::arg("group"), py::arg("top"), py::arg("tensor_scale"),
        py::arg("kmax"), py::arg("qmax"), py::arg("mode"), py::arg("rng"),
        "MLS elements with their group shift applied (int16).");
  m.def("quantize_mls_ranged", &py_quantize_mls_ranged, py::arg("x"), py::arg("group"), py::arg("kmax"),
        py::arg("qmax"), py::arg("mode"), py::arg("rng"),
        "(MLS elements with their group shift applied (int16), max|x|): zeros when x is all zero.");
  m.def("round_float", &py_round_float, py::arg("x"), py::arg("exponent_bits"), py::arg("mantissa_bits"),
        py::arg("mode"), py::arg("rng"), "x on a small-float grid (FP8, FP16), as float32.");
}
