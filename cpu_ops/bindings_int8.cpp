// The int8 products: GEMM (plain, requantizing, on packed weights) and the three
// convolution passes, with the kernels' scratch sizes for the memory planner.
#include "bindings.h"
#include "conv_f32.h"
#include "conv_grouped.h"

using namespace dsptrain;
using namespace dsptrain::bind;

namespace {

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

// Runs `kernel(T* acc, int64_t* absmax, FusedRequant* fused)` into per-thread scratch,
// then requantizes into int8 `shape` (with the kernel's own max |acc| when it took one:
// absmax >= 0). With a given shift an int32 kernel may round its tiles itself (fused).
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
      kernel(acc.data(), &absmax, static_cast<FusedRequant*>(nullptr));
      used = requantize(acc.data(), n, shift, 8, mode, rng.key, q, absmax);
    } else {
      thread_local Kept<std::vector<int32_t>> acc;
      if (acc.size() < n) acc.resize(n);
      int64_t absmax = -1;
      FusedRequant fused{shift, mode, rng.key, q};
      kernel(acc.data(), &absmax, shift >= 0 ? &fused : nullptr);
      if (fused.applied && !fused.acc_written && activation_shift(absmax, 8) > shift) {
        // a lane kernel rounded from its registers and kept no accumulators, and the given
        // shift would saturate: run it again for them, then the estimate, as requantize does
        absmax = -1;
        kernel(acc.data(), &absmax, static_cast<FusedRequant*>(nullptr));
        used = requantize(acc.data(), n, -1, 8, mode, rng.key, q, absmax);
      } else {
        used = fused.applied ? finish_fused_requant(acc.data(), n, fused, absmax)
                             : requantize(acc.data(), n, shift, 8, mode, rng.key, q, absmax);
      }
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
void gemm_any(const GemmArgs& g, T* c, int64_t* absmax = nullptr, FusedRequant* fused = nullptr) {  // int32 only
  MatrixS8 a{g.a.data(), g.k, 1}, b{g.b.data(), g.k, 1};
  if constexpr (std::is_same_v<T, int64_t>) gemm_s8_s64(a, b, g.m, g.n, g.k, c);
  else gemm_s8_s32(a, b, g.m, g.n, g.k, c, false, absmax, fused);
}

struct ConvArgs {
  Array<int8_t> x, w;
  ConvShape s;
};

ConvArgs bwd_data_args(const char* op, const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                       std::pair<int, int> in_hw) {
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const ConvShape s = conv_shape_from_in_hw(op, err, w, stride, pad, in_hw);
  return {err, w, s};
}

// ---------------------------------------------------------------- packed weights
struct PackedWeights {
  PackedB packed;
};

}  // namespace

