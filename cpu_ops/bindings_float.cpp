// The emulated recipes' float work: quantizers, rounding to small-float grids, exact
// int16 and chunked-FP16 products, patches, float ReLU and pooling, Octo's
// compensation, SGD.
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

// Octo's optional ReLU gate (compensation_bwd, pool_compensation_bwd): float32 of err's
// shape, or an empty array for None.
Array<float> optional_gate(const char* op, const py::handle& obj, const py::array& err, int ndim) {
  Array<float> gate;
  if (!obj.is_none()) {
    gate = checked<float>(op, "gate", obj, ndim);
    check_same(op, "err", err, "gate", gate);
  }
  return gate;
}

// A max-pool backward's result dx[n, in_hw, c] for the pooled error `err`, and the pool's
// shape, checked against err (the result has the input's shape: a second x-sized array
// only for the check doubled the op's memory, which the memory plan does not count).
std::pair<py::array_t<float>, PoolShape> pool_input_grad(const char* op, const py::array& err, std::pair<int, int> in_hw,
                                                         int kernel, int stride) {
  py::array_t<float> dx(std::vector<py::ssize_t>{err.shape(0), in_hw.first, in_hw.second, err.shape(3)});
  const PoolShape s = pool_shape(op, dx, kernel, stride);
  if (s.oh() != err.shape(1) || s.ow() != err.shape(2))
    fail(std::string(op) + ": err " + shape_str(err) + " does not match in_hw (" + std::to_string(in_hw.first) + ", " +
         std::to_string(in_hw.second) + "), kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride));
  return {dx, s};
}

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

}  // namespace

