"""Dilated int8 convolutions (taps `dilation` pixels apart): each backend's hooks against
ops_ref bit for bit, and ops_ref against the dense conv on a zero-filled weight.

ops_ref computes them by definition (patches with gaps, their gradients scattered back); the
CPU and the DSP run base.py's composition (gathered patches into their own exact GEMM,
backward data as the stride-1 conv of err spread on zeros with the taps flipped)."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.numerics import RngKey

from .conftest import available_backends

# (n, h, w, c, o, kernel, stride, pad, dilation): ragged sizes, padding below, at and above
# the dilated reach, strides 1 and 2, dilations 2 and 3
CASES = [
    (2, 9, 11, 3, 5, 3, 1, 2, 2),
    (1, 13, 7, 4, 6, 3, 2, 1, 3),
    (3, 10, 10, 5, 7, 2, 2, 0, 2),
    (2, 8, 9, 2, 3, 3, 1, 4, 3),
    (1, 12, 12, 3, 4, 3, 2, 3, 2),
    (2, 7, 16, 17, 9, 3, 1, 6, 3),  # a padding past the reach: frame rows dropped
    (1, 5, 5, 1, 1, 1, 2, 0, 2),  # 1x1: the dilation changes nothing
]
IDS = [f"n{c[0]}h{c[1]}w{c[2]}c{c[3]}o{c[4]}k{c[5]}s{c[6]}p{c[7]}d{c[8]}" for c in CASES]


@pytest.fixture(scope="module", params=available_backends())
def be(request, make_backend):
    backend = make_backend(request.param)
    yield backend
    backend.close()


def _operands(case, seed):
    n, h, w, c, o, k, s, p, d = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, (n, h, w, c), dtype=np.int8)
    wt = rng.integers(-127, 128, (o, k, k, c), dtype=np.int8)
    oh, ow = ((size + 2 * p - (k - 1) * d - 1) // s + 1 for size in (h, w))
    err = rng.integers(-127, 128, (n, oh, ow, o), dtype=np.int8)
    return x, wt, err


def _dense(wt, d):
    """The weight with its taps spread d apart on zeros: the same conv, undilated."""
    o, k, _, c = wt.shape
    span = (k - 1) * d + 1
    dense = np.zeros((o, span, span, c), np.int8)
    dense[:, ::d, ::d, :] = wt
    return dense


def _equal(got, want):
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ref_is_the_dense_conv_on_a_zero_filled_weight(ref, case):
    n, h, w, c, o, k, s, p, d = case
    x, wt, err = _operands(case, 1)
    dense = _dense(wt, d)
    _equal(ref.conv2d_dilated_s8(x, wt, s, p, d), ref.conv2d_s8(x, dense, s, p))
    _equal(ref.conv2d_dilated_bwd_data_s8(err, wt, s, p, d, (h, w)), ref.conv2d_bwd_data_s8(err, dense, s, p, (h, w)))
    span = (k - 1) * d + 1
    whole = ref.conv2d_bwd_weight_s8(err, x, s, p, (span, span))
    _equal(ref.conv2d_dilated_bwd_weight_s8(err, x, s, p, d, (k, k)), whole[:, ::d, ::d, :])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_products_match_ref(be, ref, case):
    n, h, w, c, o, k, s, p, d = case
    x, wt, err = _operands(case, 2)
    _equal(be.conv2d_dilated_s8(x, wt, s, p, d), ref.conv2d_dilated_s8(x, wt, s, p, d))
    _equal(
        be.conv2d_dilated_bwd_data_s8(err, wt, s, p, d, (h, w)),
        ref.conv2d_dilated_bwd_data_s8(err, wt, s, p, d, (h, w)),
    )
    _equal(
        be.conv2d_dilated_bwd_weight_s8(err, x, s, p, d, (k, k)),
        ref.conv2d_dilated_bwd_weight_s8(err, x, s, p, d, (k, k)),
    )


@pytest.mark.parametrize("mode", ["round", "psto", "sto"])
@pytest.mark.parametrize("case", CASES[:5], ids=IDS[:5])
def test_requantized_products_match_ref(be, ref, case, mode):
    """The fused epilogue: the same int8 bits and shift, stochastic rounding included, with the
    shift estimated and given (a given one larger than the estimate is kept)."""
    n, h, w, c, o, k, s, p, d = case
    x, wt, err = _operands(case, 3)
    key = RngKey(seed=7, step=3, tensor_id=11)
    for given in (None, 12):
        want = ref.conv2d_dilated_requant_s8(x, wt, s, p, d, mode, key, given)
        got = be.conv2d_dilated_requant_s8(x, wt, s, p, d, mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]
        want = ref.conv2d_dilated_bwd_data_requant_s8(err, wt, s, p, d, (h, w), mode, key, given)
        got = be.conv2d_dilated_bwd_data_requant_s8(err, wt, s, p, d, (h, w), mode, key, given)
        _equal(got[0], want[0])
        assert got[1] == want[1]


def test_extreme_operands_match_ref(be, ref):
    """All -128 / 127 operands: the largest sums, where an int32 slip would show."""
    x = np.full((2, 9, 9, 8), -128, np.int8)
    wt = np.full((4, 3, 3, 8), 127, np.int8)
    err = np.full((2, 9, 9, 4), -128, np.int8)
    _equal(be.conv2d_dilated_s8(x, wt, 1, 2, 2), ref.conv2d_dilated_s8(x, wt, 1, 2, 2))
    _equal(
        be.conv2d_dilated_bwd_data_s8(err, wt, 1, 2, 2, (9, 9)),
        ref.conv2d_dilated_bwd_data_s8(err, wt, 1, 2, 2, (9, 9)),
    )
    _equal(
        be.conv2d_dilated_bwd_weight_s8(err, x, 1, 2, 2, (3, 3)),
        ref.conv2d_dilated_bwd_weight_s8(err, x, 1, 2, 2, (3, 3)),
    )
