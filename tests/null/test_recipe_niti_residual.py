"""NITI on residual networks, against float64: the residual ops (aligned add, error joins,
integer average pool and its backward) on the integers they are given, and the integer
weight gradients of a small ResNet against finite differences of the same network in
float64 (weights and input dequantized). An exponent slip at an add, a join or the pool
changes a gradient's scale or direction and fails here."""

import dsptrain
import numpy as np
import pytest
from dsptrain.algorithms import niti
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.data import Dataset, as_32x32_rgb
from dsptrain.errors import DataError
from dsptrain.execute import Executor, StepContext
from dsptrain.graph import lower
from dsptrain.layout import im2col
from dsptrain.nn import Add, Conv2d, GlobalAvgPool, Linear, Model, ReLU
from dsptrain.numerics import QTensor
from dsptrain.plan import place

BATCH = 8


def tiny_resnet():
    """A stem, then one block whose main path and 1x1 shortcut both read the stem (its
    error is a join of two), an add, a 4x4 average pool and a classifier."""
    return Model(
        "tiny_resnet_nobn",
        (4, 4, 2),
        3,
        (
            Conv2d("stem", 2, 6, 3, padding=1),
            ReLU("stem_relu"),
            Conv2d("conv1", 6, 6, 3, padding=1),
            ReLU("relu1"),
            Conv2d("conv2", 6, 6, 3, padding=1),
            Conv2d("short", 6, 6, 1, source="stem_relu"),
            Add("add", skip_from="conv2"),
            ReLU("relu2"),
            GlobalAvgPool("pool"),
            Linear("fc", 6, 3),
        ),
    )


def run_backward(seed=0):
    """One NITI forward and backward (no update) of the tiny ResNet on ref: (graph, env, params)."""
    model, recipe = tiny_resnet(), dsptrain.load_recipe("niti")
    graph = lower(model, recipe, BATCH)
    rng = np.random.default_rng(seed)
    params = niti.init_params(model, recipe, rng)
    x = QTensor(rng.integers(-127, 128, (BATCH, 4, 4, 2)).astype(np.int8), -7)
    env = {**params, "input": x, "labels": rng.integers(0, 3, BATCH)}
    backends = {"ref": RefBackend()}
    ops = [op for op in graph.ops if op.phase != "update"]
    Executor(backends, niti).run(place(graph, backends), env, StepContext(recipe, graph, seed, 0, 0, BATCH), ops=ops)
    return graph, env, params


def value(t: QTensor) -> np.ndarray:
    return t.q.astype(np.float64) * 2.0**t.e


def test_residual_ops_match_float64_of_their_integer_inputs():
    graph, env, _ = run_backward()
    seen = set()
    for op in graph.ops:
        if op.kind not in ("niti.add", "niti.join", "niti.avgpool_fwd", "niti.avgpool_bwd"):
            continue
        seen.add(op.kind)
        out = env[op.outputs[0]]
        inputs = [env[name] for name in op.inputs]
        assert out.q.dtype == np.int8 and all(t.q.dtype == np.int8 for t in inputs)  # integer throughout
        if op.kind in ("niti.add", "niti.join"):
            exact = sum(value(t) for t in inputs)
            # the finer operand rounds onto the coarser grid, the sum onto the result's grid
            bound = 0.5 * 2.0 ** max(t.e for t in inputs) + 0.5 * 2.0**out.e
            assert np.abs(value(out) - exact).max() <= bound, op.name
            assert out.e >= max(t.e for t in inputs)
        elif op.kind == "niti.avgpool_fwd":
            assert np.abs(value(out) - value(inputs[0]).mean(axis=(1, 2))).max() <= 0.5 * 2.0**out.e
        else:  # the error of a mean: every position gets err / (H*W), exactly
            np.testing.assert_array_equal(
                value(out), np.broadcast_to(value(inputs[0])[:, None, None, :] / 16, out.q.shape)
            )
    assert seen == {"niti.add", "niti.join", "niti.avgpool_fwd", "niti.avgpool_bwd"}


