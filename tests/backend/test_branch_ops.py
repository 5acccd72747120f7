"""The mobile CNNs' float ops (backends/base.py: act_f32 .. channel_shuffle; the grouped,
dilated and padded-pool ops of algorithms/_branch_layers.py and _float_products.py) against PyTorch,
forward and backward, on random and ragged shapes: every backend of this machine, the
ref judge included. Activations within a float32 ulp of torch (float64 inside, one
rounding); data movement exact."""

from __future__ import annotations

import numpy as np
import pytest
from dsptrain.algorithms import _branch_layers as branch
from dsptrain.algorithms import _float_products
from dsptrain.graph import Op
from dsptrain.nn import MaxPool2d


def need_torch():
    return pytest.importorskip("torch")  # the test extra installs it


SHAPES = [(2, 5, 7, 3), (1, 9, 4, 17), (3, 1, 1, 8)]
FUNCTIONS = [
    ("clip", (0.0, 6.0)),
    ("clip", (-1.5, 2.25)),
    ("hardsigmoid", (1 / 6, 0.5)),
    ("hardsigmoid", (0.2, 0.5)),
    ("hardswish", ()),
    ("sigmoid", ()),
    ("silu", ()),
    ("tanh", ()),
]


@pytest.fixture(params=["ref", "cpu"])
def be(request, make_backend):
    return make_backend(request.param)


def _torch_fn(torch, function, params):
    F = torch.nn.functional
    return {
        "clip": lambda t: F.hardtanh(t, *params),
        "hardsigmoid": F.hardsigmoid
        if params == (1 / 6, 0.5)
        else lambda t: torch.clamp(params[0] * t + params[1], 0, 1),
        "hardswish": F.hardswish,
        "sigmoid": torch.sigmoid,
        "silu": F.silu,
        "tanh": torch.tanh,
    }[function]


