"""Fixtures for backend tests: the NumPy judge and every available backend under test."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.backends import availability, backend_class
from dsptrain.backends.ops_ref import RefBackend


@pytest.fixture(scope="session")
def ref():
    return RefBackend()


def available_backends(exclude=("ref",)):
    """Names of backends usable here (for parametrising shared tests)."""
    return [name for name, (ok, _) in availability().items() if ok and name not in exclude]


@pytest.fixture(scope="session")
def make_backend():
    return lambda name: backend_class(name)()


@pytest.fixture(params=available_backends(exclude=("ref", "dsp")))
def host_be(request, make_backend):
    """Each available backend that runs on this machine (the emulated DSP left out)."""
    return make_backend(request.param)


def float_pool_input(rng, shape):
    """float32 normal values rounded to halves (ties inside pooling windows), with signed
    zeros: the pooling tests' input, where the first maximum must win with its bits."""
    x = (np.round(rng.standard_normal(shape) * 2) / 2).astype(np.float32)
    x[rng.random(shape) < 0.1] = -0.0
    x[rng.random(shape) < 0.1] = 0.0
    return x


CPU_ISAS = ("amx", "avx512vnni", "avxvnni", "avx2", "neon", "scalar")  # the native GEMM paths


@pytest.fixture(params=CPU_ISAS)
def cpu_isa(request, monkeypatch):
    """A CpuBackend forced onto one GEMM path through DSPTRAIN_CPU_ISA (skipped where this CPU
    or build has none), the best path restored after."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    from dsptrain.backends.ops_cpu import ISA_ENV, CpuBackend

    isa = request.param
    if isa not in native.supported_isas():
        pytest.skip(f"this CPU/build has no {isa} (has {', '.join(native.supported_isas())})")
    monkeypatch.setenv(ISA_ENV, isa)
    backend = CpuBackend()
    assert native.isa() == isa
    yield backend
    monkeypatch.delenv(ISA_ENV)
    CpuBackend()  # back to the best path for the other tests


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """The native kernels on 1, then 2 threads, the previous count restored after."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    previous = native.threads()
    native.set_threads(request.param)
    yield request.param
    native.set_threads(previous)


@pytest.fixture
def on_avx512vnni():
    """The native kernels on their AVX-512 VNNI path for one test (the tests that check which
    algorithm a shape takes there), the previous ISA restored after, failed or not; skipped
    where this CPU or build has no such path."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    if "avx512vnni" not in native.supported_isas():
        pytest.skip("no AVX-512 VNNI on this CPU/build")
    previous = native.isa()
    native.set_isa("avx512vnni")
    yield
    native.set_isa(previous)


@pytest.fixture(scope="module")
def dsp(emulated_dsp_tools):
    """One emulated DSP (qemu-hexagon) per test module, 4 HVX threads unless a test sets
    hvx_threads itself."""
    from dsptrain.backends.ops_dsp import DspBackend

    backend = DspBackend(transport="emulated")
    yield backend
    backend.close()
