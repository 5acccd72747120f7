// The depthwise convolutions (dwconv.h): int8 passes plain and requantizing, float32 passes,
// which path a shape takes (for the kernel-path tests) and their kept scratch.
#include "bindings.h"
#include "dwconv.h"
#include "dwconv_fp16.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

// x [N, H, W, C] and w [C, KH, KW, 1] of dtype T, checked against each other.
template <typename T>
DwShape dw_shape(const char* op, const py::array& x, const py::array& w, int stride, int pad) {
  check_stride_pad(op, stride, pad);
  if (w.shape(0) != x.shape(3) || w.shape(3) != 1)
    fail(std::string(op) + ": depthwise weight shape " + shape_str(w) + " does not match " +
         std::to_string(x.shape(3)) + " input channels (C, KH, KW, 1)");
  const DwShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)), int(w.shape(1)),
                  int(w.shape(2)), stride, pad};
  check_kernel_fits(op, s.kh, s.kw, s.h, s.w, pad);
  return s;
}

// Backward data: err [N, OH, OW, C] must be the output of an input of in_hw.
DwShape dw_shape_from_in_hw(const char* op, const py::array& err, const py::array& w, int stride, int pad,
                            std::pair<int, int> in_hw) {
  check_hw(op, "in_hw", in_hw);
  py::array_t<int8_t> x_like(std::vector<py::ssize_t>{err.shape(0), in_hw.first, in_hw.second, err.shape(3)});
  const DwShape s = dw_shape<int8_t>(op, x_like, w, stride, pad);
  if (err.shape(1) != s.oh() || err.shape(2) != s.ow()) fail_err_vs_in_hw(op, err, s.h, s.w, w, stride, pad);
  return s;
}

// Weight gradient: err must be the output that x, the kernel, stride and pad give.
DwShape dw_shape_from_err(const char* op, const py::array& err, const py::array& x, int stride, int pad,
                          std::pair<int, int> kernel) {
  check_hw(op, "kernel", kernel);
  py::array_t<int8_t> w_like(std::vector<py::ssize_t>{x.shape(3), kernel.first, kernel.second, 1});
  const DwShape s = dw_shape<int8_t>(op, x, w_like, stride, pad);
  if (err.shape(0) != s.n || err.shape(1) != s.oh() || err.shape(2) != s.ow() || err.shape(3) != s.c)
    fail_err_vs_x(op, err, x, s.kh, s.kw, stride, pad);
  return s;
}

double dw_macs(const DwShape& s) { return double(s.n) * s.oh() * s.ow() * s.c * s.taps(); }

// `kernel(acc, absmax, fused)` into kept int32 scratch of `shape`, then requantized into int8
// (bindings_int8.cpp's run_requant for sums that are always int32): with a given shift the
// kernel's tasks round their own rows while in cache.
template <typename Kernel>
py::tuple requant_rows(const std::vector<py::ssize_t>& shape, int shift, RoundMode mode, const Rng& rng, Kernel kernel) {
  py::array_t<int8_t> out(shape);
  int8_t* q = out.mutable_data();
  const size_t n = static_cast<size_t>(out.size());
  int used;
  {
    py::gil_scoped_release nogil;
    thread_local Kept<std::vector<int32_t>> acc;
    if (acc.size() < n) acc.resize(n);
    int64_t absmax = -1;
    FusedRequant fused{shift, mode, rng.key, q};
    kernel(acc.data(), &absmax, shift >= 0 ? &fused : nullptr);
    used = fused.applied ? finish_fused_requant(acc.data(), n, fused, absmax)
                         : requantize(acc.data(), n, shift, 8, mode, rng.key, q, absmax);
  }
  return py::make_tuple(out, used);
}

template <typename T, typename Kernel>
py::array run_into(const std::vector<py::ssize_t>& shape, Kernel kernel) {
  py::array_t<T> out(shape);
  T* p = out.mutable_data();
  py::gil_scoped_release nogil;
  kernel(p);
  return out;
}

DwPass parse_pass(const std::string& pass) {
  if (pass == "forward") return DwPass::kForward;
  if (pass == "backward_data") return DwPass::kBackwardData;
  if (pass == "backward_weight") return DwPass::kBackwardWeight;
  fail("depthwise pass '" + pass + "' is not one of forward, backward_data, backward_weight");
}

// ---------------------------------------------------------------- int8
py::array py_dwconv2d_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
  auto x = checked<int8_t>("dwconv2d_s8", "x", x_obj, 4);
  auto w = checked<int8_t>("dwconv2d_s8", "w", w_obj, 4);
  const DwShape s = dw_shape<int8_t>("dwconv2d_s8", x, w, stride, pad);
  SerialScope serial(small_op(dw_macs(s)));
  return run_into<int32_t>({s.n, s.oh(), s.ow(), s.c}, [&](int32_t* y) { dwconv2d_fwd(x.data(), w.data(), s, y); });
}

