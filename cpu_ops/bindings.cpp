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
#include "cpu_features.h"
#include "eltwise.h"
#include "gemm.h"
#include "loss.h"
#include "pool.h"
#include "requant.h"
#include "scratch.h"
#include "thread_pool.h"
#include "threefry.h"
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
    return run_requant(needs_int64(g.k), {g.m, g.n}, shift, rm, r, [&](auto* c, int64_t* mx) { gemm_any(g, c, mx); });
  }, py::arg("a"), py::arg("b"), py::arg("shift"), py::arg("mode"), py::arg("rng"),
     "gemm_s8 then requantize (shift < 0: estimate it). Returns (int8, shift).");

  // ------------------------------------------------------------ convolutions
  m.def("conv2d_s8", [](const py::handle& x_obj, const py::handle& w_obj, int stride, int pad) {
    auto x = checked<int8_t>("conv2d_s8", "x", x_obj, 4);
    auto w = checked<int8_t>("conv2d_s8", "w", w_obj, 4);
    const ConvShape s = conv_shape("conv2d_s8", x, w, stride, pad);
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
    return run_requant(needs_int64(s.kh * s.kw * s.c), {s.n, s.oh(), s.ow(), s.o}, shift, rm, r,
                       [&](auto* y, int64_t* mx) { conv2d_fwd(x.data(), w.data(), s, y, mx); });
  }, py::arg("x"), py::arg("w"), py::arg("stride"), py::arg("pad"), py::arg("shift"), py::arg("mode"), py::arg("rng"));
  m.def("conv2d_bwd_data_s8", [](const py::handle& err, const py::handle& w, int stride, int pad,
                                 std::pair<int, int> in_hw) {
    const ConvArgs c = bwd_data_args("conv2d_bwd_data_s8", err, w, stride, pad, in_hw);
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
}
