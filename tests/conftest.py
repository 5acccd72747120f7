"""Fixtures shared by every test folder."""

import os
import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test's id: the same numbers every run of that test,
    whatever ran before it in the process (or on another xdist worker)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def require_tools(missing: list[str], hint: str) -> None:
    """Skip when tools are missing -- except under CI, which installs them, so there it fails."""
    if missing:
        message = f"needs {', '.join(missing)}: {hint}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def need_tools():
    """`need_tools(missing, hint)`: skip locally, fail under CI (see require_tools)."""
    return require_tools


@pytest.fixture(scope="session")
def emulated_dsp_tools():
    """The emulated DSP's tools (qemu-hexagon, clang-16, ld.lld-16) are installed."""
    from dsptrain.backends import dsp_build

    require_tools(dsp_build.missing_tools(), dsp_build.INSTALL_HINT)


@pytest.fixture(scope="session")
def fastrpc_stub_library(tmp_path_factory, emulated_dsp_tools):
    """A stand-in libcdsprpc.so (tests/backend/fastrpc_stub, built with gcc) that forwards
    FastRPC calls to the emulated DSP server: the environment that makes DSPTRAIN_DSP=fastrpc
    run every line of the ctypes transport here. Returns the variables to set."""
    import shutil
    import subprocess
    from pathlib import Path

    from dsptrain.backends import dsp_build

    require_tools([] if shutil.which("gcc") else ["gcc"], "apt-get install gcc")
    src = Path(__file__).parent / "backend" / "fastrpc_stub" / "libcdsprpc.c"
    lib = tmp_path_factory.mktemp("fastrpc") / "libcdsprpc.so"
    proc = subprocess.run(
        ["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return {
        "DSPTRAIN_CDSPRPC": str(lib),
        "DSPTRAIN_STUB_SERVER": str(dsp_build.ensure_server()),
        "DSPTRAIN_STUB_QEMU": shutil.which("qemu-hexagon"),
        "DSPTRAIN_DSP": "fastrpc",
    }


@pytest.fixture
def fastrpc_stub(fastrpc_stub_library):
    """fastrpc_stub_library's variables, with a shared-memory prefix of this test's own: the
    256 MB arena files the stub makes in /dev/shm (a process that does not close its backend,
    or is killed, leaves them) are removed when the test ends."""
    import uuid
    from pathlib import Path

    prefix = f"dsptrain-stub-test-{uuid.uuid4().hex[:12]}"
    yield {**fastrpc_stub_library, "DSPTRAIN_STUB_SHM": prefix}
    for path in Path("/dev/shm").glob(f"{prefix}-*"):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------- markers (pyproject.toml registers them)
# `pytest -m "not slow"`, `-m dsp`, `-m "not neon"`, with pytest-xdist `-n 2`. A test is
# marked by what it runs, so a new test is marked without being listed:
# - dsp: the emulated Hexagon DSP under qemu-hexagon (it uses the emulated_dsp_tools
#   fixture, or is parametrized with the "dsp" backend);
# - neon: the aarch64 NEON kernels under qemu-aarch64 (tests/backend/test_neon_cross.py);
# - slow: over ~10 s here: it trains (small_run: 2000 images, 2 epochs; trained), runs
#   the FastRPC stub, or sits in a module measured slow (SLOW_MODULES, from --durations).
SLOW_FIXTURES = {"small_run", "trained", "fastrpc_stub", "kernel_check"}
SLOW_MODULES = {
    "test_fl_processes.py",
    "test_resume.py",
    "test_checkpoints.py",
    "test_memory_rss.py",
    "test_memory_rss_recipes.py",
    "test_memory_release.py",
    "test_memory_emulated.py",
    "test_sched_pipeline.py",
    "test_backends_agree.py",
    "test_recipes.py",
    "test_recipes_native.py",
    "test_fastrpc_train.py",
    "test_energy_train.py",
    "test_train_ref.py",
    "test_configs.py",
}


def _runs_on_dsp(item) -> bool:
    if "emulated_dsp_tools" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(v, str) and v == "dsp" for v in callspec.params.values())


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if _runs_on_dsp(item):
            item.add_marker(pytest.mark.dsp)
        if item.path.name == "test_neon_cross.py":
            item.add_marker(pytest.mark.neon)
        if names & SLOW_FIXTURES or item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
