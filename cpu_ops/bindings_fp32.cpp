// The FP32 recipe's products (gemm_f32.h, conv_f32.h): the same arguments as the ref
// backend's gemm_f32 / conv2d*_f32 hooks, float32 in and out.
#include "bindings.h"

#include "conv_f32.h"
#include "gemm_f32.h"

using namespace dsptrain;
using namespace dsptrain::bind;

// ---------------------------------------------------------------- the bindings
namespace {

auto py_gemm_f32(const py::handle& a_obj, const py::handle& b_obj, bool b_transposed) {
  auto a = checked<float>("gemm_f32", "a", a_obj, 2);
  auto b = checked<float>("gemm_f32", "b", b_obj, 2);
  const int m_ = int(a.shape(0)), k = int(a.shape(1)), n = int(b.shape(b_transposed ? 0 : 1));
  if (b.shape(b_transposed ? 1 : 0) != k)
    fail("gemm_f32: a " + shape_str(a) + " and b " + shape_str(b) + " differ in K (" +
         (b_transposed ? "a @ b.T" : "a @ b") + ")");
  py::array_t<float> c(std::vector<py::ssize_t>{m_, n});
  float* p = c.mutable_data();
  py::gil_scoped_release nogil;
  if (!b_transposed) {
    gemm_f32({a.data(), k, b.data(), n, p, n, m_, n, k, false});
    return c;
  }
  std::vector<float> bt(static_cast<size_t>(k) * n);   // b[N,K] as [K,N]: rows of B along N
  for (int j = 0; j < n; ++j)
    for (int kk = 0; kk < k; ++kk) bt[static_cast<size_t>(kk) * n + j] = b.data()[static_cast<size_t>(j) * k + kk];
  gemm_f32({a.data(), k, bt.data(), n, p, n, m_, n, k, false});
  return c;
}

auto py_conv2d_f32(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
  auto x = checked<float>("conv2d_f32", "x", x_obj, 4);
  auto w = checked<float>("conv2d_f32", "w", w_obj, 4);
  const ConvShape s = conv_shape("conv2d_f32", x, w, stride, pad);
  py::array_t<float> y(std::vector<py::ssize_t>{s.n, s.oh(), s.ow(), s.o});
  float* p = y.mutable_data();
  py::gil_scoped_release nogil;
  conv2d_f32(x.data(), w.data(), s, p);
  return y;
}

auto py_conv2d_bwd_data_f32(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                  std::pair<int, int> in_hw) {
  const char* op = "conv2d_bwd_data_f32";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto w = checked<float>(op, "w", w_obj, 4);
  const ConvShape s = conv_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  py::array_t<float> dx(std::vector<py::ssize_t>{s.n, s.h, s.w, s.c});
  float* p = dx.mutable_data();
  py::gil_scoped_release nogil;
  conv2d_bwd_data_f32(err.data(), w.data(), s, p);
  return dx;
}

auto py_conv2d_bwd_weight_f32(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                    std::pair<int, int> kernel) {
  const char* op = "conv2d_bwd_weight_f32";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto x = checked<float>(op, "x", x_obj, 4);
  const ConvShape s = conv_shape_from_err(op, err, x, stride, pad, kernel);
  py::array_t<float> dw(std::vector<py::ssize_t>{s.o, s.kh, s.kw, s.c});
  float* p = dw.mutable_data();
  py::gil_scoped_release nogil;
  conv2d_bwd_weight_f32(err.data(), x.data(), s, p);
  return dw;
}

}  // namespace

void dsptrain::bind::def_fp32_products(py::module_& m) {
  m.def("gemm_f32", &py_gemm_f32, py::arg("a"), py::arg("b"),
        py::arg("b_transposed") = true, "float32 a[M,K] @ b[N,K].T (b_transposed) or a @ b[K,N].");
  m.def("conv2d_f32", &py_conv2d_f32, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        "float32 NHWC x * OHWC w.");
  m.def("conv2d_bwd_data_f32", &py_conv2d_bwd_data_f32, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"));
  m.def("conv2d_bwd_weight_f32", &py_conv2d_bwd_weight_f32, py::arg("err"), py::arg("x"), py::arg("stride"),
        py::arg("pad"), py::arg("kernel"));
}