// ---------------------------------------------------------------- the bindings
namespace {

// ------------------------------------------------------------ GEMM
auto py_gemm_s8(const py::handle& a, const py::handle& b) {
  const GemmArgs g = gemm_args("gemm_s8", a, b);
  SerialScope serial(small_op(double(g.m) * g.n * g.k));
  return run_acc(needs_int64(g.k), {g.m, g.n}, [&](auto* c) { gemm_any(g, c); });
}

auto py_pack_weights(const py::handle& b_obj) {
  auto b = checked<int8_t>("pack_weights", "b", b_obj, 2);
  if (needs_int64(b.shape(1)))
    fail("pack_weights: K = " + std::to_string(b.shape(1)) + " needs int64 accumulators; use gemm_s8");
  auto out = std::make_unique<PackedWeights>();
  {
    py::gil_scoped_release nogil;
    pack_b(MatrixS8{b.data(), b.shape(1), 1}, int(b.shape(0)), int(b.shape(1)), active_isa(), &out->packed);
  }
  return out;
}

auto py_gemm_packed(const py::handle& a_obj, const PackedWeights& pw) {
  auto a = checked<int8_t>("gemm_packed", "a", a_obj, 2);
  if (a.shape(1) != pw.packed.k)
    fail("gemm_packed: a " + shape_str(a) + " has K != packed weights' K " + std::to_string(pw.packed.k));
  py::array_t<int32_t> out(std::vector<py::ssize_t>{a.shape(0), pw.packed.n});
  int32_t* c = out.mutable_data();
  py::gil_scoped_release nogil;
  gemm_packed(MatrixS8{a.data(), a.shape(1), 1}, int(a.shape(0)), pw.packed, c, pw.packed.n);
  return out;
}

auto py_gemm_requant_s8(const py::handle& a, const py::handle& b, int shift, const std::string& mode,
                              const py::object& rng) {
  const GemmArgs g = gemm_args("gemm_requant_s8", a, b);
  const RoundMode rm = parse_mode("gemm_requant_s8", mode);
  const Rng r = parse_rng(rng);
  check_shift("gemm_requant_s8", shift, rm, r);
  SerialScope serial(small_op(double(g.m) * g.n * g.k));
  return run_requant(needs_int64(g.k), {g.m, g.n}, shift, rm, r, [&](auto* c, int64_t* mx, FusedRequant* f) { gemm_any(g, c, mx, f); });
}

// ------------------------------------------------------------ convolutions
auto py_conv2d_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
  auto x = checked<int8_t>("conv2d_s8", "x", x_obj, 4);
  auto w = checked<int8_t>("conv2d_s8", "w", w_obj, 4);
  const ConvShape s = conv_shape("conv2d_s8", x, w, stride, pad);
  SerialScope serial(small_op(conv_macs(s)));
  return run_acc(needs_int64(s.kh * s.kw * s.c), {s.n, s.oh(), s.ow(), s.o},
                 [&](auto* y) { conv2d_fwd(x.data(), w.data(), s, y); });
}

auto py_conv2d_requant_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad, int shift,
                                const std::string& mode, const py::object& rng) {
  auto x = checked<int8_t>("conv2d_requant_s8", "x", x_obj, 4);
  auto w = checked<int8_t>("conv2d_requant_s8", "w", w_obj, 4);
  const ConvShape s = conv_shape("conv2d_requant_s8", x, w, stride, pad);
  const RoundMode rm = parse_mode("conv2d_requant_s8", mode);
  const Rng r = parse_rng(rng);
  check_shift("conv2d_requant_s8", shift, rm, r);
  SerialScope serial(small_op(conv_macs(s)));
  return run_requant(needs_int64(s.kh * s.kw * s.c), {s.n, s.oh(), s.ow(), s.o}, shift, rm, r,
                     [&](auto* y, int64_t* mx, FusedRequant* f) { conv2d_fwd(x.data(), w.data(), s, y, mx, f); });
}

auto py_conv2d_bwd_data_s8(const py::handle& err, const py::handle& w, int stride, int pad,
                                 std::pair<int, int> in_hw) {
  const ConvArgs c = bwd_data_args("conv2d_bwd_data_s8", err, w, stride, pad, in_hw);
  SerialScope serial(small_op(conv_macs(c.s)));
  return run_acc(needs_int64(c.s.o * c.s.kh * c.s.kw), {c.s.n, c.s.h, c.s.w, c.s.c},
                 [&](auto* dx) { conv2d_bwd_data(c.x.data(), c.w.data(), c.s, dx); });
}

auto py_conv2d_bwd_data_requant_s8(const py::handle& err, const py::handle& w, int stride, int pad,
                                         std::pair<int, int> in_hw, int shift, const std::string& mode,
                                         const py::object& rng) {
  const ConvArgs c = bwd_data_args("conv2d_bwd_data_requant_s8", err, w, stride, pad, in_hw);
  const RoundMode rm = parse_mode("conv2d_bwd_data_requant_s8", mode);
  const Rng r = parse_rng(rng);
  check_shift("conv2d_bwd_data_requant_s8", shift, rm, r);
  SerialScope serial(small_op(conv_macs(c.s)));
  return run_requant(needs_int64(c.s.o * c.s.kh * c.s.kw), {c.s.n, c.s.h, c.s.w, c.s.c}, shift, rm, r,
                     [&](auto* dx, int64_t* mx, FusedRequant* f) { conv2d_bwd_data(c.x.data(), c.w.data(), c.s, dx, mx, f); });
}

