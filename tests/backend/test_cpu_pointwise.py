"""Pointwise (1x1, stride 1, no padding) convolutions on the native CPU backend: forward and
backward data are GEMMs straight on x and err (no padded copy, no im2col), bit for bit with
ops_ref on ragged shapes, every ISA here, 1 and 2 threads, plain and requantizing."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
from dsptrain.backends.ops_cpu import CpuBackend  # noqa: E402

# (n, h, w, c, o): MobileNetV2's expand and project shapes (batch cut down), ragged channels
SHAPES = [
    (4, 8, 8, 144, 24),
    (4, 8, 8, 24, 144),
    (2, 5, 7, 3, 5),
    (1, 3, 3, 17, 33),
    (3, 1, 1, 960, 320),
    (2, 4, 4, 64, 7),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_pointwise_passes_take_the_gemm_and_match_ref(ref, shape):
    n, h, w, c, o = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
    err = rng.integers(-128, 128, (n, h, w, o), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, 1, 1, c), dtype=np.int8)
    key = cases.rng_key(len(shape))
    previous_isa, previous_threads, threshold = native.isa(), native.threads(), native.serial_below_macs()
    cpu = CpuBackend()
    try:
        for isa in native.supported_isas():
            native.set_isa(isa)
            assert native.conv_algorithm("forward", x, wt, 1, 0) == "gemm_1x1"
            assert native.conv_algorithm("backward_data", x, wt, 1, 0) == "gemm_1x1"
            for threads in (1, 2):
                native.set_threads(threads)
                native.set_serial_below_macs(0.0)
                np.testing.assert_array_equal(cpu.conv2d_s8(x, wt, 1, 0), ref.conv2d_s8(x, wt, 1, 0))
                np.testing.assert_array_equal(
                    cpu.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w)), ref.conv2d_bwd_data_s8(err, wt, 1, 0, (h, w))
                )
                for mode in cases.ROUNDING:
                    for shift in (None, 2, 18):
                        got = cpu.conv2d_bwd_data_requant_s8(err, wt, 1, 0, (h, w), mode, key, shift)
                        want = ref.conv2d_bwd_data_requant_s8(err, wt, 1, 0, (h, w), mode, key, shift)
                        np.testing.assert_array_equal(got[0], want[0])
                        assert got[1] == want[1]
    finally:
        native.set_isa(previous_isa)
        native.set_threads(previous_threads)
        native.set_serial_below_macs(threshold)