@pytest.mark.parametrize("function,params", FUNCTIONS)
@pytest.mark.parametrize("shape", SHAPES)
def test_activation_and_derivative_match_torch(be, function, params, shape):
    torch = need_torch()
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.flat[:4] = [-3.0, 3.0, params[0] if params else 0.0, 6.0]  # the kinks and bounds themselves
    err = rng.standard_normal(shape).astype(np.float32)
    t = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    y = _torch_fn(torch, function, params)(t)
    y.backward(torch.from_numpy(err.astype(np.float64)))
    got_y = be.act_f32(x, function, params)
    got_dx = be.act_bwd_f32(err, x, function, params)
    assert got_y.dtype == np.float32 and got_dx.dtype == np.float32
    np.testing.assert_allclose(got_y, y.detach().numpy(), rtol=1.2e-7, atol=1e-37)
    # 1 - tanh(x)**2 and its kin cancel near saturation: both sides lose ~1e-16 absolute there
    np.testing.assert_allclose(got_dx, t.grad.numpy(), rtol=1.2e-7, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("per_channel", [True, False])
def test_mul_and_its_gradients_match_torch(be, shape, per_channel):
    torch = need_torch()
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal((shape[0], 1, 1, shape[3]) if per_channel else shape).astype(np.float32)
    err = rng.standard_normal(shape).astype(np.float32)
    tx, tg = (torch.from_numpy(v.astype(np.float64)).requires_grad_() for v in (x, g))
    (tx * tg).backward(torch.from_numpy(err.astype(np.float64)))
    np.testing.assert_array_equal(be.mul_f32(x, g), x * g)  # one float32 product: exact
    dx, dg = be.mul_bwd_f32(err, x, g)
    np.testing.assert_array_equal(dx, err * g)
    np.testing.assert_allclose(dg, tg.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_channel_moves_are_exact(be, dtype):
    torch = need_torch()
    rng = np.random.default_rng(5)
    parts = [rng.integers(-100, 100, (2, 3, 5, c)).astype(dtype) for c in (3, 8, 1)]
    joined = be.concat_channels(parts)
    np.testing.assert_array_equal(joined, torch.cat([torch.from_numpy(p) for p in parts], -1).numpy())
    np.testing.assert_array_equal(be.slice_channels(joined, 3, 11), parts[1])
    padded = be.pad_channels(parts[1], 3, 12)
    assert padded.shape == (2, 3, 5, 12) and not padded[..., :3].any() and not padded[..., 11:].any()
    np.testing.assert_array_equal(padded[..., 3:11], parts[1])
    x = rng.integers(-100, 100, (2, 3, 5, 12)).astype(dtype)
    t = torch.from_numpy(x).permute(0, 3, 1, 2)  # torchvision's channel_shuffle, NCHW
    expected = t.reshape(2, 3, 4, 3, 5).transpose(1, 2).reshape(2, 12, 3, 5).permute(0, 2, 3, 1).numpy()
    shuffled = be.channel_shuffle(x, 3)
    np.testing.assert_array_equal(shuffled, expected)
    np.testing.assert_array_equal(be.channel_shuffle(shuffled, 4), x)  # the backward: C / groups groups


def _op(kind, inputs, outputs, **attrs):
    return Op(0, "t", kind, "t", "forward", tuple(inputs), tuple(outputs), (), attrs)


@pytest.mark.parametrize(
    "kernel,stride,pad,ceil,hw",
    [(3, 2, 1, False, (9, 8)), (3, 2, 0, True, (8, 10)), (2, 2, 1, True, (7, 7)), (3, 1, 1, False, (5, 6))],
)
def test_padded_and_ceil_max_pool_match_torch(be, kernel, stride, pad, ceil, hw):
    torch = need_torch()
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, *hw, 5)).astype(np.float32)
    layer = MaxPool2d("p", kernel, stride, pad, ceil)
    attrs = branch._pool_attrs(layer, x.shape)
    t = torch.from_numpy(x).permute(0, 3, 1, 2).requires_grad_()
    y = torch.nn.functional.max_pool2d(t, kernel, stride, pad, ceil_mode=ceil)
    err = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(torch.from_numpy(err))
    env = {"x": x}
    out = branch.maxpool_pad_fwd(be, _op("p", ["x"], ["y", "a"], **attrs), env, None)
    np.testing.assert_array_equal(out["y"], y.detach().permute(0, 2, 3, 1).numpy())
    env = {"e": err.transpose(0, 2, 3, 1).copy(), "a": out["a"]}
    dx = branch.maxpool_pad_bwd(be, _op("p", ["e", "a"], ["dx"], **attrs), env, None)["dx"]
    np.testing.assert_allclose(dx, t.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "cin,cout,groups,dilation,kernel,stride,pad",
    [
        (6, 6, 6, 1, 3, 1, 1),
        (5, 5, 5, 1, 5, 2, 2),
        (8, 12, 4, 1, 3, 1, 1),
        (4, 6, 2, 2, 3, 1, 2),
        (3, 4, 1, 2, 3, 2, 1),
    ],
)
def test_grouped_and_dilated_conv_match_torch(be, cin, cout, groups, dilation, kernel, stride, pad):
    torch = need_torch()
    if groups == cin == cout and dilation == 1 and "dwconv2d_f32" not in be.hooks:
        return  # this backend has no depthwise kernel yet (CONTRACT-dwconv: dwcpu's): placement sends it to ref
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 9, 7, cin)).astype(np.float32)
    w = rng.standard_normal((cout, kernel, kernel, cin // groups)).astype(np.float32)
    tx = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.from_numpy(w.astype(np.float64)).permute(0, 3, 1, 2).requires_grad_()
    y = torch.nn.functional.conv2d(tx, tw, None, stride, pad, dilation, groups)
    err = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(torch.from_numpy(err.astype(np.float64)))
    span = (kernel - 1) * dilation + 1
    attrs = dict(
        stride=stride,
        pad=pad,
        groups=groups,
        dilation=dilation,
        in_hw=(9, 7),
        kernel=(span, span),
        depthwise=groups == cin == cout and dilation == 1,
    )
    env = {"x": x, "w": w, "e": np.ascontiguousarray(err.transpose(0, 2, 3, 1))}
    got = _float_products.gconv_fwd(be, _op("c", ["x", "w"], ["y"], **attrs), env, None)["y"]
    dx = _float_products.gconv_bwd_data(be, _op("c", ["e", "w"], ["dx"], **attrs), env, None)["dx"]
    dw = _float_products.gconv_bwd_weight(be, _op("c", ["e", "x"], ["dw"], **attrs), env, None)["dw"]
    scale = np.abs(y.detach().numpy()).max()
    np.testing.assert_allclose(got, y.detach().permute(0, 2, 3, 1).numpy(), atol=1e-5 * scale)
    np.testing.assert_allclose(dx, tx.grad.permute(0, 2, 3, 1).numpy(), atol=1e-5 * np.abs(dx).max())
    np.testing.assert_allclose(dw, tw.grad.permute(0, 2, 3, 1).numpy(), atol=1e-5 * np.abs(dw).max())


def test_dense_weight_round_trips():
    rng = np.random.default_rng(17)
    w = rng.standard_normal((6, 3, 3, 2)).astype(np.float32)
    dense = branch.dense_weight(w, 3, 2)
    assert dense.shape == (6, 5, 5, 6) and np.count_nonzero(dense) == w.size
    np.testing.assert_array_equal(branch.grouped_part(dense, 3, 2), w)


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (1, 33, 35, 19), (4, 1, 1, 1000)])
def test_native_matches_the_judge(make_backend, shape):
    """cpu against ref on ragged shapes: activations within a float32 ulp (double inside on both,
    libm's tanh), products and moves bit for bit, per-channel sums within 1e-6 relative (order)."""
    ref, cpu = make_backend("ref"), make_backend("cpu")
    rng = np.random.default_rng(19)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    err = rng.standard_normal(shape).astype(np.float32)
    for function, params in FUNCTIONS:
        for hook, args in (("act_f32", (x,)), ("act_bwd_f32", (err, x))):
            want, got = getattr(ref, hook)(*args, function, params), getattr(cpu, hook)(*args, function, params)
            assert np.all(np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32)) <= 1), (hook, function)
    g = rng.standard_normal((shape[0], 1, 1, shape[3])).astype(np.float32)
    np.testing.assert_array_equal(cpu.mul_f32(x, g), ref.mul_f32(x, g))
    (dx, dg), (rdx, rdg) = cpu.mul_bwd_f32(err, x, g), ref.mul_bwd_f32(err, x, g)
    np.testing.assert_array_equal(dx, rdx)
    np.testing.assert_allclose(dg, rdg, rtol=1e-6, atol=1e-30)
    for dtype in (np.float32, np.int8):
        v = x.astype(dtype)
        c = shape[3]
        np.testing.assert_array_equal(cpu.concat_channels([v, v[..., :1]]), ref.concat_channels([v, v[..., :1]]))
        np.testing.assert_array_equal(cpu.slice_channels(v, c // 2, c), ref.slice_channels(v, c // 2, c))
        np.testing.assert_array_equal(cpu.pad_channels(v, 2, c + 5), ref.pad_channels(v, 2, c + 5))
        if c % 2 == 0 or c % 3 == 0:
            groups = 2 if c % 2 == 0 else 3
            np.testing.assert_array_equal(cpu.channel_shuffle(v, groups), ref.channel_shuffle(v, groups))


@pytest.mark.parametrize("shape", [(4, 5, 7, 3), (2, 9, 9, 33), (8, 1, 1, 16)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_torch(be, shape, training):
    """Forward (y, running statistics) and backward against torch's batch_norm in float64."""
    torch = need_torch()
    rng = np.random.default_rng(23)
    c = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    err = rng.standard_normal(shape).astype(np.float32)
    tx = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2).requires_grad_()
    tg, tb = (torch.from_numpy(v.astype(np.float64)).requires_grad_() for v in (gamma, beta))
    rm, rv = torch.from_numpy(mean.astype(np.float64)), torch.from_numpy(var.astype(np.float64))
    y = torch.nn.functional.batch_norm(tx, rm, rv, tg, tb, training, 0.1, 1e-5)
    y.backward(torch.from_numpy(err.astype(np.float64)).permute(0, 3, 1, 2))
    got_y, xhat, inv, new_mean, new_var = be.bn_fwd_f32(x, gamma, beta, mean, var, training, 0.1, 1e-5)
    want = y.detach().permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got_y, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    np.testing.assert_allclose(new_mean, rm.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(new_var, rv.numpy(), rtol=1e-6, atol=1e-7)
    if training:
        dx, dgamma, dbeta = be.bn_bwd_f32(err, xhat, inv, gamma)
        grad = tx.grad.permute(0, 2, 3, 1).numpy()
        np.testing.assert_allclose(dx, grad, rtol=1e-5, atol=1e-5 * np.abs(grad).max())
        np.testing.assert_allclose(dgamma, tg.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dbeta, tb.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (3, 11, 13, 40)])
def test_pool_sum_and_add_against_the_judge(be, make_backend, shape):
    ref = make_backend("ref")
    rng = np.random.default_rng(29)
    x, y = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(be.channel_mean_f32(x), x.astype(np.float64).mean(axis=(1, 2)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(be.channel_sum_f32(x), x.astype(np.float64).sum(axis=(0, 1, 2)), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(be.add_f32(x, y), ref.add_f32(x, y))
    np.testing.assert_array_equal(be.add_f32(x, y), x + y)
