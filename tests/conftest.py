"""Fixtures shared by every test folder."""
import os

import pytest


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
def fastrpc_stub(tmp_path_factory, emulated_dsp_tools):
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
    proc = subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(lib), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {"DSPTRAIN_CDSPRPC": str(lib), "DSPTRAIN_STUB_SERVER": str(dsp_build.ensure_server()),
            "DSPTRAIN_STUB_QEMU": shutil.which("qemu-hexagon"), "DSPTRAIN_DSP": "fastrpc"}
