// The only file that includes pybind11: it turns the plain C++ kernels of cpu_ops/
// into the `dsptrain._cpu_ops` module. Kernels stay free of Python.
#include <pybind11/pybind11.h>

#include "cpu_features.h"

namespace py = pybind11;

PYBIND11_MODULE(_cpu_ops, m) {
  m.doc() = "dsptrain native CPU kernels";
  m.def("cpu_features", [] {
    const auto f = dsptrain::detect_cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["avx_vnni"] = f.avx_vnni;
    d["avx512_vnni"] = f.avx512_vnni;
    d["neon"] = f.neon;
    d["neon_dotprod"] = f.neon_dotprod;
    return d;
  }, "The SIMD features of this CPU, as the kernels see them.");
}
