"""The FP32 recipe's backward pass against finite differences of its own loss."""
import numpy as np

import dsptrain
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.executor import Executor, StepContext
from dsptrain.graph import lower
from dsptrain.nn import Conv2d, Flatten, Linear, MaxPool2d, Model, ReLU
from dsptrain.plan import place
from dsptrain.algorithms import fp32


def tiny_model():
    return Model("tiny", (6, 6, 2), 3, (
        Conv2d("conv", 2, 3, 3, stride=1, padding=1), ReLU("relu"), MaxPool2d("pool"),
        Flatten("flat"), Linear("fc", 27, 3)))


def loss_of(params, x, labels):
    w_conv, w_fc = params["conv.w"].astype(np.float64), params["fc.w"].astype(np.float64)
    from dsptrain.backends.ops_ref import im2col
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
            numeric = (loss_of(plus, x.astype(np.float64), labels) - loss_of(minus, x.astype(np.float64), labels)) / (2 * eps)
            assert abs(grad[idx] - numeric) < 1e-3 + 1e-2 * abs(numeric), (name, idx, grad[idx], numeric)
