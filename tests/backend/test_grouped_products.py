"""The emulated recipes' grouped and depthwise conv products (algorithms/_products.py): one
product per group, or the depthwise hooks (int16 operands digit by digit), give the same exact
sums as the dense product on the zero-filled block-diagonal weight they replace
(_branch_layers.dense_weight), on every backend of this machine, ragged shapes included."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.algorithms import _branch_layers as branch
from dsptrain.algorithms import _products as products

# (N, H, W, C, O, groups, kernel, stride, pad): depthwise, grouped, odd sizes
CASES = [
    (2, 7, 5, 6, 6, 6, 3, 1, 1),
    (3, 9, 8, 5, 5, 5, 5, 2, 2),
    (1, 6, 11, 8, 12, 4, 3, 2, 1),
    (2, 4, 4, 6, 4, 2, 1, 1, 0),
    (2, 5, 6, 3, 3, 3, 3, 2, 0),
]
KINDS = ["fwd", "bwd_data", "bwd_weight"]


@pytest.fixture(params=["ref", "cpu"])
def be(request, make_backend):
    return make_backend(request.param)


def _operands(rng, kind, case, dtype, high):
    n, h, w, c, o, groups, k, s, p = case
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    x = rng.integers(-high, high + 1, (n, h, w, c)).astype(dtype)
    wt = rng.integers(-high, high + 1, (o, k, k, c // groups)).astype(dtype)
    err = rng.integers(-high, high + 1, (n, oh, ow, o)).astype(dtype)
    return {"fwd": (x, wt), "bwd_data": (err, wt), "bwd_weight": (err, x)}[kind]


def _attrs(case):
    n, h, w, c, o, groups, k, s, p = case
    plain = dict(conv=True, stride=s, pad=p, in_hw=(h, w), kernel=(k, k))
    return plain, dict(plain, groups=groups, depthwise=groups == c == o)


def _dense(fn, kind, a, b, case):
    """The product the grouped one replaces: dense on the zero-filled weight."""
    plain, _ = _attrs(case)
    groups = case[5]
    if kind == "bwd_weight":
        return branch.grouped_part(fn(kind, a, b, plain), groups, 1)
    return fn(kind, a, branch.dense_weight(b, groups, 1), plain)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_int8_grouped_product_is_the_dense_one(be, kind, case):
    a, b = _operands(np.random.default_rng(3), kind, case, np.int8, 127)
    got = products.int8_product(be, kind, a, b, _attrs(case)[1])
    want = _dense(lambda *args: products.int8_product(be, *args), kind, a, b, case)
    assert got.dtype in (np.int32, np.int64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("high", [127, 1000, 32767])  # one, two and three int8 digits
def test_int16_grouped_product_is_the_dense_one(be, kind, case, high):
    a, b = _operands(np.random.default_rng(5), kind, case, np.int16, high)
    got = products.int16_product(be, kind, a, b, _attrs(case)[1])
    want = _dense(lambda *args: products.int16_product(be, *args), kind, a, b, case)
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))


def test_digits_rebuild_the_integers():
    q = np.array([0, 1, -1, 63, 64, -64, -65, 127, -127, 128, 8191, -8192, 32767, -32768], np.int16)
    digits = products._digits(q)
    assert all(d.dtype == np.int8 and np.abs(d.astype(int)).max() <= 64 for d in digits) and len(digits) == 3
    rebuilt = sum(d.astype(np.int64) << (7 * i) for i, d in enumerate(digits))
    np.testing.assert_array_equal(rebuilt, q.astype(np.int64))


@pytest.mark.parametrize("case", [c for c in CASES if c[5] != c[3]])
@pytest.mark.parametrize("kind", KINDS)
def test_float64_grouped_product_is_the_dense_one(kind, case):
    a, b = _operands(np.random.default_rng(7), kind, case, np.float64, 100)
    got = products._float64_product(kind, a, b, _attrs(case)[1])
    np.testing.assert_array_equal(got, _dense(products._float64_product, kind, a, b, case))