// A convolution pass by its name: forward, backward_data or backward_weight.
ConvPass conv_pass(const char* op, const std::string& pass) {
  if (pass == "forward") return ConvPass::kForward;
  if (pass == "backward_data") return ConvPass::kBackwardData;
  if (pass == "backward_weight") return ConvPass::kBackwardWeight;
  fail(std::string(op) + ": pass '" + pass + "' is not one of forward, backward_data, backward_weight");
}

auto py_conv_algorithm(const std::string& pass, const py::handle& x_obj, const py::handle& w_obj, int stride,
                             int pad) {
  auto x = checked<int8_t>("conv_algorithm", "x", x_obj, 4);
  auto w = checked<int8_t>("conv_algorithm", "w", w_obj, 4);
  const ConvShape s = conv_shape("conv_algorithm", x, w, stride, pad);
  return std::string(conv_algorithm(conv_pass("conv_algorithm", pass), s));
}

auto py_scratch_bytes(const std::string& pass, std::vector<int> shape, bool requant) {
  // shape: (n, h, w, c, o, kh, kw, stride, pad) of a convolution pass, (m, n, k) of a gemm,
  // (m, n, k, a_transposed) of matmul_s16, (m, n, k, chunk) of matmul_fp16_chunked,
  // a convolution's 9 of conv2d_s16, conv2d_bwd_weight_s16 and conv2d_bwd_data_s16; the
  // FP32 convolutions' passes are forward_f32, backward_data_f32, backward_weight_f32.
  ScratchList items;
  if (pass == "gemm" && shape.size() == 3) items = gemm_scratch(shape[0], shape[1], shape[2], requant);
  else if (pass == "matmul_s16" && shape.size() == 4) items = matmul_s16_scratch(shape[0], shape[1], shape[2], shape[3]);
  else if (pass == "matmul_fp16_chunked" && shape.size() == 4) items = matmul_fp16_chunked_scratch(shape[1], shape[2], shape[3]);
  else if ((pass == "conv2d_s16" || pass == "conv2d_bwd_weight_s16" || pass == "conv2d_bwd_data_s16") &&
           shape.size() == 9) {
    const ConvShape c{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8]};
    const Col2imShape s{c.n, c.oh(), c.ow(), c.kh, c.kw, c.c, c.h, c.w, c.stride, c.pad};
    items = pass == "conv2d_bwd_data_s16" ? conv_bwd_data_s16_scratch(s, c.o)
                                          : conv_s16_scratch(pass == "conv2d_bwd_weight_s16", s, c.o);
  }
  else if (shape.size() == 9) {
    const ConvShape s{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8]};
    if (pass == "forward") items = conv_scratch(ConvPass::kForward, s, requant);
    else if (pass == "backward_data") items = conv_scratch(ConvPass::kBackwardData, s, requant);
    else if (pass == "backward_weight") items = conv_scratch(ConvPass::kBackwardWeight, s, requant);
    else if (pass == "forward_f32") items = conv_f32_scratch(ConvPass::kForward, s);
    else if (pass == "backward_data_f32") items = conv_f32_scratch(ConvPass::kBackwardData, s);
    else if (pass == "backward_weight_f32") items = conv_f32_scratch(ConvPass::kBackwardWeight, s);
    else fail("scratch_bytes: pass '" + pass + "' is not one of gemm, forward, backward_data, backward_weight");
  } else fail("scratch_bytes: " + pass + " takes " + (pass == "gemm" ? "3" : "9") + " sizes, got " + std::to_string(shape.size()));
  return scratch_dict(items);
}

auto py_release_scratch() { return release_scratch(); }

auto py_conv2d_bwd_weight_s8(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                   std::pair<int, int> kernel) {
  const char* op = "conv2d_bwd_weight_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto x = checked<int8_t>(op, "x", x_obj, 4);
  const ConvShape s = conv_shape_from_err(op, err, x, stride, pad, kernel);
  SerialScope serial(small_op(conv_macs(s)));
  return run_acc(needs_int64(static_cast<long long>(s.n) * s.oh() * s.ow()), {s.o, s.kh, s.kw, s.c},
                 [&](auto* dw) { conv2d_bwd_weight(err.data(), x.data(), s, dw); });
}

