"""The implicit GEMM's tiles rounded to int8 in the registers (cpu_ops/gemm_rows.cpp
rows_rounded, gemm_avx512.cpp micro_rows_round): with a given shift in round or psto
mode each tile is rounded as it leaves the registers (and stored as int32 too), the
whole depth is one block, and a shift that turns out too small is mended from the int32
tiles. Bit-exact against ops_ref's composition at
one and two threads, on depths past the plain path's K block of 2048, ragged tiles, and
the magnitudes where the rounding and the +-127 clip meet (every input at -128 or 127)."""

from __future__ import annotations

import numpy as np
import pytest

from . import cases
from .test_cpu_fused_requant import given_shifts, same

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (N, H, W, C, O): 3 x 3, stride 1, pad 1. Depth 2304 forward (one block of 2304) with
# 120 outputs (a panel of 56 columns); 20 output rows (a tile of 2); 3 channels widened to 4;
# the first over a 17 x 13 image. The first two images are small enough that their taps on
# the zero border are left out (conv_trimmed.cpp, the same rounded tiles); the last takes
# gemm_rows' rows_rounded.
SHAPES = [(2, 4, 5, 256, 120), (1, 4, 5, 64, 128), (3, 6, 4, 3, 64), (1, 17, 13, 256, 120)]
FILLS = [None, (-128, -128), (127, -128), (-128, 127)]


def case(shape, fill):
    n, h, w, c, o = shape
    if fill is None:
        rng = np.random.default_rng(sum(shape))
        return cases.int8(rng, (n, h, w, c)), cases.int8(rng, (o, 3, 3, c)), cases.int8(rng, (n, h, w, o))
    return (
        np.full((n, h, w, c), fill[0], np.int8),
        np.full((o, 3, 3, c), fill[1], np.int8),
        np.full((n, h, w, o), fill[0], np.int8),
    )


@pytest.mark.parametrize("fill", FILLS, ids=["random", "min_min", "max_min", "min_max"])
@pytest.mark.parametrize("shape", SHAPES, ids=["n{}h{}w{}c{}o{}".format(*s) for s in SHAPES])
def test_rounded_tiles_every_isa(cpu_isa, ref, shape, fill, threads):
    x, w, err = case(shape, fill)
    hw = shape[1:3]
    fwd, bwd = ref.conv2d_s8(x, w, 1, 1), ref.conv2d_bwd_data_s8(err, w, 1, 1, hw)
    for i, mode in enumerate(("round", "psto")):
        key = cases.rng_key(i)
        for shift in given_shifts(fwd):
            same(
                cpu_isa.conv2d_requant_s8(x, w, 1, 1, mode, key, shift=shift),
                ref.conv2d_requant_s8(x, w, 1, 1, mode, key, shift=shift),
            )
        if shape[3] == 3:  # (the error pass of 3 channels runs on the panels)
            continue
        for shift in given_shifts(bwd):
            same(
                cpu_isa.conv2d_bwd_data_requant_s8(err, w, 1, 1, hw, mode, key, shift=shift),
                ref.conv2d_bwd_data_requant_s8(err, w, 1, 1, hw, mode, key, shift=shift),
            )


def test_the_shapes_take_the_implicit_gemm_on_avx512(on_avx512vnni):
    """Else the test above would not reach the rounded tiles."""
    for shape in SHAPES:
        x, w, _ = case(shape, None)
        want = "implicit_gemm_c4" if shape[3] == 3 else "implicit_gemm" if shape[1] > 8 else "implicit_gemm_trimmed"
        assert native.conv_algorithm("forward", x, w, 1, 1) == want
        if shape[3] != 3:
            assert native.conv_algorithm("backward_data", x, w, 1, 1) == want