py::tuple py_dwconv2d_requant_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad, int shift,
                                 const std::string& mode, const py::object& rng) {
  const char* op = "dwconv2d_requant_s8";
  auto x = checked<int8_t>(op, "x", x_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const DwShape s = dw_shape<int8_t>(op, x, w, stride, pad);
  const RoundMode rm = parse_mode(op, mode);
  const Rng r = parse_rng(rng);
  check_shift(op, shift, rm, r);
  SerialScope serial(small_op(dw_macs(s)));
  return requant_rows({s.n, s.oh(), s.ow(), s.c}, shift, rm, r, [&](int32_t* y, int64_t* mx, FusedRequant* f) {
    dwconv2d_fwd(x.data(), w.data(), s, y, mx, f);
  });
}

py::array py_dwconv2d_bwd_data_s8(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                  std::pair<int, int> in_hw) {
  const char* op = "dwconv2d_bwd_data_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const DwShape s = dw_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  SerialScope serial(small_op(dw_macs(s)));
  return run_into<int32_t>({s.n, s.h, s.w, s.c}, [&](int32_t* dx) { dwconv2d_bwd_data(err.data(), w.data(), s, dx); });
}

py::tuple py_dwconv2d_bwd_data_requant_s8(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                          std::pair<int, int> in_hw, int shift, const std::string& mode,
                                          const py::object& rng) {
  const char* op = "dwconv2d_bwd_data_requant_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const DwShape s = dw_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  const RoundMode rm = parse_mode(op, mode);
  const Rng r = parse_rng(rng);
  check_shift(op, shift, rm, r);
  SerialScope serial(small_op(dw_macs(s)));
  return requant_rows({s.n, s.h, s.w, s.c}, shift, rm, r, [&](int32_t* dx, int64_t* mx, FusedRequant* f) {
    dwconv2d_bwd_data(err.data(), w.data(), s, dx, mx, f);
  });
}

py::array py_dwconv2d_bwd_weight_s8(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                    std::pair<int, int> kernel) {
  const char* op = "dwconv2d_bwd_weight_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto x = checked<int8_t>(op, "x", x_obj, 4);
  const DwShape s = dw_shape_from_err(op, err, x, stride, pad, kernel);
  SerialScope serial(small_op(dw_macs(s)));
  const std::vector<py::ssize_t> shape{s.c, s.kh, s.kw, 1};
  if (needs_int64(static_cast<long long>(s.n) * s.oh() * s.ow()))
    return run_into<int64_t>(shape, [&](int64_t* dw) { dwconv2d_bwd_weight(err.data(), x.data(), s, dw); });
  return run_into<int32_t>(shape, [&](int32_t* dw) { dwconv2d_bwd_weight(err.data(), x.data(), s, dw); });
}

// ---------------------------------------------------------------- float32
py::array py_dwconv2d_f32(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
  auto x = checked<float>("dwconv2d_f32", "x", x_obj, 4);
  auto w = checked<float>("dwconv2d_f32", "w", w_obj, 4);
  const DwShape s = dw_shape<float>("dwconv2d_f32", x, w, stride, pad);
  SerialScope serial(small_op(dw_macs(s)));
  return run_into<float>({s.n, s.oh(), s.ow(), s.c}, [&](float* y) { dwconv2d_fwd_f32(x.data(), w.data(), s, y); });
}

py::array py_dwconv2d_bwd_data_f32(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                   std::pair<int, int> in_hw) {
  const char* op = "dwconv2d_bwd_data_f32";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto w = checked<float>(op, "w", w_obj, 4);
  const DwShape s = dw_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  SerialScope serial(small_op(dw_macs(s)));
  return run_into<float>({s.n, s.h, s.w, s.c}, [&](float* dx) { dwconv2d_bwd_data_f32(err.data(), w.data(), s, dx); });
}

py::array py_dwconv2d_bwd_weight_f32(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                     std::pair<int, int> kernel) {
  const char* op = "dwconv2d_bwd_weight_f32";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto x = checked<float>(op, "x", x_obj, 4);
  const DwShape s = dw_shape_from_err(op, err, x, stride, pad, kernel);
  SerialScope serial(small_op(dw_macs(s)));
  return run_into<float>({s.c, s.kh, s.kw, 1}, [&](float* dw) { dwconv2d_bwd_weight_f32(err.data(), x.data(), s, dw); });
}

// ---------------------------------------------------------------- FP8: FP16 products, chunked sums
py::array py_dwconv2d_fp16_chunked(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad, int chunk,
                                   bool fp16_adds) {
  const char* op = "dwconv2d_fp16_chunked";
  auto x = checked<float>(op, "x", x_obj, 4);
  auto w = checked<float>(op, "w", w_obj, 4);
  check_positive(op, "chunk", chunk);
  const DwShape s = dw_shape<float>(op, x, w, stride, pad);
  return run_into<float>({s.n, s.oh(), s.ow(), s.c},
                         [&](float* y) { dwconv2d_fwd_fp16_chunked(x.data(), w.data(), s, chunk, fp16_adds, y); });
}

py::array py_dwconv2d_bwd_data_fp16(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                    std::pair<int, int> in_hw) {
  const char* op = "dwconv2d_bwd_data_fp16";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto w = checked<float>(op, "w", w_obj, 4);
  const DwShape s = dw_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  return run_into<float>({s.n, s.h, s.w, s.c}, [&](float* dx) { dwconv2d_bwd_data_fp16(err.data(), w.data(), s, dx); });
}

py::array py_dwconv2d_bwd_weight_fp16_chunked(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                              std::pair<int, int> kernel, int chunk, bool fp16_adds) {
  const char* op = "dwconv2d_bwd_weight_fp16_chunked";
  auto err = checked<float>(op, "err", err_obj, 4);
  auto x = checked<float>(op, "x", x_obj, 4);
  check_positive(op, "chunk", chunk);
  const DwShape s = dw_shape_from_err(op, err, x, stride, pad, kernel);
  return run_into<float>({s.c, s.kh, s.kw, 1}, [&](float* dw) {
    dwconv2d_bwd_weight_fp16_chunked(err.data(), x.data(), s, chunk, fp16_adds, dw);
  });
}

// ---------------------------------------------------------------- which path, what scratch
DwShape sizes_shape(const char* op, const std::vector<int>& shape) {
  if (shape.size() != 8)
    fail(std::string(op) + ": shape is (n, h, w, c, kh, kw, stride, pad), got " + std::to_string(shape.size()) + " sizes");
  return DwShape{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7]};
}