// ------------------------------------------------------------ grouped convolutions (conv_grouped.h)
// The grouped conv of x[N,H,W,C] and w[O,KH,KW,C/groups], checked: groups divide C and O,
// the dilated kernel fits the padded input.
GroupedConv grouped_conv(const char* op, const py::array& x, const py::array& w, int stride, int pad, int dilation,
                         int groups) {
  check_stride_pad(op, stride, pad);
  check_positive(op, "dilation", dilation);
  check_positive(op, "groups", groups);
  const ConvShape s{int(x.shape(0)), int(x.shape(1)), int(x.shape(2)), int(x.shape(3)),
                    int(w.shape(0)), int(w.shape(1)), int(w.shape(2)), stride, pad};
  if (s.c % groups || s.o % groups || w.shape(3) * groups != s.c)
    fail(std::string(op) + ": weight shape " + shape_str(w) + " and " + std::to_string(s.c) + " input channels do not make " +
         std::to_string(groups) + " groups");
  check_kernel_fits(op, (s.kh - 1) * dilation + 1, (s.kw - 1) * dilation + 1, s.h, s.w, pad);
  return GroupedConv{s, groups, dilation};
}

auto py_conv2d_grouped_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad, int dilation,
                          int groups) {
  auto x = checked<int8_t>("conv2d_grouped_s8", "x", x_obj, 4);
  auto w = checked<int8_t>("conv2d_grouped_s8", "w", w_obj, 4);
  const GroupedConv g = grouped_conv("conv2d_grouped_s8", x, w, stride, pad, dilation, groups);
  SerialScope serial(small_op(g.macs()));
  return run_acc(needs_int64(g.s.kh * g.s.kw * g.cg()), {g.s.n, g.oh(), g.ow(), g.s.o},
                 [&](auto* y) { conv2d_grouped_fwd(x.data(), w.data(), g, y); });
}

