"""Builds the `dsptrain` package from runtime/ and its native CPU kernels from cpu_ops/.

The Hexagon side (dsp_kernels/) is built separately: `make -C dsp_kernels` for the
emulated DSP (clang-16, lld-16), or `make -C dsp_kernels device` with the Hexagon SDK.
The runtime also builds the emulated DSP on first use when the tools are present.
"""

import glob
import os
import platform

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_packages, setup


def cpu_ops_extension():
    sources = sorted(glob.glob("cpu_ops/*.cpp"))
    # -ffp-contract=off: the float kernels equal NumPy bit for bit, so no fused multiply-add
    flags = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-Wall"]
    if platform.machine() in ("x86_64", "AMD64"):
        flags += ["-mno-avx512f"]  # wider ISAs are enabled per function (target attributes)
    if os.environ.get("DSPTRAIN_NATIVE_DEBUG"):
        flags = ["-O0", "-g", "-Wall"]
    return Pybind11Extension(
        "dsptrain._cpu_ops",
        sources,
        include_dirs=["cpu_ops", "dsp_kernels"],
        cxx_std=17,
        extra_compile_args=flags,
        extra_link_args=["-pthread"],
    )


def runtime_packages() -> list[str]:
    """`dsptrain` and every subpackage under runtime/ (any folder with an __init__.py),
    so a new one (runtime/fl/, runtime/memory/, ...) ships without editing this file."""
    return ["dsptrain"] + [f"dsptrain.{name}" for name in find_packages("runtime")]


# compile the kernel files in parallel (DSPTRAIN_BUILD_JOBS, default: every core)
ParallelCompile("DSPTRAIN_BUILD_JOBS").install()

setup(
    packages=runtime_packages(),
    package_dir={"dsptrain": "runtime"},
    package_data={"dsptrain": ["py.typed"]},
    ext_modules=[cpu_ops_extension()],
    cmdclass={"build_ext": build_ext},
    zip_safe=False,
)