std::string py_dwconv_path(const std::string& pass, const std::vector<int>& shape) {
  return dwconv_path(parse_pass(pass), sizes_shape("dwconv_path", shape));
}

py::dict py_dwconv_scratch_bytes(const std::string& pass, const std::vector<int>& shape, int element_bytes, bool requant) {
  const DwShape s = sizes_shape("dwconv_scratch_bytes", shape);
  const DwPass p = parse_pass(pass);
  py::dict out;
  out["dwconv_source_rows"] = dwconv_scratch(p, s, element_bytes).source_rows;
  if (requant && p != DwPass::kBackwardWeight)   // the int32 sums requant_rows keeps
    out["dwconv_requant_acc"] = size_t(s.n) * s.c * (p == DwPass::kForward ? size_t(s.oh()) * s.ow() : size_t(s.h) * s.w) * 4;
  return out;
}

}  // namespace

void dsptrain::bind::def_dwconv(py::module_& m) {
  m.def("dwconv2d_s8", &py_dwconv2d_s8, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        "int8 depthwise forward -> int32 NHWC.");
  m.def("dwconv2d_requant_s8", &py_dwconv2d_requant_s8, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        py::arg("shift"), py::arg("mode"), py::arg("rng"), "dwconv2d_s8 then requantize (shift < 0: estimate it). Returns (int8, shift).");
  m.def("dwconv2d_bwd_data_s8", &py_dwconv2d_bwd_data_s8, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"));
  m.def("dwconv2d_bwd_data_requant_s8", &py_dwconv2d_bwd_data_requant_s8, py::arg("err"), py::arg("w"),
        py::arg("stride"), py::arg("pad"), py::arg("in_hw"), py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("dwconv2d_bwd_weight_s8", &py_dwconv2d_bwd_weight_s8, py::arg("err"), py::arg("x"), py::arg("stride"),
        py::arg("pad"), py::arg("kernel"));
  m.def("dwconv2d_f32", &py_dwconv2d_f32, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"));
  m.def("dwconv2d_bwd_data_f32", &py_dwconv2d_bwd_data_f32, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"));
  m.def("dwconv2d_bwd_weight_f32", &py_dwconv2d_bwd_weight_f32, py::arg("err"), py::arg("x"), py::arg("stride"),
        py::arg("pad"), py::arg("kernel"));
  m.def("dwconv2d_fp16_chunked", &py_dwconv2d_fp16_chunked, py::arg("x"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("chunk"), py::arg("fp16_adds"));
  m.def("dwconv2d_bwd_data_fp16", &py_dwconv2d_bwd_data_fp16, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"));
  m.def("dwconv2d_bwd_weight_fp16_chunked", &py_dwconv2d_bwd_weight_fp16_chunked, py::arg("err"), py::arg("x"),
        py::arg("stride"), py::arg("pad"), py::arg("kernel"), py::arg("chunk"), py::arg("fp16_adds"));
  m.def("dwconv_path", &py_dwconv_path, py::arg("pass_"), py::arg("shape"),
        "The loop an int8 depthwise pass of this shape runs on the active ISA.");
  m.def("dwconv_scratch_bytes", &py_dwconv_scratch_bytes, py::arg("pass_"), py::arg("shape"), py::arg("element_bytes"),
        py::arg("requant"), "Bytes of the depthwise kernels' kept scratch by buffer, for one pass of this shape.");
}
