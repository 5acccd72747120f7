"""The aarch64 NEON dot-product path (cpu_ops/gemm_neon.cpp) checked on any Linux machine:
cpu_ops/ cross-compiled for aarch64 with the plain C++ driver tests/native/kernel_check.cpp,
run under qemu-aarch64 (`-cpu max` offers dotprod), bit for bit against ops_ref.

The build uses setup.py's flags and no -march, as the extension is built on an aarch64
machine: sdot then comes only from gemm_neon.cpp's own target attribute, and the rest of
the binary stays ARMv8.0, so it also runs on a core without dotprod (-cpu cortex-a53),
where dispatch must fall back to the portable kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from dsptrain.backends.ops_cpu import ISA_ENV
from dsptrain.numerics import acc_dtype

from . import cases

REPO = Path(__file__).resolve().parents[2]
CROSS_TOOLS = {"aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64": "qemu-user"}
INSTALL_HINT = "apt-get install g++-aarch64-linux-gnu qemu-user (scripts/setup.sh --tests)"
# setup.py's, linked static
CXX_FLAGS = ["-std=c++17", "-O3", "-fno-math-errno", "-ffp-contract=off", "-Wall", "-pthread", "-static"]
THREADS = "3"  # an odd count: row blocks and B-panel splits that do not divide evenly
OPS = {
    "gemm": 0,
    "forward": 1,
    "backward_data": 2,
    "backward_weight": 3,  # kernel_check.cpp's op codes
    "dw_forward": 4,
    "dw_backward_data": 5,
    "dw_backward_weight": 6,
    "dw_forward_f32": 7,
    "dw_backward_data_f32": 8,
    "dw_backward_weight_f32": 9,
    "bn_act": 10,
    "grouped_forward": 11,
    "grouped_backward_data": 12,
    "grouped_backward_weight": 13,
}


# ---------------------------------------------------------------- build and run


@pytest.fixture(scope="module")
def kernel_check(need_tools, tmp_path_factory) -> Path:
    """The driver and every cpu_ops/ source but the bindings*.cpp, built for aarch64. Without
    the cross tools: skipped locally, failed under CI (tests/conftest.py require_tools)."""
    need_tools([pkg for tool, pkg in CROSS_TOOLS.items() if shutil.which(tool) is None], INSTALL_HINT)
    sources = sorted(str(p) for p in (REPO / "cpu_ops").glob("*.cpp") if not p.name.startswith("bindings"))
    exe = tmp_path_factory.mktemp("neon") / "kernel_check"
    proc = subprocess.run(
        [
            "aarch64-linux-gnu-g++",
            *CXX_FLAGS,
            "-I",
            str(REPO / "cpu_ops"),
            *sources,
            str(REPO / "tests" / "native" / "kernel_check.cpp"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"cross build failed:\n{proc.stderr}"
    assert "warning" not in proc.stderr, proc.stderr
    return exe


def run_driver(exe: Path, tmp: Path, records, isa: str | None = "neon", cpu: str = "max"):
    """Runs `records` -- (op, sizes, operands, out_shape, out_dtype) -- in one qemu process.
    Returns (the results, the driver's stdout lines, the process)."""
    blob = bytearray()
    for op, sizes, operands, _, dtype in records:
        blob += np.array([OPS[op], np.dtype(dtype).itemsize, *sizes] + [0] * (10 - len(sizes)), "<i4").tobytes()
        for operand in operands:  # int8, or float32 for the float records
            blob += np.ascontiguousarray(operand, operand.dtype.newbyteorder("<")).tobytes()
    (tmp / "in.bin").write_bytes(bytes(blob))
    env = {k: v for k, v in os.environ.items() if k != ISA_ENV}
    env["DSPTRAIN_CPU_THREADS"] = THREADS
    if isa:
        env[ISA_ENV] = isa
    proc = subprocess.run(
        ["qemu-aarch64", "-cpu", cpu, str(exe), str(tmp / "in.bin"), str(tmp / "out.bin")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        return None, proc.stdout.splitlines(), proc
    raw, at, results = (tmp / "out.bin").read_bytes(), 0, []
    for *_, shape, dtype in records:
        count = int(np.prod(shape))
        results.append(np.frombuffer(raw, np.dtype(dtype).newbyteorder("<"), count, at).reshape(shape))
        at += count * np.dtype(dtype).itemsize
    assert at == len(raw), f"driver wrote {len(raw)} bytes, expected {at}"
    return results, proc.stdout.splitlines(), proc


# ---------------------------------------------------------------- cases

# Around the NEON kernel's 4 x 16 register tile, its 512-deep K block and 128-row A block:
# exact tiles, one past, K blocks that end on and off a group of 4, a single row or column.
NEON_EDGE_GEMMS = [
    (4, 4, 16),
    (5, 9, 17),
    (3, 511, 15),
    (8, 512, 32),
    (9, 1025, 48),
    (129, 64, 31),
    (1, 1537, 1),
    (257, 6, 3),
]

# Convolutions reaching every algorithm on NEON: pixel panels (few output or input
# channels: LeNet's layers), the panel weight gradient, im2col + GEMM with B packed from
# k-major rows (a wide weight gradient), the 1x1 GEMM, stride 2, the strided 1x1 (odd H, W).
EXTRA_CONV_SHAPES = [
    (2, 28, 28, 1, 6, 5, 1, 2),
    (2, 9, 7, 20, 36, 1, 2, 0),
    (3, 14, 14, 6, 16, 5, 1, 0),
    (1, 6, 7, 2, 5, 3, 1, 3),
    (2, 4, 4, 130, 264, 3, 1, 1),
    (2, 7, 6, 40, 33, 3, 2, 1),
]


def gemm_cases():
    yield from cases.gemm_cases()
    yield from cases.gemm_extreme_cases()  # up to K = 131071: int64 accumulators beyond 131068
    rng = np.random.default_rng(11)
    for m, k, n in NEON_EDGE_GEMMS:
        yield f"edge_{m}x{k}x{n}", (cases.int8(rng, (m, k)), cases.int8(rng, (n, k)))


GEMM_CASES = list(gemm_cases())
CONV_CASES = [*cases.conv_cases(), *cases.conv_cases(12, EXTRA_CONV_SHAPES)]


def gemm_record(a, b):
    (m, k), n = a.shape, b.shape[0]
    return "gemm", (m, n, k), (a, b), (m, n), acc_dtype(k)


def conv_records(c):
    """The three passes of one convolution case, as driver records."""
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    (n, h, wd, ch), (o, kh, kw, _) = x.shape, w.shape
    sizes = (n, h, wd, ch, o, kh, kw, stride, pad)
    return [
        ("forward", sizes, (x, w), err.shape, acc_dtype(kh * kw * ch)),
        ("backward_data", sizes, (err, w), x.shape, acc_dtype(o * kh * kw)),
        ("backward_weight", sizes, (err, x), w.shape, acc_dtype(err.size // o)),
    ]


def conv_refs(ref, c):
    x, w, err, stride, pad = c["x"], c["w"], c["err"], c["stride"], c["pad"]
    return [
        ref.conv2d_s8(x, w, stride, pad),
        ref.conv2d_bwd_data_s8(err, w, stride, pad, x.shape[1:3]),
        ref.conv2d_bwd_weight_s8(err, x, stride, pad, w.shape[1:3]),
    ]


@pytest.fixture(scope="module")
def neon_run(kernel_check, tmp_path_factory):
    """Every GEMM and convolution case on the forced NEON path, in one qemu process."""
    records = [gemm_record(*args) for _, args in GEMM_CASES]
    for _, c in CONV_CASES:
        records += conv_records(c)
    results, lines, proc = run_driver(kernel_check, tmp_path_factory.mktemp("neon_run"), records)
    assert results is not None, f"qemu-aarch64 run failed ({proc.returncode}):\n{proc.stderr}"
    gemm = dict(zip((name for name, _ in GEMM_CASES), results))
    conv = {
        name: results[len(GEMM_CASES) + 3 * i : len(GEMM_CASES) + 3 * i + 3] for i, (name, _) in enumerate(CONV_CASES)
    }
    return {"gemm": gemm, "conv": conv, "stdout": lines}


# ---------------------------------------------------------------- tests


def test_dispatch_picks_neon_only_with_dotprod(kernel_check, tmp_path):
    _, lines, proc = run_driver(kernel_check, tmp_path, [], isa=None, cpu="max")
    assert proc.returncode == 0, proc.stderr
    assert lines[0] == "isa neon best neon"
    # A Cortex-A53 (ARMv8.0, no dotprod): the portable kernel, and forcing NEON is an error.
    _, lines, proc = run_driver(kernel_check, tmp_path, [], isa=None, cpu="cortex-a53")
    assert proc.returncode == 0, proc.stderr
    assert lines[0] == "isa scalar best scalar"
    _, _, proc = run_driver(kernel_check, tmp_path, [], isa="neon", cpu="cortex-a53")
    assert proc.returncode != 0 and "DSPTRAIN_CPU_ISA=neon is not supported" in proc.stderr


def test_neon_run_covers_every_algorithm(neon_run):
    assert neon_run["stdout"][0] == "isa neon best neon"
    seen = {line.split()[1] for line in neon_run["stdout"][1:]}
    assert seen == {"gemm_1x1", "gemm_1x1_strided", "im2col_gemm", "pixel_panels", "wgrad_panels"}


@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: c[0])
def test_gemm_neon(neon_run, ref, case):
    name, (a, b) = case
    np.testing.assert_array_equal(neon_run["gemm"][name], ref.gemm_s8(a, b))


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c[0])
def test_conv_neon(neon_run, ref, case):
    name, c = case
    for got, want in zip(neon_run["conv"][name], conv_refs(ref, c)):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- depthwise (cpu_ops/dwconv*.cpp)
# (n, h, w, c, k, stride, pad): MobileNetV2-like layers and ragged channel counts, kernel 3
# and 5, strides 1 and 2; on aarch64 every one runs the portable loops, NEON-vectorised.
DEPTHWISE_SHAPES = [
    (3, 16, 16, 32, 3, 1, 1),
    (2, 8, 8, 144, 3, 2, 1),
    (2, 7, 9, 3, 3, 1, 1),
    (2, 9, 11, 37, 5, 2, 2),
    (1, 6, 6, 17, 5, 1, 2),
    (2, 5, 5, 9, 1, 1, 0),
]


def depthwise_records(shape, seed):
    """Each shape's three int8 passes and three float32 passes, as driver records, with ops_ref's answers."""
    n, h, w, c, k, stride, pad = shape
    rng = np.random.default_rng(seed)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    sizes = (n, h, w, c, k, k, stride, pad)
    x, wt, err = (rng.integers(-128, 128, s, dtype=np.int8) for s in ((n, h, w, c), (c, k, k, 1), (n, oh, ow, c)))
    xf, wf, ef = (rng.standard_normal(a.shape).astype(np.float32) for a in (x, wt, err))
    records = [
        ("dw_forward", sizes, (x, wt), err.shape, np.int32),
        ("dw_backward_data", sizes, (err, wt), x.shape, np.int32),
        ("dw_backward_weight", sizes, (err, x), wt.shape, acc_dtype(n * oh * ow)),
        ("dw_forward_f32", sizes, (xf, wf), err.shape, np.float32),
        ("dw_backward_data_f32", sizes, (ef, wf), x.shape, np.float32),
        ("dw_backward_weight_f32", sizes, (ef, xf), wt.shape, np.float32),
    ]
    wants = lambda ref: [
        ref.dwconv2d_s8(x, wt, stride, pad),
        ref.dwconv2d_bwd_data_s8(err, wt, stride, pad, (h, w)),  # noqa: E731
        ref.dwconv2d_bwd_weight_s8(err, x, stride, pad, (k, k)),
        ref.dwconv2d_f32(xf, wf, stride, pad),
        ref.dwconv2d_bwd_data_f32(ef, wf, stride, pad, (h, w)),
        ref.dwconv2d_bwd_weight_f32(ef, xf, stride, pad, (k, k)),
    ]
    return records, wants


def run_shapes_bit_exact(kernel_check, tmp_path, ref, shapes, make_records, seed: int) -> list[str]:
    """make_records(shape, seed + i) for every shape, run on aarch64 in one driver call (3
    threads), each result's dtype and bits equal to its ops_ref answer; the driver's log lines."""
    records, wants = [], []
    for i, shape in enumerate(shapes):
        r, want = make_records(shape, seed + i)
        records += r
        wants += want(ref)
    results, lines, proc = run_driver(kernel_check, tmp_path, records)
    assert results is not None, f"qemu-aarch64 run failed ({proc.returncode}):\n{proc.stderr}"
    for (op, sizes, *_), got, want in zip(records, results, wants):
        assert got.dtype == want.dtype, (op, sizes)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {sizes}")
    return lines


def test_depthwise_neon(kernel_check, tmp_path, ref):
    """Every depthwise pass on aarch64 (3 threads), bit for bit with ops_ref, int8 and float32."""
    lines = run_shapes_bit_exact(kernel_check, tmp_path, ref, DEPTHWISE_SHAPES, depthwise_records, 40)
    assert lines[0] == "isa neon best neon" and set(lines[1:]) == {"dwconv rows"}


# NITI's fused batch norm: the AVX2 lanes' tails and both output paths (tables from 1024 rows)
BN_SHAPES = [(1100, 7), (9, 33), (2048, 16), (3, 1)]
BN_ACTS = {"none": 0, "clip": 1, "relu": 2}


def test_fused_batch_norm_neon(kernel_check, tmp_path, ref):
    """bn_act_s8 and its backward (cpu_ops/bn_cast*.cpp's portable paths) on aarch64 with 3
    threads, bit for bit with the float ops' chain on ops_ref (base.py's composition)."""
    from dsptrain.backends.base import Backend
    from dsptrain.numerics import QTensor

    rng = np.random.default_rng(61)
    records, wants = [], []
    for (rows, c), (act, code) in zip(BN_SHAPES, [*BN_ACTS.items(), ("clip", 1)]):
        x = rng.integers(-127, 128, (rows, c)).astype(np.int8)
        err = rng.integers(-127, 128, (rows, c)).astype(np.int8)
        gamma, beta = (rng.standard_normal(c) * 2).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        mean, var = np.zeros(c, np.float32), np.ones(c, np.float32)
        spec = ("clip", 0.0, 6.0) if act == "clip" else (act,)
        y, stats, _, _ = Backend.bn_act_s8(
            ref, QTensor(x, -4), gamma, beta, mean, var, True, 0.1, 1e-5, spec, "round", None
        )
        dx, d_gamma, d_beta = Backend.bn_act_bwd_s8(
            ref, QTensor(err, -9), QTensor(x, -4), stats, gamma, beta, spec, "round", None
        )
        want = np.concatenate([[y.e, dx.e], d_gamma, d_beta, y.q.ravel(), dx.q.ravel()]).astype(np.float64)
        records.append(("bn_act", (rows, c, -4, -9, code), (x, err, gamma, beta, mean, var), want.shape, np.float64))
        wants.append(want)
    results, lines, proc = run_driver(kernel_check, tmp_path, records)
    assert results is not None, f"qemu-aarch64 run failed ({proc.returncode}):\n{proc.stderr}"
    for (_, sizes, *_), got, want in zip(records, results, wants):
        np.testing.assert_array_equal(got, want, err_msg=f"bn_act {sizes}")


# ---------------------------------------------------------------- grouped (cpu_ops/conv_grouped.cpp)
# (n, h, w, groups, channels per group, outputs per group, k, stride, pad, dilation): every
# algorithm (the in-place 1x1, group patches, strided backward data's residue classes), odd
# and single channels per group, dilation 2, batch 1 and odd; 3 threads, so groups 3 split
# each product and groups 2 / 4 / 8 ... run as tasks unevenly.
GROUPED_SHAPES = [
    (3, 9, 7, 2, 5, 3, 3, 1, 1, 1),
    (1, 10, 11, 4, 1, 2, 3, 2, 1, 1),
    (3, 8, 8, 8, 8, 8, 3, 2, 1, 2),
    (1, 6, 7, 3, 17, 9, 1, 1, 0, 1),
    (3, 7, 9, 3, 40, 33, 1, 2, 0, 1),
    (1, 12, 9, 2, 24, 11, 3, 1, 0, 2),
]


def grouped_records(shape, seed):
    """A grouped shape's three passes as driver records, with ops_ref's answers."""
    n, h, w, g, cg, og, k, stride, pad, d = shape
    rng = np.random.default_rng(seed)
    oh, ow = ((size + 2 * pad - (k - 1) * d - 1) // stride + 1 for size in (h, w))
    x, wt, err = (
        rng.integers(-128, 128, s, dtype=np.int8) for s in ((n, h, w, g * cg), (g * og, k, k, cg), (n, oh, ow, g * og))
    )
    sizes = (n, h, w, g * cg, g * og, k, stride, pad, d, g)
    records = [
        ("grouped_forward", sizes, (x, wt), err.shape, acc_dtype(k * k * cg)),
        ("grouped_backward_data", sizes, (err, wt), x.shape, acc_dtype(k * k * og)),
        ("grouped_backward_weight", sizes, (err, x), wt.shape, acc_dtype(n * oh * ow)),
    ]
    wants = lambda ref: [  # noqa: E731
        ref.conv2d_grouped_s8(x, wt, stride, pad, d, g),
        ref.conv2d_grouped_bwd_data_s8(err, wt, stride, pad, d, g, (h, w)),
        ref.conv2d_grouped_bwd_weight_s8(err, x, stride, pad, d, g, (k, k)),
    ]
    return records, wants


def test_grouped_neon(kernel_check, tmp_path, ref):
    """Every grouped pass on aarch64's NEON GEMM (3 threads), bit for bit with ops_ref."""
    lines = run_shapes_bit_exact(kernel_check, tmp_path, ref, GROUPED_SHAPES, grouped_records, 70)
    assert lines[0] == "isa neon best neon"
    assert {line.split()[1] for line in lines[1:]} == {"gemm_1x1_in_place", "group_patches_gemm", "residue_class_gemms"}