auto py_conv2d_grouped_requant_s8(const py::handle& x_obj, const py::handle& w_obj, int stride, int pad,
                                  int dilation, int groups, int shift, const std::string& mode, const py::object& rng) {
  const char* op = "conv2d_grouped_requant_s8";
  auto x = checked<int8_t>(op, "x", x_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const GroupedConv g = grouped_conv(op, x, w, stride, pad, dilation, groups);
  const RoundMode rm = parse_mode(op, mode);
  const Rng r = parse_rng(rng);
  check_shift(op, shift, rm, r);
  SerialScope serial(small_op(g.macs()));
  return run_requant(needs_int64(g.s.kh * g.s.kw * g.cg()), {g.s.n, g.oh(), g.ow(), g.s.o}, shift, rm, r,
                     [&](auto* y, int64_t* mx, FusedRequant*) { conv2d_grouped_fwd(x.data(), w.data(), g, y, mx); });
}

// A grouped backward data's conv from err[N,OH,OW,O], w and the input's (H, W); err checked.
GroupedConv grouped_bwd_data_conv(const char* op, const py::array& err, const py::array& w, int stride, int pad,
                                  int dilation, int groups, std::pair<int, int> in_hw) {
  check_hw(op, "in_hw", in_hw);
  check_positive(op, "groups", groups);
  py::array_t<int8_t> x_like(std::vector<py::ssize_t>{err.shape(0), in_hw.first, in_hw.second, w.shape(3) * groups});
  const GroupedConv g = grouped_conv(op, x_like, w, stride, pad, dilation, groups);
  if (err.shape(1) != g.oh() || err.shape(2) != g.ow() || err.shape(3) != g.s.o)
    fail_err_vs_in_hw(op, err, g.s.h, g.s.w, w, stride, pad);
  return g;
}

auto py_conv2d_grouped_bwd_data_s8(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                   int dilation, int groups, std::pair<int, int> in_hw) {
  const char* op = "conv2d_grouped_bwd_data_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const GroupedConv g = grouped_bwd_data_conv(op, err, w, stride, pad, dilation, groups, in_hw);
  SerialScope serial(small_op(g.macs()));
  return run_acc(needs_int64(g.s.kh * g.s.kw * g.og()), {g.s.n, g.s.h, g.s.w, g.s.c},
                 [&](auto* dx) { conv2d_grouped_bwd_data(err.data(), w.data(), g, dx); });
}

auto py_conv2d_grouped_bwd_data_requant_s8(const py::handle& err_obj, const py::handle& w_obj, int stride, int pad,
                                           int dilation, int groups, std::pair<int, int> in_hw, int shift,
                                           const std::string& mode, const py::object& rng) {
  const char* op = "conv2d_grouped_bwd_data_requant_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto w = checked<int8_t>(op, "w", w_obj, 4);
  const GroupedConv g = grouped_bwd_data_conv(op, err, w, stride, pad, dilation, groups, in_hw);
  const RoundMode rm = parse_mode(op, mode);
  const Rng r = parse_rng(rng);
  check_shift(op, shift, rm, r);
  SerialScope serial(small_op(g.macs()));
  return run_requant(needs_int64(g.s.kh * g.s.kw * g.og()), {g.s.n, g.s.h, g.s.w, g.s.c}, shift, rm, r,
                     [&](auto* dx, int64_t* mx, FusedRequant*) { conv2d_grouped_bwd_data(err.data(), w.data(), g, dx, mx); });
}

auto py_conv2d_grouped_bwd_weight_s8(const py::handle& err_obj, const py::handle& x_obj, int stride, int pad,
                                     int dilation, int groups, std::pair<int, int> kernel) {
  const char* op = "conv2d_grouped_bwd_weight_s8";
  auto err = checked<int8_t>(op, "err", err_obj, 4);
  auto x = checked<int8_t>(op, "x", x_obj, 4);
  check_hw(op, "kernel", kernel);
  check_positive(op, "groups", groups);
  py::array_t<int8_t> w_like(std::vector<py::ssize_t>{err.shape(3), kernel.first, kernel.second, x.shape(3) / groups});
  const GroupedConv g = grouped_conv(op, x, w_like, stride, pad, dilation, groups);
  if (err.shape(0) != g.s.n || err.shape(1) != g.oh() || err.shape(2) != g.ow())
    fail_err_vs_x(op, err, x, g.s.kh, g.s.kw, stride, pad);
  SerialScope serial(small_op(g.macs()));
  return run_acc(needs_int64(static_cast<long long>(g.s.n) * g.oh() * g.ow()), {g.s.o, g.s.kh, g.s.kw, g.cg()},
                 [&](auto* dw) { conv2d_grouped_bwd_weight(err.data(), x.data(), g, dw); });
}

auto py_grouped_algorithm(const std::string& pass, const py::handle& x_obj, const py::handle& w_obj, int stride,
                          int pad, int dilation, int groups) {
  auto x = checked<int8_t>("grouped_algorithm", "x", x_obj, 4);
  auto w = checked<int8_t>("grouped_algorithm", "w", w_obj, 4);
  const GroupedConv g = grouped_conv("grouped_algorithm", x, w, stride, pad, dilation, groups);
  return std::string(grouped_algorithm(conv_pass("grouped_algorithm", pass), g));
}

auto py_grouped_scratch_bytes(const std::string& pass, std::vector<int> shape, bool requant) {
  // shape: (n, h, w, c, o, kh, kw, stride, pad, dilation, groups) of the grouped conv
  if (shape.size() != 11) fail("grouped_scratch_bytes: takes 11 sizes, got " + std::to_string(shape.size()));
  const GroupedConv g{ConvShape{shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8]},
                      shape[10], shape[9]};
  return scratch_dict(grouped_scratch(conv_pass("grouped_scratch_bytes", pass), g, requant));
}

}  // namespace