void dsptrain::bind::def_float_recipe_ops(py::module_& m) {
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
  m.def("dequantize_compensate", [](const py::handle& obj, double scale, const py::handle& s_obj,
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
  }, py::arg("acc"), py::arg("scale"), py::arg("comp_scale"), py::arg("comp_shift"), py::arg("in_place"), py::arg("relu") = false,
     "Octo's product epilogue: (z, y), z = float32(double(acc) * scale) (over acc's memory when in_place and int32), "
     "y = (1 + comp_scale) * z + comp_shift per channel, float32 (relu: then relu_f32).");
  m.def("dequantize_in_place", [](py::array_t<int32_t> acc, double scale) {
    if (!(acc.flags() & py::array::c_style) || !acc.writeable())
      fail("dequantize_in_place: acc must be a writable C-contiguous int32 array");
    int32_t* p = acc.mutable_data();
    const size_t n = acc.size();
    py::gil_scoped_release nogil;
    dequantize_in_place(p, n, scale);
  }, py::arg("acc").noconvert(), py::arg("scale"),
     "float32(double(acc) * scale) written over acc's own int32 elements (read it as float32 after).");
  m.def("prc_squared_errors", [](const py::handle& obj, double top, std::vector<double> ratios, int qmax) {
    auto x = checked<float>("prc_squared_errors", "x", obj, -1);
    std::vector<double> errors(ratios.size());
    {
      py::gil_scoped_release nogil;
      prc_squared_errors(x.data(), x.size(), top, ratios.data(), static_cast<int>(ratios.size()), qmax, errors.data());
    }
    return errors;
  }, py::arg("x"), py::arg("top"), py::arg("ratios"), py::arg("qmax"));
  m.def("prc_quantize", [](const py::handle& obj, double prev_ratio, double momentum, std::vector<double> ratios,
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
  }, py::arg("x"), py::arg("prev_ratio"), py::arg("momentum"), py::arg("ratios"), py::arg("bits"), py::arg("mode"),
     py::arg("rng"), "Octo's range-clipped error quantizer: (q, step, ratio).");
  m.def("quantize_mls", [](const py::handle& obj, int group, double top, double tensor_scale, int kmax, int qmax,
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
  }, py::arg("x"), py::arg("group"), py::arg("top"), py::arg("tensor_scale"), py::arg("kmax"), py::arg("qmax"),
     py::arg("mode"), py::arg("rng"), "MLS elements with their group shift applied (int16).");
  // absmax_f and quantize_mls in one call: MLS quantizes 15 tensors a LeNet-5 step, and each
  // hook call is a Python round trip through the executor (float_ops.quantize_mls_ranged the judge)
  m.def("quantize_mls_ranged", [](const py::handle& obj, int group, int kmax, int qmax, const std::string& mode,
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
  }, py::arg("x"), py::arg("group"), py::arg("kmax"), py::arg("qmax"), py::arg("mode"), py::arg("rng"),
     "(MLS elements with their group shift applied (int16), max|x|): zeros when x is all zero.");

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
  m.def("compensation_bwd", [](const py::handle& e_obj, const py::handle& z_obj, const py::handle& s_obj,
                               const py::handle& g_obj) {
    auto err = checked<float>("compensation_bwd", "err", e_obj, -1);
    auto z = checked<float>("compensation_bwd", "z", z_obj, -1);
    auto scale = checked<float>("compensation_bwd", "scale", s_obj, 1);
    check_same("compensation_bwd", "err", err, "z", z);
    const auto gate = optional_gate("compensation_bwd", g_obj, err, -1);
    const int c = z.ndim() ? int(z.shape(z.ndim() - 1)) : 0;
    if (scale.shape(0) != c) fail("compensation_bwd: scale " + shape_str(scale) + " must have z's " + std::to_string(c) + " channels");
    py::array_t<float> dz(dims(z)), ds(std::vector<py::ssize_t>{c}), db(std::vector<py::ssize_t>{c});
    float *pz = dz.mutable_data(), *ps = ds.mutable_data(), *pb = db.mutable_data();
    const float* pg = g_obj.is_none() ? nullptr : gate.data();
    {
      py::gil_scoped_release nogil;
      compensation_bwd(err.data(), z.data(), scale.data(), c ? z.size() / c : 0, c, pz, ps, pb, pg);
    }
    return py::make_tuple(dz, ds, db);
  }, py::arg("err"), py::arg("z"), py::arg("scale"), py::arg("gate") = py::none(),
     "Octo's compensation backward (dz, d_scale, d_shift); gate: a following ReLU's output, err taken where it is > 0.");
  m.def("pool_compensation_bwd", [](const py::handle& e_obj, const py::handle& g_obj, const py::handle& i_obj,
                                    int kernel, int stride, const py::handle& z_obj, const py::handle& s_obj) {
    const char* op = "pool_compensation_bwd";
    auto err = checked<float>(op, "err", e_obj, 4);
    auto idx = checked<uint8_t>(op, "argmax", i_obj, 4);
    auto z = checked<float>(op, "z", z_obj, 4);
    auto scale = checked<float>(op, "scale", s_obj, 1);
    check_same(op, "err", err, "argmax", idx);
    const auto gate = optional_gate(op, g_obj, err, 4);
    const PoolShape s = pool_shape(op, z, kernel, stride);
    if (stride < kernel)
      fail(std::string(op) + ": windows overlap (kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) +
           "); only stride >= kernel is fused");
    if (err.shape(0) != s.n || err.shape(1) != s.oh() || err.shape(2) != s.ow() || err.shape(3) != s.c)
      fail(std::string(op) + ": err " + shape_str(err) + " is not the pooled shape of z " + shape_str(z) + " with kernel " +
           std::to_string(kernel) + ", stride " + std::to_string(stride));
    if (scale.shape(0) != s.c) fail(std::string(op) + ": scale " + shape_str(scale) + " must have z's " + std::to_string(s.c) + " channels");
    py::array_t<float> dz(dims(z)), ds(std::vector<py::ssize_t>{s.c}), db(std::vector<py::ssize_t>{s.c});
    float *pz = dz.mutable_data(), *ps = ds.mutable_data(), *pb = db.mutable_data();
    const float* pg = g_obj.is_none() ? nullptr : gate.data();
    {
      py::gil_scoped_release nogil;
      pool_compensation_bwd(err.data(), pg, idx.data(), s, z.data(), scale.data(), pz, ps, pb);
    }
    return py::make_tuple(dz, ds, db);
  }, py::arg("err"), py::arg("gate"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"), py::arg("z"), py::arg("scale"),
     "compensation_bwd(maxpool_bwd_f32(err, argmax) or relu_maxpool_bwd_f32(err, gate, argmax), z, scale) in one pass "
     "(windows that do not overlap): (dz, d_scale, d_shift).");
  m.def("maxpool_f32", [](const py::handle& obj, int kernel, int stride) {
    return maxpool_forward<float>("maxpool_f32", obj, kernel, stride, maxpool_f32);
  }, py::arg("x"), py::arg("kernel"), py::arg("stride"));
  m.def("maxpool_bwd_f32", [](const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride,
                              std::pair<int, int> in_hw) {
    auto err = checked<float>("maxpool_bwd_f32", "err", err_obj, 4);
    auto idx = checked<uint8_t>("maxpool_bwd_f32", "argmax", idx_obj, 4);
    check_same("maxpool_bwd_f32", "err", err, "argmax", idx);
    auto [dx, s] = pool_input_grad("maxpool_bwd_f32", err, in_hw, kernel, stride);
    float* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    maxpool_bwd_f32(err.data(), idx.data(), s, p);
    return dx;
  }, py::arg("err"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"), py::arg("in_hw"));
  m.def("relu_maxpool_f32", [](const py::handle& obj, int kernel, int stride) {
    return maxpool_forward<float>("relu_maxpool_f32", obj, kernel, stride, relu_maxpool_f32);
  }, py::arg("x"), py::arg("kernel"), py::arg("stride"), "maxpool_f32(relu_f32(x)) in one pass: (y, argmax).");
  m.def("relu_maxpool_bwd_f32", [](const py::handle& err_obj, const py::handle& y_obj, const py::handle& idx_obj,
                                   int kernel, int stride, std::pair<int, int> in_hw) {
    auto err = checked<float>("relu_maxpool_bwd_f32", "err", err_obj, 4);
    auto y = checked<float>("relu_maxpool_bwd_f32", "y", y_obj, 4);
    auto idx = checked<uint8_t>("relu_maxpool_bwd_f32", "argmax", idx_obj, 4);
    check_same("relu_maxpool_bwd_f32", "err", err, "y", y);
    check_same("relu_maxpool_bwd_f32", "err", err, "argmax", idx);
    auto [dx, s] = pool_input_grad("relu_maxpool_bwd_f32", err, in_hw, kernel, stride);
    float* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    relu_maxpool_bwd_f32(err.data(), y.data(), idx.data(), s, p);
    return dx;
  }, py::arg("err"), py::arg("y"), py::arg("argmax"), py::arg("kernel"), py::arg("stride"), py::arg("in_hw"),
     "maxpool_bwd_f32(relu_bwd_f32(err, y), argmax, ...): the backward of relu_maxpool_f32 from its pooled y.");
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
  // A layer's parameters in one call (Octo's weight and compensation scale and shift): a
  // call per parameter cost more in Python and dispatch than their few elements' arithmetic.
  m.def("sgd_f32_group", [](const py::list& params, float lr, float momentum, float weight_decay, bool nesterov) {
    struct Param {
      Array<float> w, g, v;
      py::array_t<float> w_new, v_new;
      float *pw = nullptr, *pv = nullptr;
    };
    std::vector<Param> ps;
    ps.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const py::tuple t = py::reinterpret_borrow<py::tuple>(params[i]);
      if (t.size() != 3) fail("sgd_f32_group: params[" + std::to_string(i) + "] must be (w, grad, v), got " +
                              std::to_string(t.size()) + " items");
      Param p{checked<float>("sgd_f32_group", "w", t[0], -1), checked<float>("sgd_f32_group", "grad", t[1], -1),
              checked<float>("sgd_f32_group", "v", t[2], -1), {}, {}};
      check_same("sgd_f32_group", "w", p.w, "grad", p.g);
      check_same("sgd_f32_group", "w", p.w, "v", p.v);
      p.w_new = py::array_t<float>(dims(p.w));
      p.v_new = py::array_t<float>(dims(p.w));
      p.pw = p.w_new.mutable_data();
      p.pv = p.v_new.mutable_data();
      ps.push_back(std::move(p));
    }
    {
      py::gil_scoped_release nogil;
      for (Param& p : ps) {
        std::copy(p.w.data(), p.w.data() + p.w.size(), p.pw);
        std::copy(p.v.data(), p.v.data() + p.v.size(), p.pv);
        sgd_f32(p.pw, p.g.data(), p.pv, p.w.size(), lr, momentum, weight_decay, nesterov);
      }
    }
    py::list out;
    for (Param& p : ps) out.append(py::make_tuple(p.w_new, p.v_new));
    return out;
  }, py::arg("params"), py::arg("lr"), py::arg("momentum"), py::arg("weight_decay"), py::arg("nesterov"),
     "sgd_f32 of each (w, grad, v) in params, in one call: [(new w, new velocity)].");
  m.def("wageubn_update", [](const py::handle& q_obj, int e, const py::handle& g_obj, const py::handle& m_obj, double lr,
                             double momentum, double weight_decay, int grad_bits, int momentum_bits, int acc_bits,
                             const py::object& rng) {
    auto q = checked<int32_t>("wageubn_update", "q", q_obj, -1);
    auto grad = checked<float>("wageubn_update", "grad", g_obj, -1);
    auto m = checked<float>("wageubn_update", "m", m_obj, -1);
    check_same("wageubn_update", "q", q, "grad", grad);
    check_same("wageubn_update", "q", q, "m", m);
    for (auto [name, bits] : {std::pair{"grad_bits", grad_bits}, std::pair{"momentum_bits", momentum_bits}})
      if (bits < 2 || bits > 16) fail(std::string("wageubn_update: ") + name + " must be in [2, 16], got " + std::to_string(bits));
    if (acc_bits < 2 || acc_bits > 31) fail("wageubn_update: acc_bits must be in [2, 31], got " + std::to_string(acc_bits));
    if (e < -1000 || e > 1000) fail("wageubn_update: exponent " + std::to_string(e) + " is out of range");
    const Rng r = parse_rng(rng);
    if (!r.given) fail("wageubn_update: the gradient's stochastic rounding needs an RngKey");
    py::array_t<int32_t> q_new(dims(q));
    py::array_t<float> m_new(dims(q));
    int32_t* pq = q_new.mutable_data();
    float* pm = m_new.mutable_data();
    {
      py::gil_scoped_release nogil;
      wageubn_update(q.data(), e, grad.data(), m.data(), q.size(), lr, momentum, weight_decay, grad_bits, momentum_bits,
                     acc_bits, r.key, pq, pm);
    }
    return py::make_tuple(q_new, m_new);
  }, py::arg("q"), py::arg("e"), py::arg("grad"), py::arg("m"), py::arg("lr"), py::arg("momentum"),
     py::arg("weight_decay"), py::arg("grad_bits"), py::arg("momentum_bits"), py::arg("acc_bits"), py::arg("rng"),
     "WAGEUBN's update of 24-bit weights q * 2**e with 16-bit momentum m: (new q int32, new m float32).");
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
  m.def("conv2d_s16", [](const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
    auto x = checked<int16_t>("conv2d_s16", "x", x_obj, 4);
    auto w = checked<int16_t>("conv2d_s16", "w", w_obj, 4);
    const ConvShape c = conv_shape("conv2d_s16", x, w, stride, pad);
    const Col2imShape s{c.n, c.oh(), c.ow(), c.kh, c.kw, c.c, c.h, c.w, stride, pad};
    py::array_t<int64_t> y(std::vector<py::ssize_t>{c.n, c.oh(), c.ow(), c.o});
    int64_t* p = y.mutable_data();
    py::gil_scoped_release nogil;
    conv_fwd_s16_s64(x.data(), w.data(), s, c.o, p);
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
     "int16 x[N,H,W,C] conv w[O,KH,KW,C] -> int64 y[N,OH,OW,O], exact.");
  m.def("conv2d_bwd_weight_s16", [](const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                    std::pair<int, int> kernel) {
    auto err = checked<int16_t>("conv2d_bwd_weight_s16", "err", err_obj, 4);
    auto x = checked<int16_t>("conv2d_bwd_weight_s16", "x", x_obj, 4);
    const ConvShape c = conv_shape_from_err("conv2d_bwd_weight_s16", err, x, stride, pad, kernel);
    const Col2imShape s{c.n, c.oh(), c.ow(), c.kh, c.kw, c.c, c.h, c.w, stride, pad};
    py::array_t<int64_t> dw(std::vector<py::ssize_t>{c.o, c.kh, c.kw, c.c});
    int64_t* p = dw.mutable_data();
    py::gil_scoped_release nogil;
    conv_wgrad_s16_s64(err.data(), x.data(), s, c.o, p);
    return dw;
  }, py::arg("err"), py::arg("x"), py::arg("stride"), py::arg("pad"), py::arg("kernel"),
     "int16 err[N,OH,OW,O] and x[N,H,W,C] -> int64 dw[O,KH,KW,C]: a conv's weight gradient, exact.");
  m.def("conv2d_bwd_data_s16", [](const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                  std::pair<int, int> in_hw) {
    auto err = checked<int16_t>("conv2d_bwd_data_s16", "err", err_obj, 4);
    auto w = checked<int16_t>("conv2d_bwd_data_s16", "w", w_obj, 4);
    const ConvShape c = conv_shape_from_in_hw("conv2d_bwd_data_s16", err, w, stride, pad, in_hw);
    const Col2imShape s{c.n, c.oh(), c.ow(), c.kh, c.kw, c.c, c.h, c.w, stride, pad};
    py::array_t<int64_t> dx(std::vector<py::ssize_t>{c.n, c.h, c.w, c.c});
    int64_t* p = dx.mutable_data();
    py::gil_scoped_release nogil;
    conv_bwd_data_s16_s64(err.data(), w.data(), s, c.o, p);
    return dx;
  }, py::arg("err"), py::arg("w"), py::arg("stride"), py::arg("pad"), py::arg("in_hw"),
     "int16 err[N,OH,OW,O] x w[O,KH,KW,C] -> int64 dx[N,H,W,C]: a conv's backward data, exact.");
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
