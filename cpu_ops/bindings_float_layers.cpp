// The emulated recipes' float layers and updates: ReLU, max-pool (and the two fused),
// Octo's compensation layer forward and backward, SGD, WAGEUBN's integer-grid update.
#include "bindings.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

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
  if (s.oh() != err.shape(1) || s.ow() != err.shape(2)) fail_pool_err_vs_in_hw(op, err, in_hw, kernel, stride);
  return {dx, s};
}

// ---------------------------------------------------------------- the bindings

auto py_relu_f32(const py::handle& obj) {
  auto x = checked<float>("relu_f32", "x", obj, -1);
  py::array_t<float> y(dims(x));
  float* p = y.mutable_data();
  py::gil_scoped_release nogil;
  relu_f32(x.data(), x.size(), p);
  return y;
}

auto py_relu_bwd_f32(const py::handle& err_obj, const py::handle& y_obj) {
  auto err = checked<float>("relu_bwd_f32", "err", err_obj, -1);
  auto y = checked<float>("relu_bwd_f32", "y", y_obj, -1);
  check_same("relu_bwd_f32", "err", err, "y", y);
  py::array_t<float> dx(dims(err));
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  relu_bwd_f32(err.data(), y.data(), err.size(), p);
  return dx;
}

auto py_compensation_fwd(const py::handle& z_obj, const py::handle& s_obj, const py::handle& b_obj) {
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
}

auto py_compensation_bwd(const py::handle& e_obj, const py::handle& z_obj, const py::handle& s_obj,
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
}

auto py_pool_compensation_bwd(const py::handle& e_obj, const py::handle& g_obj, const py::handle& i_obj,
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
}

auto py_maxpool_f32(const py::handle& obj, int kernel, int stride) {
  return maxpool_forward<float>("maxpool_f32", obj, kernel, stride, maxpool_f32);
}

auto py_maxpool_bwd_f32(const py::handle& err_obj, const py::handle& idx_obj, int kernel, int stride,
                              std::pair<int, int> in_hw) {
  auto err = checked<float>("maxpool_bwd_f32", "err", err_obj, 4);
  auto idx = checked<uint8_t>("maxpool_bwd_f32", "argmax", idx_obj, 4);
  check_same("maxpool_bwd_f32", "err", err, "argmax", idx);
  auto [dx, s] = pool_input_grad("maxpool_bwd_f32", err, in_hw, kernel, stride);
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  maxpool_bwd_f32(err.data(), idx.data(), s, p);
  return dx;
}

auto py_relu_maxpool_f32(const py::handle& obj, int kernel, int stride) {
  return maxpool_forward<float>("relu_maxpool_f32", obj, kernel, stride, relu_maxpool_f32);
}

auto py_relu_maxpool_bwd_f32(const py::handle& err_obj, const py::handle& y_obj, const py::handle& idx_obj,
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
}

auto py_sgd_f32(const py::handle& w_obj, const py::handle& g_obj, const py::handle& v_obj, float lr, float momentum,
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
}

// A layer's parameters in one call (Octo's weight and compensation scale and shift): a
  // call per parameter cost more in Python and dispatch than their few elements' arithmetic.
auto py_sgd_f32_group(const py::list& params, float lr, float momentum, float weight_decay, bool nesterov) {
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
}

auto py_wageubn_update(const py::handle& q_obj, int e, const py::handle& g_obj, const py::handle& m_obj, double lr,
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
}

}  // namespace

void dsptrain::bind::def_float_layers(py::module_& m) {
  m.def("relu_f32", &py_relu_f32, py::arg("x"));
  m.def("relu_bwd_f32", &py_relu_bwd_f32, py::arg("err"), py::arg("y"));
  m.def("compensation_fwd", &py_compensation_fwd, py::arg("z"), py::arg("scale"), py::arg("shift"));
  m.def("compensation_bwd", &py_compensation_bwd, py::arg("err"), py::arg("z"), py::arg("scale"),
        py::arg("gate") = py::none(),
        "Octo's compensation backward (dz, d_scale, d_shift); gate: a following ReLU's output, err taken where it is > 0.");
  m.def("pool_compensation_bwd", &py_pool_compensation_bwd, py::arg("err"), py::arg("gate"), py::arg("argmax"),
        py::arg("kernel"), py::arg("stride"), py::arg("z"), py::arg("scale"),
        "compensation_bwd(maxpool_bwd_f32(err, argmax) or relu_maxpool_bwd_f32(err, gate, argmax), z, scale) in one pass "
        "(windows that do not overlap): (dz, d_scale, d_shift).");
  m.def("maxpool_f32", &py_maxpool_f32, py::arg("x"), py::arg("kernel"), py::arg("stride"));
  m.def("maxpool_bwd_f32", &py_maxpool_bwd_f32, py::arg("err"), py::arg("argmax"), py::arg("kernel"),
        py::arg("stride"), py::arg("in_hw"));
  m.def("relu_maxpool_f32", &py_relu_maxpool_f32, py::arg("x"), py::arg("kernel"), py::arg("stride"),
        "maxpool_f32(relu_f32(x)) in one pass: (y, argmax).");
  m.def("relu_maxpool_bwd_f32", &py_relu_maxpool_bwd_f32, py::arg("err"), py::arg("y"), py::arg("argmax"),
        py::arg("kernel"), py::arg("stride"), py::arg("in_hw"),
        "maxpool_bwd_f32(relu_bwd_f32(err, y), argmax, ...): the backward of relu_maxpool_f32 from its pooled y.");
  m.def("sgd_f32", &py_sgd_f32, py::arg("w"), py::arg("grad"), py::arg("v"), py::arg("lr"), py::arg("momentum"),
        py::arg("weight_decay"), py::arg("nesterov"), "PyTorch's SGD step in float32: (new w, new velocity).");
  m.def("sgd_f32_group", &py_sgd_f32_group, py::arg("params"), py::arg("lr"), py::arg("momentum"),
        py::arg("weight_decay"), py::arg("nesterov"),
        "sgd_f32 of each (w, grad, v) in params, in one call: [(new w, new velocity)].");
  m.def("wageubn_update", &py_wageubn_update, py::arg("q"), py::arg("e"), py::arg("grad"), py::arg("m"), py::arg("lr"),
        py::arg("momentum"), py::arg("weight_decay"), py::arg("grad_bits"), py::arg("momentum_bits"),
        py::arg("acc_bits"), py::arg("rng"),
        "WAGEUBN's update of 24-bit weights q * 2**e with 16-bit momentum m: (new q int32, new m float32).");
}