void dsptrain::bind::def_int8_products(py::module_& m) {
  py::class_<PackedWeights>(m, "PackedWeights", "b[N,K] packed for the GEMM path that was active when packed.")
      .def_property_readonly("isa", [](const PackedWeights& p) { return std::string(isa_name(p.packed.isa)); })
      .def_property_readonly("shape", [](const PackedWeights& p) { return py::make_tuple(p.packed.n, p.packed.k); })
      .def_property_readonly("nbytes", [](const PackedWeights& p) { return p.packed.data.size(); });
  m.def("gemm_s8", &py_gemm_s8, py::arg("a"), py::arg("b"), "int8 a[M,K] @ b[N,K].T -> int32 (int64 for long K).");
  m.def("pack_weights", &py_pack_weights, py::arg("b"), "Pack weights b[N,K] once for gemm_packed.");
  m.def("gemm_packed", &py_gemm_packed, py::arg("a"), py::arg("packed"), "a[M,K] @ packed^T -> int32.");
  m.def("gemm_requant_s8", &py_gemm_requant_s8, py::arg("a"), py::arg("b"), py::arg("shift"), py::arg("mode"),
        py::arg("rng"), "gemm_s8 then requantize (shift < 0: estimate it). Returns (int8, shift).");
  m.def("conv2d_s8", &py_conv2d_s8, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"));
  m.def("conv2d_requant_s8", &py_conv2d_requant_s8, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("conv2d_bwd_data_s8", &py_conv2d_bwd_data_s8, py::arg("err"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        py::arg("in_hw"));
  m.def("conv2d_bwd_data_requant_s8", &py_conv2d_bwd_data_requant_s8, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("in_hw"), py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("conv_algorithm", &py_conv_algorithm, py::arg("pass_"), py::arg("x"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), "The algorithm a convolution pass of this shape runs on the active ISA (for tests).");
  m.def("scratch_bytes", &py_scratch_bytes, py::arg("pass_"), py::arg("shape"), py::arg("requant"),
        "Bytes of the kernels' own grow-only scratch by buffer, for one pass of this shape (scratch.h).");
  m.def("release_scratch", &py_release_scratch, "Free the kernels' kept scratch of every thread (call between steps); returns the bytes it held.");
  m.def("conv2d_bwd_weight_s8", &py_conv2d_bwd_weight_s8, py::arg("err"), py::arg("x"), py::arg("stride"),
        py::arg("pad"), py::arg("kernel"));
  m.def("conv2d_grouped_s8", &py_conv2d_grouped_s8, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"),
        py::arg("dilation"), py::arg("groups"), "Grouped conv, w[O,KH,KW,C/groups], in one call (conv_grouped.h).");
  m.def("conv2d_grouped_requant_s8", &py_conv2d_grouped_requant_s8, py::arg("x"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("dilation"), py::arg("groups"), py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("conv2d_grouped_bwd_data_s8", &py_conv2d_grouped_bwd_data_s8, py::arg("err"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("dilation"), py::arg("groups"), py::arg("in_hw"));
  m.def("conv2d_grouped_bwd_data_requant_s8", &py_conv2d_grouped_bwd_data_requant_s8, py::arg("err"), py::arg("w"),
        py::arg("stride"), py::arg("pad"), py::arg("dilation"), py::arg("groups"), py::arg("in_hw"), py::arg("shift"),
        py::arg("mode"), py::arg("rng"));
  m.def("grouped_algorithm", &py_grouped_algorithm, py::arg("pass_"), py::arg("x"), py::arg("w"), py::arg("stride"),
        py::arg("pad"), py::arg("dilation"), py::arg("groups"),
        "The algorithm a grouped convolution pass of this shape runs per group (for tests).");
  m.def("grouped_scratch_bytes", &py_grouped_scratch_bytes, py::arg("pass_"), py::arg("shape"), py::arg("requant"),
        "Bytes of a grouped convolution pass's kept scratch by buffer; shape (n, h, w, c, o, kh, kw, stride, pad, "
        "dilation, groups).");
  m.def("conv2d_grouped_bwd_weight_s8", &py_conv2d_grouped_bwd_weight_s8, py::arg("err"), py::arg("x"),
        py::arg("stride"), py::arg("pad"), py::arg("dilation"), py::arg("groups"), py::arg("kernel"));
}
