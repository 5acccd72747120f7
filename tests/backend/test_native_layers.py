"""The native kernels that keep the mobile CNNs' last float layers out of NumPy on the CPU
(cpu_ops/pool_pad_f32.cpp, layers_f32.cpp: bias_add_f32, channel_mean_bwd_f32,
maxpool_pad_f32 and its backward) against ops_ref on random and ragged shapes, bit for bit;
FP32's linear weight gradient on gemm_f32 within float32 rounding of the NumPy product."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.algorithms import _float_products
from dsptrain.graph import Op
from dsptrain.nn import MaxPool2d

from .conftest import float_pool_input

SHAPES = [(2, 5, 7, 3), (1, 9, 4, 17), (3, 1, 1, 8), (4, 13, 11, 33)]
# (kernel, stride, pad, ceil_mode) as torchvision's stems and SqueezeNet's pools use them, and ragged
POOLS = [(3, 2, 1, False), (3, 2, 0, True), (2, 2, 1, True), (3, 1, 1, False), (5, 3, 2, True), (2, 1, 0, False)]


@pytest.fixture
def pair(make_backend):
    pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    return make_backend("ref"), make_backend("cpu")


@pytest.mark.parametrize("shape", SHAPES)
def test_bias_add_is_the_judges(pair, shape):
    ref, cpu = pair
    rng = np.random.default_rng(1)
    y = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1]).astype(np.float32)
    got = cpu.bias_add_f32(y, b)
    np.testing.assert_array_equal(got, ref.bias_add_f32(y, b))
    assert got is not y and np.array_equal(y, y.copy())
    flat = y.reshape(-1, shape[-1])  # a linear layer's (N, C)
    np.testing.assert_array_equal(cpu.bias_add_f32(flat, b), ref.bias_add_f32(flat, b))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("keep_dims", [False, True])
def test_global_pool_backward_is_the_judges(pair, shape, keep_dims):
    ref, cpu = pair
    n, h, w, c = shape
    err = np.random.default_rng(2).standard_normal((n, 1, 1, c) if keep_dims else (n, c)).astype(np.float32)
    got = cpu.channel_mean_bwd_f32(err, (h, w))
    assert got.shape == shape
    np.testing.assert_array_equal(got, ref.channel_mean_bwd_f32(err, (h, w)))


def _fits(shape, kernel, pad):
    return pad <= kernel // 2 and min(shape[1:3]) + 2 * pad >= kernel  # a pool PyTorch has


@pytest.mark.parametrize(
    "shape,kernel,stride,pad,ceil", [(s, *p) for s in SHAPES for p in POOLS if _fits(s, p[0], p[2])]
)
def test_padded_max_pool_is_the_judges(pair, shape, kernel, stride, pad, ceil):
    ref, cpu = pair
    n, h, w, c = shape
    out_hw = MaxPool2d("p", kernel, stride, pad, ceil).out_shape((h, w, c))[:2]
    rng = np.random.default_rng(3)
    x = float_pool_input(rng, shape)  # ties and signed zeros: the first maximum must win
    x[rng.random(shape) < 0.05] = -np.inf
    y, argmax = cpu.maxpool_pad_f32(x, kernel, stride, pad, out_hw)
    want_y, want_argmax = ref.maxpool_pad_f32(x, kernel, stride, pad, out_hw)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(argmax, want_argmax)
    err = float_pool_input(rng, y.shape)
    np.testing.assert_array_equal(
        cpu.maxpool_pad_bwd_f32(err, argmax, kernel, stride, pad, (h, w)),
        ref.maxpool_pad_bwd_f32(err, argmax, kernel, stride, pad, (h, w)),
    )


def test_padded_max_pool_takes_nan_as_numpy_does(pair):
    ref, cpu = pair
    x = np.random.default_rng(4).standard_normal((2, 6, 6, 5)).astype(np.float32)
    x[0, 1, 1, :] = np.nan
    x[1, 0, 0, 2] = np.nan
    for got, want in zip(cpu.maxpool_pad_f32(x, 3, 2, 1, (3, 3)), ref.maxpool_pad_f32(x, 3, 2, 1, (3, 3))):
        np.testing.assert_array_equal(got, want)


def test_padded_max_pool_refuses_windows_off_the_image(pair):
    _, cpu = pair
    x = np.zeros((1, 4, 4, 2), np.float32)
    with pytest.raises(ValueError, match="maxpool_pad_f32: kernel 3, stride 2, pad 1 do not make 4x4 windows"):
        cpu.maxpool_pad_f32(x, 3, 2, 1, (4, 4))
    with pytest.raises(ValueError, match="channel_mean_bwd_f32: err must be"):
        cpu.channel_mean_bwd_f32(np.zeros((2, 3, 1, 4), np.float32), (2, 2))


@pytest.mark.parametrize("batch,outs,ins", [(16, 10, 64), (5, 7, 33), (1, 3, 1)])
def test_fp32_linear_weight_gradient_on_gemm_f32(pair, batch, outs, ins):
    rng = np.random.default_rng(5)
    err = rng.standard_normal((batch, outs)).astype(np.float32)
    x = rng.standard_normal((batch, 1, 1, ins)).astype(np.float32)
    op = Op(0, "t", "_float_products.linear_bwd_weight", "t", "backward", ("e", "x"), ("g",), ("gemm_f32",), {})
    want = err.astype(np.float64).T @ x.reshape(batch, -1).astype(np.float64)
    for be in pair:
        got = _float_products.linear_bwd_weight(be, op, {"e": err, "x": x}, None)["g"]
        assert got.dtype == np.float32 and got.shape == (outs, ins)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("rows,classes", [(32, 10), (7, 3), (1, 1), (5, 1000)])
@pytest.mark.parametrize("divisor", [32.0, 32.0 / 1024, 7.0])
def test_loss_gradient_within_a_float32_ulp_of_the_judge(pair, rows, classes, divisor):
    ref, cpu = pair
    rng = np.random.default_rng(6)
    logits = (rng.standard_normal((rows, classes)) * 8).astype(np.float32)
    labels = rng.integers(0, classes, rows).astype(np.int64)
    got, want = cpu.softmax_xent_grad_f32(logits, labels, divisor), ref.softmax_xent_grad_f32(logits, labels, divisor)
    assert got.dtype == np.float32 and got.shape == (rows, classes)
    np.testing.assert_array_max_ulp(got, want, maxulp=1)
    np.testing.assert_allclose(got.sum(axis=1, dtype=np.float64), 0.0, atol=1e-6 / divisor)


def test_loss_gradient_refuses_a_label_out_of_range(pair):
    _, cpu = pair
    with pytest.raises(ValueError, match=r"softmax_xent_grad_f32: label 10 of row 1 is not in \[0, 10\)"):
        cpu.softmax_xent_grad_f32(np.zeros((2, 10), np.float32), np.array([0, 10], np.int64), 2.0)


@pytest.mark.parametrize("shape", [(4, 5, 7, 3), (2, 9, 9, 33), (8, 1, 1, 16), (3, 6, 5, 64)])
@pytest.mark.parametrize("training", [True, False])
def test_wageubn_batch_norm_is_the_judges(pair, shape, training):
    """WAGEUBN's integer batch norm (16-bit statistics, 8-bit gamma and beta, 8-bit error)."""
    ref, cpu = pair
    rng = np.random.default_rng(7)
    c = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    args = (x, gamma, beta, mean, var, training, 0.1, 1e-5, 16, 8)
    got, want = cpu.bn_fwd_grid_f32(*args), ref.bn_fwd_grid_f32(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    err = rng.standard_normal(shape).astype(np.float32)
    for g, w in zip(
        cpu.bn_bwd_grid_f32(err, got[1], got[2], gamma, 8, 8), ref.bn_bwd_grid_f32(err, got[1], got[2], gamma, 8, 8)
    ):
        np.testing.assert_array_equal(g, w)
    zero = np.zeros_like(err)  # an all-zero error: its grid has no range
    np.testing.assert_array_equal(cpu.bn_bwd_grid_f32(zero, got[1], got[2], gamma, 8, 8)[0], zero)


def test_wageubn_grids_by_bits_are_its_own():
    """The hooks' grids (float_ops.Pow2Grids from BNGrids.bits) round as WAGEUBN's callables do."""
    from dsptrain.algorithms.wageubn import BN_GRIDS
    from dsptrain.float_ops import Pow2Grids

    grids = Pow2Grids(*BN_GRIDS.bits)
    v = np.random.default_rng(8).standard_normal(1000) * 5
    for role in ("stat", "affine", "error"):
        np.testing.assert_array_equal(getattr(grids, role)(v), getattr(BN_GRIDS, role)(v))


@pytest.mark.parametrize("shape", [(32, 1280), (7, 3, 5, 9), (1,)])
@pytest.mark.parametrize("p", [0.2, 0.5, 0.0])
def test_dropout_apply_is_the_judges(pair, shape, p):
    ref, cpu = pair
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(np.float32)
    keep = rng.random(shape) >= p
    got = cpu.dropout_apply_f32(x, keep, p)
    np.testing.assert_array_equal(got, ref.dropout_apply_f32(x, keep, p))
    assert not np.signbit(got[~keep]).any()  # dropped cells are +0, as np.where writes them
