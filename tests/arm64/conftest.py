"""The aarch64 environment of scripts/arm64.sh, made (or found in its cache) once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"qemu-aarch64": "qemu-user", "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu"}
HINT = "apt-get install qemu-user g++-aarch64-linux-gnu (bash scripts/setup.sh --tests)"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "arm64: runs the package in the aarch64 Python of scripts/arm64.sh (minutes; deselect with -m 'not arm64')",
    )


class Arm64:
    """The environment's folder; `run` starts one of its bin/ commands (python, pytest,
    dsptrain) on a QEMU CPU model, without the caller's DSPTRAIN_CPU_ISA."""

    def __init__(self, folder: Path):
        self.folder = folder

    def run(self, command: str, *args: str, cpu: str = "max", timeout: float = 1200, cwd=REPO):
        env = {k: v for k, v in os.environ.items() if k != "DSPTRAIN_CPU_ISA"}
        env["DSPTRAIN_ARM64_CPU"] = cpu
        return subprocess.run(
            [str(self.folder / "bin" / command), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="session")
def arm64(need_tools) -> Arm64:
    need_tools([pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None], HINT)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "arm64.sh"), "build"], capture_output=True, text=True, timeout=3600
    )
    assert proc.returncode == 0, f"scripts/arm64.sh build failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return Arm64(Path(proc.stdout.strip().splitlines()[-1]))
