// NITI's batch norm fused with its casts (bn_cast.h): int8 in, int8 out, each way.
#include "bindings.h"
#include "bn_cast.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

BnActFn parse_act(const char* op, const std::string& act, const std::pair<double, double>& bounds) {
  if (act == "none") return {BnAct::kNone, 0.0, 0.0};
  if (act == "relu") return {BnAct::kRelu, 0.0, 0.0};
  if (act == "clip") return {BnAct::kClip, bounds.first, bounds.second};
  fail(std::string(op) + ": activation '" + act + "' is not one of none, clip, relu");
}

FloatRound parse_round(const char* op, const std::string& mode, const Rng& rng) {
  FloatRound m;
  if (mode == "round") m = FloatRound::kRound;
  else if (mode == "nearest_even") m = FloatRound::kNearestEven;
  else if (mode == "sto") m = FloatRound::kSto;
  else fail(std::string(op) + ": rounding mode '" + mode + "' is not one of round, nearest_even, sto");
  if (m == FloatRound::kSto && !rng.given) fail(std::string(op) + ": stochastic rounding needs an RngKey");
  return m;
}

// x's channels (its last dimension) and rows (the rest), at least one of each
std::pair<size_t, size_t> rows_channels(const char* op, const Array<int8_t>& x) {
  if (x.ndim() < 1 || x.size() == 0) fail(std::string(op) + ": x " + shape_str(x) + " is empty");
  const size_t c = size_t(x.shape(x.ndim() - 1));
  return {size_t(x.size()) / c, c};
}

Array<float> per_channel(const char* op, const char* name, const py::handle& obj, size_t c) {
  auto a = checked<float>(op, name, obj, 1);
  if (size_t(a.shape(0)) != c)
    fail(std::string(op) + ": " + name + " " + shape_str(a) + " does not match " + std::to_string(c) + " channels");
  return a;
}

auto py_bn_act_s8(const py::handle& x_obj, int ex, const py::handle& g_obj, const py::handle& b_obj,
                  const py::handle& m_obj, const py::handle& v_obj, bool training, double momentum, double eps,
                  const std::string& act, std::pair<double, double> bounds, const std::string& mode,
                  const py::object& rng) {
  const char* op = "bn_act_s8";
  auto x = checked<int8_t>(op, "x", x_obj, -1);
  const auto [rows, c] = rows_channels(op, x);
  auto gamma = per_channel(op, "gamma", g_obj, c), beta = per_channel(op, "beta", b_obj, c);
  auto mean = per_channel(op, "mean", m_obj, c), var = per_channel(op, "var", v_obj, c);
  const BnActFn fn = parse_act(op, act, bounds);
  const Rng r = parse_rng(rng);
  const FloatRound fm = parse_round(op, mode, r);
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<int8_t> y(dims(x));
  py::array_t<double> stats(std::vector<py::ssize_t>{2, py::ssize_t(c)});
  py::array_t<float> new_mean(cs), new_var(cs);
  int ey = 0;
  {
    int8_t* py_ = y.mutable_data();
    double* ps = stats.mutable_data();
    float *pm = new_mean.mutable_data(), *pv = new_var.mutable_data();
    py::gil_scoped_release nogil;
    bn_act_s8(x.data(), rows, c, ex, gamma.data(), beta.data(), mean.data(), var.data(), training, momentum, eps, fn,
              fm, r.key, py_, &ey, ps, pm, pv);
  }
  return py::make_tuple(y, ey, stats, new_mean, new_var);
}

auto py_bn_act_bwd_s8(const py::handle& e_obj, int ee, const py::handle& x_obj, int ex, const py::handle& s_obj,
                      const py::handle& g_obj, const py::handle& b_obj, const std::string& act,
                      std::pair<double, double> bounds, const std::string& mode, const py::object& rng,
                      bool input_error) {
  const char* op = "bn_act_bwd_s8";
  auto err = checked<int8_t>(op, "err", e_obj, -1);
  auto x = checked<int8_t>(op, "x", x_obj, -1);
  check_same(op, "err", err, "x", x);
  const auto [rows, c] = rows_channels(op, err);
  auto stats = checked<double>(op, "stats", s_obj, 2);
  if (stats.shape(0) != 2 || size_t(stats.shape(1)) != c)
    fail(std::string(op) + ": stats " + shape_str(stats) + " is not (2, " + std::to_string(c) + ")");
  auto gamma = per_channel(op, "gamma", g_obj, c), beta = per_channel(op, "beta", b_obj, c);
  const BnActFn fn = parse_act(op, act, bounds);
  const Rng r = parse_rng(rng);
  const FloatRound fm = parse_round(op, mode, r);
  const std::vector<py::ssize_t> cs{py::ssize_t(c)};
  py::array_t<int8_t> dx(input_error ? dims(err) : std::vector<py::ssize_t>{0});
  py::array_t<float> dg(cs), db(cs);
  int edx = 0;
  {
    int8_t* pd = input_error ? dx.mutable_data() : nullptr;
    float *pg = dg.mutable_data(), *pb = db.mutable_data();
    py::gil_scoped_release nogil;
    bn_act_bwd_s8(err.data(), ee, x.data(), ex, rows, c, stats.data(), gamma.data(), beta.data(), fn, fm, r.key, pd,
                  &edx, pg, pb);
  }
  return py::make_tuple(input_error ? py::object(dx) : py::object(py::none()), edx, dg, db);
}

}  // namespace

void dsptrain::bind::def_bn_casts(py::module_& m) {
  m.def("bn_act_s8", &py_bn_act_s8, py::arg("x"), py::arg("ex"), py::arg("gamma"), py::arg("beta"), py::arg("mean"),
        py::arg("var"), py::arg("training"), py::arg("momentum"), py::arg("eps"), py::arg("act"), py::arg("bounds"),
        py::arg("mode"), py::arg("rng"),
        "int8 x * 2**ex -> batch norm -> activation -> int8: (y, ey, stats (mean; 1/std) float64, new mean, new var).");
  m.def("bn_act_bwd_s8", &py_bn_act_bwd_s8, py::arg("err"), py::arg("ee"), py::arg("x"), py::arg("ex"),
        py::arg("stats"), py::arg("gamma"), py::arg("beta"), py::arg("act"), py::arg("bounds"), py::arg("mode"),
        py::arg("rng"), py::arg("input_error") = true,
        "bn_act_s8's backward from int8 err and x: (dx, edx, d gamma, d beta); dx None without input_error.");
}
