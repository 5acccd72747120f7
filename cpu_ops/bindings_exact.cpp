// Exact products of the emulated recipes: MLS's int16 matmul and convolutions (int64 sums),
// FP8's chunked-FP16 matmul, and the patch copies (im2col, col2im) they are composed with;
// the dilated convolution's int8 patch gathers (dilated_gather.h).
#include "bindings.h"
#include "dilated_gather.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

// ---------------------------------------------------------------- the bindings

auto py_matmul_s16(const py::handle& a_obj, const py::handle& b_obj, bool a_transposed) {
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
}

auto py_conv2d_s16(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
  auto x = checked<int16_t>("conv2d_s16", "x", x_obj, 4);
  auto w = checked<int16_t>("conv2d_s16", "w", w_obj, 4);
  const ConvShape c = conv_shape("conv2d_s16", x, w, stride, pad);
  const Col2imShape s{c.n, c.oh(), c.ow(), c.kh, c.kw, c.c, c.h, c.w, stride, pad};
  py::array_t<int64_t> y(std::vector<py::ssize_t>{c.n, c.oh(), c.ow(), c.o});
  int64_t* p = y.mutable_data();
  py::gil_scoped_release nogil;
  conv_fwd_s16_s64(x.data(), w.data(), s, c.o, p);
  return y;
}

auto py_conv2d_bwd_weight_s16(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
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
}

auto py_conv2d_bwd_data_s16(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
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
}

auto py_im2col(const py::handle& obj, int kh, int kw, int stride, int pad) {
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
}

auto py_col2im(const py::handle& obj, std::vector<int> err_nhw, std::vector<int> kernel_hwc, int stride, int pad,
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
}

auto py_matmul_fp16_chunked(const py::handle& a_obj, const py::handle& b_obj, bool a_transposed, int chunk,
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
}

GatherShape gather_shape(const char* fn, const py::array_t<int8_t>& src, std::pair<int, int> kernel, int stride,
                         int pad, int dilation, std::pair<int, int> rows_hw) {
  check_positive(fn, "stride", stride);
  check_positive(fn, "dilation", dilation);
  check_positive(fn, "kh", kernel.first);
  check_positive(fn, "kw", kernel.second);
  if (pad < 0 || rows_hw.first < 1 || rows_hw.second < 1)
    fail(std::string(fn) + ": kernel " + std::to_string(kernel.first) + "x" + std::to_string(kernel.second) +
         " dilation " + std::to_string(dilation) + " padded by " + std::to_string(pad) + " gives no pixel of " +
         shape_str(src));
  return {int(src.shape(0)), int(src.shape(1)), int(src.shape(2)), int(src.shape(3)), kernel.first, kernel.second,
          stride, pad, dilation, rows_hw.first, rows_hw.second};
}

auto py_dilated_patches_s8(const py::handle& obj, std::pair<int, int> kernel, int stride, int pad, int dilation,
                           bool transposed) {
  auto x = checked<int8_t>("dilated_patches_s8", "x", obj, 4);
  auto out = [&](int size, int k) { return (size + 2 * pad - (k - 1) * dilation - 1) / stride + 1; };
  const int oh = int(x.shape(1)) + 2 * pad >= (kernel.first - 1) * dilation + 1 ? out(int(x.shape(1)), kernel.first) : 0;
  const int ow = int(x.shape(2)) + 2 * pad >= (kernel.second - 1) * dilation + 1 ? out(int(x.shape(2)), kernel.second) : 0;
  const GatherShape s = gather_shape("dilated_patches_s8", x, kernel, stride, pad, dilation, {oh, ow});
  const py::ssize_t rows = py::ssize_t(s.n) * oh * ow, depth = py::ssize_t(s.kh) * s.kw * s.c;
  py::array_t<int8_t> cols(transposed ? std::vector<py::ssize_t>{depth, rows} : std::vector<py::ssize_t>{rows, depth});
  int8_t* p = cols.mutable_data();
  py::gil_scoped_release nogil;
  dilated_patches_s8(x.data(), s, transposed, p);
  return cols;
}

