"""dsptrain on aarch64 Linux under emulation (scripts/arm64.sh: Debian's arm64 Python under
qemu-aarch64, PyPI's aarch64 wheels, cpu_ops built for aarch64 by setup.py): the run-time
feature report, the NEON kernel tests and a sample of the op tests in the aarch64 Python,
50 training steps that must end byte-identical to the same steps on this machine, and the
FastRPC ctypes structures against the C headers compiled for aarch64."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from . import layouts
from .conftest import REPO

pytestmark = pytest.mark.arm64

STEPS, BATCH = 50, 64
RUNS = {"niti": "configs/runs/lenet-fmnist-niti.yaml", "octo": "configs/runs/lenet-fmnist-octo.yaml"}
X86_FEATURES = {"avx2", "avx_vnni", "avx512_vnni", "amx_int8"}


def features(info: str) -> set[str]:
    line = next(line for line in info.splitlines() if line.startswith("cpu features:"))
    return set(line.split(":", 1)[1].strip().split(", "))


def test_info_reports_the_arm_features(arm64):
    proc = arm64.run("dsptrain", "info")
    assert proc.returncode == 0, proc.stderr
    assert ", aarch64)" in proc.stdout.splitlines()[0]
    assert re.search(r"cpu +yes +native int8 kernels \(neon, \d+ threads\)", proc.stdout), proc.stdout
    found = features(proc.stdout)
    # QEMU's `max` CPU has dot product, int8 matrix multiply, BF16, FP16 and SVE2
    assert {"neon", "neon_dotprod", "neon_fp16", "i8mm", "bf16", "sve", "sve2"} <= found, proc.stdout
    assert not found & X86_FEATURES


def test_info_on_a_core_without_dotprod_falls_back_to_scalar(arm64):
    """Cortex-A53 (ARMv8.0): Advanced SIMD only, so the GEMM takes the portable path."""
    proc = arm64.run("dsptrain", "info", cpu="cortex-a53")
    assert proc.returncode == 0, proc.stderr
    assert features(proc.stdout) == {"neon"}, proc.stdout
    assert re.search(r"cpu +yes +native int8 kernels \(scalar, \d+ threads\)", proc.stdout), proc.stdout


def test_neon_cases_and_op_tests_pass_in_the_aarch64_python(arm64):
    """The NEON cases of the CPU kernel tests (each forced onto the NEON path) with the
    Threefry, rounding and NITI update tests, and every op test on every backend found there
    (the CPU's NEON kernels; the emulated DSP, reached from the aarch64 Python)."""
    proc = arm64.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-k",
        "neon or threefry or rounding or niti_update or backend_ops",
        "tests/backend/test_cpu_kernels.py",
        "tests/backend/test_backend_ops.py",
    )
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert int(re.search(r"(\d+) passed", summary).group(1)) >= 200, tail
    # the only skips allowed are the emulated DSP's declared refusals, as on x86-64
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all(re.search(r": dsp (declines|does not list) ", line) for line in skips), tail


def train(command: list[str], run: str, out: Path, timeout: float):
    proc = subprocess.run(
        [
            *command,
            "train",
            RUNS[run],
            "--backend",
            "cpu",
            "--epochs",
            "1",
            "--train-limit",
            str(STEPS * BATCH),
            "--batch-size",
            str(BATCH),
            "--test-limit",
            "256",
            "--quiet",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    epoch = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert epoch["kind"] == "epoch" and epoch["step"] == STEPS, epoch
    return np.load(out / "checkpoint.npz", allow_pickle=False)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_training_ends_byte_identical_to_x86(arm64, run, tmp_path):
    """NITI's integer training and Octo's (whose float parts are exact here: -ffp-contract=off,
    no fused multiply-add on either side) take the same steps on both machines, so every
    array of the checkpoint -- weights, optimizer state and metadata -- must be equal, byte for byte."""
    native = train([sys.executable, "-m", "dsptrain.cli"], run, tmp_path / "x86_64", 600)
    emulated = train([str(arm64.folder / "bin" / "dsptrain")], run, tmp_path / "aarch64", 1800)
    assert sorted(native.files) == sorted(emulated.files)
    differ = [
        k for k in native.files if native[k].dtype != emulated[k].dtype or native[k].tobytes() != emulated[k].tobytes()
    ]
    assert not differ, f"{run}: {differ} differ between x86-64 and aarch64 after {STEPS} steps"


def test_fastrpc_structs_match_the_c_headers_on_aarch64(arm64, tmp_path):
    """The ctypes mirrors as the aarch64 Python lays them out against ops.h and fastrpc_abi.h
    compiled for aarch64 (the phone's host side): every size, alignment and offset."""
    here = Path(__file__).parent
    proc = arm64.run("python", str(here / "layouts.py"))
    assert proc.returncode == 0, proc.stderr
    python_side = json.loads(proc.stdout)
    (tmp_path / "layouts.c").write_text(layouts.c_program())
    exe = tmp_path / "layouts"
    build = subprocess.run(
        [
            "aarch64-linux-gnu-gcc",
            "-std=c11",
            "-Wall",
            "-Werror",
            "-static",
            "-I",
            str(REPO / "dsp_kernels"),
            str(tmp_path / "layouts.c"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    c_side = subprocess.run(["qemu-aarch64", str(exe)], capture_output=True, text=True, timeout=120)
    assert c_side.returncode == 0, c_side.stderr
    assert json.loads(c_side.stdout) == python_side
    assert python_side["remote_buf"] == {"sizeof": 16, "alignof": 8, "pv": 0, "nLen": 8}  # 64-bit pointers
