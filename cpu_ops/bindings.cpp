// The `dsptrain._cpu_ops` module: the machine (ISA, threads) and RNG entry points here,
// each kernel family's bindings in its own bindings_<family>.cpp (bindings.h holds what
// they share). Only bindings*.cpp include pybind11; there, and only there, arguments are
// checked (a user error is a ValueError naming the argument and its value), arrays made
// contiguous, outputs allocated, and the GIL released around every kernel.
#include "bindings.h"
#include "gemm_kernels.h"

using namespace dsptrain;
using namespace dsptrain::bind;

PYBIND11_MODULE(_cpu_ops, m) {
  m.doc() = "dsptrain native CPU kernels";

  // ------------------------------------------------------------ machine
  m.def("cpu_features", [] {
    const auto f = detect_cpu_features();
    py::dict d;
    for (const auto& [name, field] : kCpuFeatureFields) d[name] = f.*field;
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
  m.def("gemm_block_counts", [](bool reset) {
    const GemmBlockCounts c = gemm_block_counts(reset);
    py::dict d;
    d["signed"] = c.signed_blocks;
    d["unsigned"] = c.unsigned_blocks;
    d["b_unsigned"] = gemm_b_unsigned_blocks(reset);
    d["small_a"] = gemm_small_a_blocks(reset);
    d["pairs"] = gemm_pair_blocks(reset);
    d["outliers_in_pairs"] = gemm_outlier_pair_blocks(reset);
    return d;
  }, py::arg("reset") = false, "A blocks the int8 GEMM ran on each kernel since the last reset (for tests).");
  m.def("threads", &pool_threads, "Threads the kernels run on.");
  m.def("set_threads", &set_thread_limit, py::arg("threads"),
        "Caps the kernels' threads (1 .. the pool's size); returns the cap in force.");
  m.def("serial_below_macs", &serial_below_macs, "Products smaller than this many MACs run single-threaded.");
  m.def("set_serial_below_macs", &set_serial_below_macs, py::arg("macs"));

  // ------------------------------------------------------------ RNG (for tests)
  m.def("threefry2x32", [](uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
    const auto r = threefry2x32_20(k0, k1, c0, c1);
    return py::make_tuple(r.x0, r.x1);
  }, "Threefry-2x32-20 of one counter: (word0, word1).");
  m.def("random_u32", [](const py::object& rng, size_t count) {
    const Rng r = parse_rng(rng);
    py::array_t<uint32_t> out(count);
    uint32_t* p = out.mutable_data();
    fill_random_u32(r.key, 0, count, p);   // the vector fill the quantizers use (threefry.cpp)
    return out;
  }, py::arg("rng"), py::arg("count"), "numerics.random_u32 for rng=(seed, step, tensor_id, offset).");

  def_int8_products(m);
  def_int8_elementwise(m);
  def_quantizers(m);
  def_float_layers(m);
  def_exact_products(m);
  def_fp32_products(m);
  def_layers(m);
  def_bn_casts(m);
  def_memory(m);
  def_dwconv(m);
}
