"""FP8's depthwise passes (FP16 products, chunked FP16 sums over each dot product's own terms):
the CPU's kernels (cpu_ops/dwconv_fp16.cpp) against ops_ref bit for bit, and ops_ref against
the rule it states, checked on the dense product where the two must agree."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain import float_ops
from dsptrain.algorithms._branch_layers import dense_weight, grouped_part

from .conftest import available_backends

# (n, h, w, c, kernel, stride, pad): ragged sizes, strides 1 and 2, a kernel of more taps
# than a chunk holds (chunk 4 below), channels below and above the dense chunk of 64
CASES = [
    (2, 9, 7, 5, 3, 1, 1),
    (1, 12, 11, 17, 3, 2, 1),
    (3, 6, 6, 3, 5, 1, 2),
    (2, 8, 8, 64, 3, 2, 0),
    (1, 5, 9, 70, 3, 1, 1),
]
IDS = [f"n{c[0]}h{c[1]}w{c[2]}c{c[3]}k{c[4]}s{c[5]}p{c[6]}" for c in CASES]


@pytest.fixture(params=available_backends(exclude=("ref", "dsp")))
def be(request, make_backend):
    return make_backend(request.param)


def _fp8(rng, shape, wide=False):
    """FP8 1-5-2 values (as the recipe rounds them), signed zeros among them; `wide` spreads the
    exponents so products overflow and underflow FP16."""
    scale = np.exp2(rng.integers(-14, 15, shape)) if wide else 1.0
    x = float_ops.round_float(rng.standard_normal(shape) * scale, 5, 2, "nearest_even", None).astype(np.float32)
    x[rng.random(shape) < 0.05] = -0.0
    return x


def _operands(case, seed, wide=False):
    n, h, w, c, k, s, p = case
    rng = np.random.default_rng(seed)
    x, wt = _fp8(rng, (n, h, w, c), wide), _fp8(rng, (c, k, k, 1), wide)
    oh, ow = ((size + 2 * p - k) // s + 1 for size in (h, w))
    return x, wt, _fp8(rng, (n, oh, ow, c), wide)


def _same(got, want):
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # signed zeros and NaNs too


@pytest.mark.parametrize("fp16_adds", [True, False], ids=["fp16_adds", "fp32_chunks"])
@pytest.mark.parametrize("chunk", [64, 4])
@pytest.mark.parametrize("wide", [False, True], ids=["normal", "wide"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cpu_matches_ref(be, ref, case, chunk, fp16_adds, wide):
    n, h, w, c, k, s, p = case
    x, wt, err = _operands(case, 5, wide)
    _same(
        be.dwconv2d_fp16_chunked(x, wt, s, p, chunk, fp16_adds),
        ref.dwconv2d_fp16_chunked(x, wt, s, p, chunk, fp16_adds),
    )
    _same(be.dwconv2d_bwd_data_fp16(err, wt, s, p, (h, w)), ref.dwconv2d_bwd_data_fp16(err, wt, s, p, (h, w)))
    _same(
        be.dwconv2d_bwd_weight_fp16_chunked(err, x, s, p, (k, k), chunk, fp16_adds),
        ref.dwconv2d_bwd_weight_fp16_chunked(err, x, s, p, (k, k), chunk, fp16_adds),
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ref_is_the_chunked_dot_product_of_each_output(ref, case):
    """Each output is matmul_fp16_chunked of its own taps (forward) or pixels (weight gradient);
    backward data is the dense product's (each product rounded, the sums exact, rounded once)."""
    n, h, w, c, k, s, p = case
    x, wt, err = _operands(case, 6)
    y = ref.dwconv2d_fp16_chunked(x, wt, s, p, 4, True)
    cols = ref.im2col(x, k, k, s, p).reshape(-1, k * k, c)
    for ch in (0, c - 1):
        want = float_ops.matmul_fp16_chunked(cols[:, :, ch], wt[ch].reshape(-1, 1), False, 4, True)
        np.testing.assert_array_equal(y[..., ch].reshape(-1), want[:, 0])
    g = ref.dwconv2d_bwd_weight_fp16_chunked(err, x, s, p, (k, k), 4, True)
    for ch in (0, c - 1):
        want = float_ops.matmul_fp16_chunked(err[..., ch].reshape(-1, 1), cols[:, :, ch], True, 4, True)
        np.testing.assert_array_equal(g[ch].reshape(-1), want[0])
    dense = dense_weight(wt, c, 1)
    dcols = float_ops.matmul_fp16_chunked(err.reshape(-1, c), dense.reshape(c, -1), False, 64, True)
    image = ref.col2im(dcols.astype(np.float64), err.shape[:3], (k, k, c), s, p, (h, w))
    np.testing.assert_array_equal(ref.dwconv2d_bwd_data_fp16(err, wt, s, p, (h, w)), image.astype(np.float16))


def test_with_64_channels_or_more_the_forward_is_the_dense_products(ref):
    """Where each tap of the dense (kh, kw, c) row sits in its own chunk (C >= 64), the dense
    product's FP16 sums are the taps' sequential FP16 sums: the old dense path's bits."""
    case = CASES[3]
    n, h, w, c, k, s, p = case
    x, wt, err = _operands(case, 7)
    dense = dense_weight(wt, c, 1)
    cols = ref.im2col(x, k, k, s, p)
    want = float_ops.matmul_fp16_chunked(cols, dense.reshape(c, -1).T.copy(), False, 64, True)
    np.testing.assert_array_equal(ref.dwconv2d_fp16_chunked(x, wt, s, p, 64, True).reshape(-1, c), want)
    g = float_ops.matmul_fp16_chunked(err.reshape(-1, c), cols, True, 64, True).reshape(c, k, k, c)
    np.testing.assert_array_equal(
        ref.dwconv2d_bwd_weight_fp16_chunked(err, x, s, p, (k, k), 64, True), grouped_part(g, c, 1)
    )
