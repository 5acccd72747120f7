"""Strided pointwise (1x1, stride > 1, no padding) convolutions on the native CPU backend:
the forward and the weight gradient are GEMMs on x's strided pixels read in place (no padded
copy, no im2col), the backward data a GEMM on err whose rows land s pixels apart in a zeroed
dx ("gemm_1x1_strided"); bit for bit with ops_ref on ragged shapes (odd H and W too), every
ISA here, 1 and 2 threads, plain and requantizing; the memory plan's scratch list holds."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
from dsptrain.backends.ops_cpu import CpuBackend  # noqa: E402

PASSES = ("forward", "backward_data", "backward_weight")
# (n, h, w, c, o, stride): ResNet-18's shortcuts and MobileNet-style 1x1 s2 (batch cut
# down), ragged channels, odd sizes (the last row and column of x unread), stride 3
SHAPES = [
    (2, 8, 8, 64, 128, 2),
    (2, 4, 4, 128, 256, 2),
    (2, 9, 7, 24, 40, 2),
    (1, 7, 9, 17, 33, 2),
    (3, 5, 5, 40, 19, 2),
    (2, 7, 8, 20, 12, 3),
]


def _operands(shape):
    n, h, w, c, o, stride = shape
    rng = np.random.default_rng(sum(shape))
    oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
    x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    err = rng.integers(-128, 128, (n, oh, ow, o), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, 1, 1, c), dtype=np.int8)
    return x, err, wt


@pytest.fixture
def native_settings():
    previous = native.isa(), native.threads(), native.serial_below_macs()
    yield
    native.set_isa(previous[0])
    native.set_threads(previous[1])
    native.set_serial_below_macs(previous[2])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_strided_pointwise_takes_its_gemms_and_matches_ref(ref, native_settings, shape):
    n, h, w, c, o, s = shape
    x, err, wt = _operands(shape)
    key = cases.rng_key(len(shape))
    cpu = CpuBackend()
    for isa in native.supported_isas():
        native.set_isa(isa)
        for pass_ in PASSES:
            assert native.conv_algorithm(pass_, x, wt, s, 0) == "gemm_1x1_strided", (isa, pass_)
        for threads in (1, 2):
            native.set_threads(threads)
            native.set_serial_below_macs(0.0)
            np.testing.assert_array_equal(cpu.conv2d_s8(x, wt, s, 0), ref.conv2d_s8(x, wt, s, 0))
            np.testing.assert_array_equal(
                cpu.conv2d_bwd_data_s8(err, wt, s, 0, (h, w)), ref.conv2d_bwd_data_s8(err, wt, s, 0, (h, w))
            )
            np.testing.assert_array_equal(
                cpu.conv2d_bwd_weight_s8(err, x, s, 0, (1, 1)), ref.conv2d_bwd_weight_s8(err, x, s, 0, (1, 1))
            )
            for mode in cases.ROUNDING:
                for shift in (None, 2, 18):
                    got = cpu.conv2d_requant_s8(x, wt, s, 0, mode, key, shift)
                    want = ref.conv2d_requant_s8(x, wt, s, 0, mode, key, shift)
                    np.testing.assert_array_equal(got[0], want[0])
                    assert got[1] == want[1]
                    got = cpu.conv2d_bwd_data_requant_s8(err, wt, s, 0, (h, w), mode, key, shift)
                    want = ref.conv2d_bwd_data_requant_s8(err, wt, s, 0, (h, w), mode, key, shift)
                    np.testing.assert_array_equal(got[0], want[0])
                    assert got[1] == want[1]


@pytest.mark.parametrize("requant", (False, True))
def test_strided_pointwise_scratch_is_what_the_plan_counts(native_settings, requant):
    """At one thread each pass keeps at most the bytes scratch_bytes lists for it, and most of them."""
    shape = (4, 16, 16, 64, 128, 2)
    n, h, w, c, o, s = shape
    x, err, wt = _operands(shape)
    cpu = CpuBackend()
    native.set_threads(1)
    key = cases.rng_key(1)
    runs = {
        "forward": (lambda: cpu.conv2d_requant_s8(x, wt, s, 0, "round", key))
        if requant
        else (lambda: cpu.conv2d_s8(x, wt, s, 0)),
        "backward_data": (lambda: cpu.conv2d_bwd_data_requant_s8(err, wt, s, 0, (h, w), "round", key))
        if requant
        else (lambda: cpu.conv2d_bwd_data_s8(err, wt, s, 0, (h, w))),
        "backward_weight": lambda: cpu.conv2d_bwd_weight_s8(err, x, s, 0, (1, 1)),
    }
    for pass_, run in runs.items():
        cpu.release_scratch()
        run()
        kept = cpu.release_scratch()
        planned = sum(dict(native.scratch_bytes(pass_, [n, h, w, c, o, 1, 1, s, 0], requant)).values())
        assert 0 < kept <= planned <= 1.05 * kept, (pass_, kept, planned)
