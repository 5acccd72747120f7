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
