"""The dilated convolution's native patch gathers (cpu_ops/dilated_gather.cpp) against their
NumPy definitions in layout.py (gemm_patches, gemm_transposed), byte for byte, on ragged shapes,
1 and 2 threads; the CPU's dilated hooks run on them (test_dilated_conv.py checks the products)."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain import layout

native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")

# (n, h, w, c, kernel, stride, pad, dilation): padding below, at and past the dilated reach,
# strides 1-3, dilations 1-3, 1x1 and 3x3, one channel and many
CASES = [
    (2, 9, 11, 3, 3, 1, 2, 2),
    (1, 13, 7, 4, 3, 2, 1, 3),
    (3, 10, 10, 5, 2, 2, 0, 2),
    (2, 8, 9, 2, 3, 1, 4, 3),
    (2, 7, 16, 17, 3, 1, 6, 3),
    (1, 5, 5, 1, 1, 2, 0, 2),
    (4, 12, 12, 64, 3, 1, 1, 1),
    (2, 11, 9, 7, 3, 3, 2, 2),
]
IDS = [f"n{c[0]}h{c[1]}w{c[2]}c{c[3]}k{c[4]}s{c[5]}p{c[6]}d{c[7]}" for c in CASES]


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = native.threads()
    native.set_threads(request.param)
    yield request.param
    native.set_threads(before)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_patches_match_layout(threads, case):
    n, h, w, c, k, s, p, d = case
    x = np.random.default_rng(1).integers(-128, 128, (n, h, w, c), dtype=np.int8)
    want, _ = layout.gemm_patches(x, (1, k, k, c), s, p, d)
    np.testing.assert_array_equal(native.dilated_patches_s8(x, (k, k), s, p, d), want)
    got_t = native.dilated_patches_s8(x, (k, k), s, p, d, True)
    assert got_t.flags.c_contiguous
    np.testing.assert_array_equal(got_t, want.T)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_transposed_patches_match_layout(threads, case):
    n, h, w, c, k, s, p, d = case
    o = c + 2
    oh, ow = (layout.out_size(size, k, s, p, d) for size in (h, w))
    err = np.random.default_rng(2).integers(-128, 128, (n, oh, ow, o), dtype=np.int8)
    wt = np.zeros((o, k, k, c), np.int8)
    want, shape, _ = layout.gemm_transposed(err, wt, s, p, d, (h, w))
    assert shape == (n, h, w, c)
    np.testing.assert_array_equal(native.transposed_patches_s8(err, (k, k), s, p, d, (h, w)), want)


@pytest.mark.parametrize("shape", [(1, 1), (3, 200), (130, 70), (4096, 33)])
def test_transpose_is_numpys(threads, shape):
    a = np.random.default_rng(3).integers(-128, 128, shape, dtype=np.int8)
    np.testing.assert_array_equal(native.transpose_s8(a), a.T)


def test_a_kernel_past_the_input_is_refused_by_name():
    x = np.zeros((1, 3, 3, 2), np.int8)
    with pytest.raises(ValueError, match="dilated_patches_s8: kernel 3x3 dilation 2 padded by 0 gives no pixel"):
        native.dilated_patches_s8(x, (3, 3), 1, 0, 2)