auto py_transposed_patches_s8(const py::handle& obj, std::pair<int, int> kernel, int stride, int pad, int dilation,
                              std::pair<int, int> in_hw) {
  auto err = checked<int8_t>("transposed_patches_s8", "err", obj, 4);
  const GatherShape s = gather_shape("transposed_patches_s8", err, kernel, stride, pad, dilation, in_hw);
  const py::ssize_t rows = py::ssize_t(s.n) * s.oh * s.ow, depth = py::ssize_t(s.kh) * s.kw * s.c;
  py::array_t<int8_t> cols(std::vector<py::ssize_t>{rows, depth});
  int8_t* p = cols.mutable_data();
  py::gil_scoped_release nogil;
  transposed_patches_s8(err.data(), s, p);
  return cols;
}

auto py_transpose_s8(const py::handle& obj) {
  auto a = checked<int8_t>("transpose_s8", "a", obj, 2);
  const int m = int(a.shape(0)), n = int(a.shape(1));
  py::array_t<int8_t> b(std::vector<py::ssize_t>{n, m});
  int8_t* p = b.mutable_data();
  py::gil_scoped_release nogil;
  transpose_s8(a.data(), m, n, p);
  return b;
}

}  // namespace

void dsptrain::bind::def_exact_products(py::module_& m) {
  m.def("dilated_patches_s8", &py_dilated_patches_s8, py::arg("x"), py::arg("kernel"), py::arg("stride"),
        py::arg("pad"), py::arg("dilation"), py::arg("transposed") = false,
        "int8 NHWC -> [N*OH*OW, KH*KW*C] patches, taps dilation apart, zero padding (transposed: [K, N*OH*OW]).");
  m.def("transposed_patches_s8", &py_transposed_patches_s8, py::arg("err"), py::arg("kernel"), py::arg("stride"),
        py::arg("pad"), py::arg("dilation"), py::arg("in_hw"),
        "int8 err NHWC -> [N*H*W, KH*KW*O]: a conv's backward data as a stride-1 GEMM's patches (layout.gemm_transposed).");
  m.def("transpose_s8", &py_transpose_s8, py::arg("a"), "int8 a[M, N] -> a.T [N, M], contiguous.");
  m.def("matmul_s16", &py_matmul_s16, py::arg("a"), py::arg("b"), py::arg("a_transposed"),
        "int16 (a.T if a_transposed else a) @ b[K,N] -> int64 [M,N], exact.");
  m.def("conv2d_s16", &py_conv2d_s16, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        "int16 x[N,H,W,C] conv w[O,KH,KW,C] -> int64 y[N,OH,OW,O], exact.");
  m.def("conv2d_bwd_weight_s16", &py_conv2d_bwd_weight_s16, py::arg("err"), py::arg("x"), py::arg("stride"),
        py::arg("pad"), py::arg("kernel"),
        "int16 err[N,OH,OW,O] and x[N,H,W,C] -> int64 dw[O,KH,KW,C]: a conv's weight gradient, exact.");
  m.def("conv2d_bwd_data_s16", &py_conv2d_bwd_data_s16, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"),
        "int16 err[N,OH,OW,O] x w[O,KH,KW,C] -> int64 dx[N,H,W,C]: a conv's backward data, exact.");
  m.def("im2col", &py_im2col, py::arg("x"), py::arg("kh"), py::arg("kw"), py::arg("stride"), py::arg("pad"),
        "NHWC int16/float32 -> [N*OH*OW, KH*KW*C] patches (zero padding), its own dtype.");
  m.def("col2im", &py_col2im, py::arg("dcols"), py::arg("err_nhw"), py::arg("kernel_hwc"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"),
        "Scatter-add patch sums (int64 or float64) onto NHWC: a convolution's backward data.");
  m.def("matmul_fp16_chunked", &py_matmul_fp16_chunked, py::arg("a"), py::arg("b"), py::arg("a_transposed"),
        py::arg("chunk"), py::arg("fp16_adds"),
        "FP16 values (a.T if a_transposed else a) @ b[K,N] with chunk-based FP16 accumulation, as float32.");
}
