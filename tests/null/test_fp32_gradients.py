"""The FP32 recipe's backward pass against finite differences of its own loss."""

import dsptrain
import numpy as np
from dsptrain.algorithms import _float_layers as fl
from dsptrain.algorithms import fp32
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.execute import Executor, StepContext
from dsptrain.graph import lower
from dsptrain.layout import im2col
from dsptrain.models import build_model
from dsptrain.nn import Add, BatchNorm2d, Conv2d, Flatten, GlobalAvgPool, Linear, MaxPool2d, Model, ReLU
from dsptrain.plan import place


def tiny_model():
    return Model(
        "tiny",
        (6, 6, 2),
        3,
        (
            Conv2d("conv", 2, 3, 3, stride=1, padding=1),
            ReLU("relu"),
            MaxPool2d("pool"),
            Flatten("flat"),
            Linear("fc", 27, 3),
        ),
    )


def loss_of(params, x, labels):
    w_conv, w_fc = params["conv.w"].astype(np.float64), params["fc.w"].astype(np.float64)
    cols = im2col(x, 3, 3, 1, 1)
    z = (cols @ w_conv.reshape(3, -1).T).reshape(len(x), 6, 6, 3)
    z = np.maximum(z, 0)
    z = z.reshape(len(x), 3, 2, 3, 2, 3).max(axis=(2, 4)).reshape(len(x), -1)
    logits = z @ w_fc.T
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(x)), labels].mean()


def test_fp32_gradients_match_finite_differences():
    model = tiny_model()
    recipe = dsptrain.load_recipe("fp32")
    graph = lower(model, recipe, 4)
    backends = {"ref": RefBackend()}
    plan = place(graph, backends)
    rng = np.random.default_rng(0)
    params = fp32.init_params(model, recipe, rng)
    x = rng.normal(size=(4, 6, 6, 2)).astype(np.float32)
    labels = rng.integers(0, 3, 4)
    env = {**params, "input": x, "labels": labels}
    ctx = StepContext(recipe, graph, 0, 0, 0, 4)
    without_update = [op for op in graph.ops if op.phase != "update"]
    Executor(backends, fp32).run(plan, env, ctx, ops=without_update)
    eps = 1e-4
    for name in ("conv.w", "fc.w"):
        grad = env[name.replace(".w", ".grad")]
        for _ in range(6):
            idx = tuple(rng.integers(0, s) for s in params[name].shape)
            plus = {k: v.astype(np.float64).copy() for k, v in params.items()}
            minus = {k: v.astype(np.float64).copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric = (loss_of(plus, x.astype(np.float64), labels) - loss_of(minus, x.astype(np.float64), labels)) / (
                2 * eps
            )
            assert abs(grad[idx] - numeric) < 1e-3 + 1e-2 * abs(numeric), (name, idx, grad[idx], numeric)


# ---------------------------------------------------------------- residual networks (BN, add, average pool)


def tiny_resnet():
    """A stem, then one BasicBlock-shaped block whose 1x1 shortcut and main path both read
    the stem, so the stem's error is the sum of two (FP32's join)."""
    return Model(
        "tiny_resnet",
        (4, 4, 2),
        3,
        (
            Conv2d("stem", 2, 3, 3, padding=1),
            ReLU("stem_relu"),
            Conv2d("conv1", 3, 4, 3, padding=1),
            BatchNorm2d("bn1", 4),
            ReLU("relu1"),
            Conv2d("conv2", 4, 4, 3, padding=1),
            BatchNorm2d("bn2", 4),
            Conv2d("short", 3, 4, 1, source="stem_relu"),
            BatchNorm2d("short_bn", 4),
            Add("add", skip_from="bn2"),
            ReLU("relu2"),
            GlobalAvgPool("pool"),
            Linear("fc", 4, 3),
        ),
    )


def resnet_loss(p, x, labels):
    """The tiny ResNet's mean cross-entropy in float64, written out from the layers' formulas."""

    def conv(v, name, k, pad):
        w = p[f"{name}.w"]
        out = im2col(v, k, k, 1, pad) @ w.reshape(len(w), -1).T
        return out.reshape(*v.shape[:3], len(w))

    def bn(v, name):
        mean, var = v.mean(axis=(0, 1, 2)), v.var(axis=(0, 1, 2))
        return p[f"{name}.gamma"] * (v - mean) / np.sqrt(var + fl.BN_EPS) + p[f"{name}.beta"]

    stem = np.maximum(conv(x, "stem", 3, 1), 0)
    main = bn(conv(np.maximum(bn(conv(stem, "conv1", 3, 1), "bn1"), 0), "conv2", 3, 1), "bn2")
    out = np.maximum(main + bn(conv(stem, "short", 1, 0), "short_bn"), 0)
    logits = out.mean(axis=(1, 2)) @ p["fc.w"].T
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(x)), labels].mean()


def test_fp32_resnet_gradients_match_finite_differences():
    model, recipe, batch = tiny_resnet(), dsptrain.load_recipe("fp32"), 4
    graph = lower(model, recipe, batch)
    assert any(op.kind == "fp32.join" for op in graph.ops)  # the stem's two errors are summed
    backends = {"ref": RefBackend()}
    rng = np.random.default_rng(1)
    params = fp32.init_params(model, recipe, rng)
    for name in ("bn1", "bn2", "short_bn"):  # away from gamma 1, beta 0
        params[f"{name}.gamma"] = (1 + 0.2 * rng.normal(size=4)).astype(np.float32)
        params[f"{name}.beta"] = (0.2 * rng.normal(size=4)).astype(np.float32)
    x = rng.normal(size=(batch, 4, 4, 2)).astype(np.float32)
    labels = rng.integers(0, 3, batch)
    env = {**{k: v.copy() for k, v in params.items()}, "input": x, "labels": labels}
    ops = [op for op in graph.ops if op.phase != "update"]
    Executor(backends, fp32).run(place(graph, backends), env, StepContext(recipe, graph, 0, 0, 0, batch), ops=ops)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    x64, eps = x.astype(np.float64), 1e-5
    checked = ("stem.w", "conv1.w", "conv2.w", "short.w", "fc.w", "bn1.gamma", "bn2.beta", "short_bn.gamma")
    for name in checked:
        grad = env[name.replace(".w", ".grad") if name.endswith(".w") else f"{name}.grad"]
        assert grad.shape == params[name].shape and grad.dtype == np.float32
        for _ in range(5):
            idx = tuple(rng.integers(0, s) for s in params[name].shape)
            plus, minus = dict(p64), dict(p64)
            plus[name], minus[name] = p64[name].copy(), p64[name].copy()
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric = (resnet_loss(plus, x64, labels) - resnet_loss(minus, x64, labels)) / (2 * eps)
            assert abs(grad[idx] - numeric) < 1e-4 + 1e-2 * abs(numeric), (name, idx, grad[idx], numeric)


def test_fp32_lowers_the_resnets_and_updates_batch_norm():
    recipe = dsptrain.load_recipe("fp32")
    for name in ("resnet18", "resnet34"):
        graph = lower(build_model(name), recipe, 2)
        updates = {op.inputs[0] for op in graph.ops if op.kind == "fp32.sgd"}
        assert "layer1.0.bn1.gamma" in updates and "bn1.beta" in updates and "fc.w" in updates