def float64_loss(w, x, labels):
    """The tiny ResNet in float64: summed cross-entropy (NITI's loss error is p - onehot,
    not divided by the batch)."""

    def conv(v, name, k, pad):
        out = im2col(v, k, k, 1, pad) @ w[name].reshape(len(w[name]), -1).T
        return out.reshape(*v.shape[:3], len(w[name]))

    stem = np.maximum(conv(x, "stem", 3, 1), 0)
    main = conv(np.maximum(conv(stem, "conv1", 3, 1), 0), "conv2", 3, 1)
    out = np.maximum(main + conv(stem, "short", 1, 0), 0)
    logits = out.mean(axis=(1, 2)) @ w["fc"].T
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(x)), labels].sum()


def integer_and_numeric_gradients(seed):
    """{layer: (NITI's weight gradient as a float, the float64 network's by finite differences)}."""
    graph, env, params = run_backward(seed)
    w = {name: value(params[f"{name}.w"]) for name in ("fc", "stem", "conv1", "conv2", "short")}
    x, labels = value(env["input"]), env["labels"]
    eps, grads = 1e-6, {}
    for name in w:
        op = graph.op(f"{name}.bwd_weight")
        err, act = env[op.inputs[0]], env[op.inputs[1]]
        numeric = np.zeros_like(w[name])
        for i in np.ndindex(w[name].shape):
            plus, minus = dict(w), dict(w)
            plus[name], minus[name] = w[name].copy(), w[name].copy()
            plus[name][i] += eps
            minus[name][i] -= eps
            numeric[i] = (float64_loss(plus, x, labels) - float64_loss(minus, x, labels)) / (2 * eps)
        grads[name] = (env[op.outputs[0]].astype(np.float64) * 2.0 ** (err.e + act.e), numeric)
    return grads


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integer_weight_gradients_follow_the_float64_gradient(seed):
    grads = integer_and_numeric_gradients(seed)
    scale = {name: np.linalg.norm(i) / np.linalg.norm(n) for name, (i, n) in grads.items()}
    # NITI's integer softmax error is p - onehot to within its rounding (seen: 0.78 .. 1.01)
    assert 0.6 < scale["fc"] < 1.5, scale
    for name, (integer, numeric) in grads.items():
        cosine = np.dot(integer.ravel(), numeric.ravel()) / (np.linalg.norm(integer) * np.linalg.norm(numeric))
        # 8-bit activations and errors blur each element; the direction holds, and every
        # layer's scale matches the classifier's (an exponent slip below it breaks that)
        assert cosine > 0.9 and 0.8 < scale[name] / scale["fc"] < 1.25, (name, cosine, scale)


def test_aligned_add_survives_any_exponent_gap():
    be = RefBackend()
    a = np.array([100, -100, 127], np.int8)
    for gap in (8, 63, 64, 200):  # shifts past int64's width: the finer operand rounds to 0
        q, e = be.add_align_s8(a, gap, a, 0, "round", None)
        assert q.tolist() == a.tolist() and e == gap


def test_fashion_mnist_pads_to_32x32_rgb_for_the_resnets():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 28, 1)).astype(np.uint8)
    data = as_32x32_rgb(Dataset(images, np.arange(5), "fashion-mnist/train"))
    assert data.images.shape == (5, 32, 32, 3) and data.images.dtype == np.uint8
    for c in range(3):
        np.testing.assert_array_equal(data.images[:, 2:30, 2:30, c], images[..., 0])
    border = np.ones((32, 32), bool)
    border[2:30, 2:30] = False
    assert not data.images[:, border].any()
    with pytest.raises(DataError, match=r"synthetic/train: only 28x28x1 .* \(32, 32, 3\)"):
        as_32x32_rgb(Dataset(data.images, data.labels, "synthetic/train"))
