"""Conv and Gemm/MatMul+Add biases with no batch norm after them: FP32 and the emulated
recipes keep a float bias (forward add, gradient, update, export); NITI adds its float bias
to the product's exact int32 sums and trains it with the recipe's float SGD; every recipe
drops it when asked (model.bias: drop), saying so."""

from __future__ import annotations

import dsptrain
import numpy as np
import onnx
import pytest
from dsptrain.agreement import agreement, onnxruntime_logits
from dsptrain.agreement import dsptrain_logits as checkpoint_logits
from dsptrain.data import synthetic

from .helpers import cli, dsptrain_logits, images, need_torch, torch_logits, trainer_for, write_run

FP32_TOLERANCE = 1e-4  # relative to the largest |logit|
EMULATED_BOUND = 0.06  # int8 products (Octo): within 6 % of the largest |logit|


def _biased_net(torch):
    """Conv (stride, padding) and Linear layers with biases and no batch norm."""
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 6, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * 5 * 5, 16),
        nn.ReLU(),
        nn.Linear(16, 5),
    )
    with torch.no_grad():  # biases large enough that dropping one would show
        for module in net.modules():
            if getattr(module, "bias", None) is not None:
                module.bias.uniform_(-0.5, 0.5)
    return net


def _onnx_file(torch, net, path, shape=(1, 1, 14, 14)):
    from dsptrain.interchange.torch_bridge import to_onnx_bytes

    path.write_bytes(to_onnx_bytes(net, torch.zeros(*shape)))
    return path


def test_biased_conv_and_linear_forward_equals_torch(tmp_path):
    torch = need_torch()
    net = _biased_net(torch)
    model = dsptrain.from_torch(net, torch.zeros(1, 1, 14, 14))
    assert [layer.name for layer in model.layers if getattr(layer, "bias", False)] == ["0", "2", "5", "7"]
    pixels = images(16, (14, 14, 1))
    expected = torch_logits(net, pixels)
    scale = np.abs(expected).max()
    assert np.abs(dsptrain_logits(model, "fp32", pixels, tmp_path) - expected).max() <= FP32_TOLERANCE * scale
    octo = dsptrain_logits(model, "octo", pixels, tmp_path)
    assert np.abs(octo - expected).max() <= EMULATED_BOUND * scale
    without = dsptrain.load_model(_onnx_file(torch, net, tmp_path / "b.onnx"), bias="drop")
    assert np.abs(dsptrain_logits(without, "fp32", pixels, tmp_path) - expected).max() > 10 * FP32_TOLERANCE * scale


def test_matmul_add_bias_is_kept(tmp_path):
    """MatMul followed by a constant Add (onnx.helper): the Add becomes the layer's bias."""
    rng = np.random.default_rng(3)
    h = onnx.helper
    w, b = rng.normal(0, 0.3, (16, 3)).astype(np.float32), rng.normal(0, 0.5, 3).astype(np.float32)
    nodes = [
        h.make_node("Flatten", ["x"], ["f"], axis=1, name="flat"),
        h.make_node("MatMul", ["f", "w"], ["m"], name="fc"),
        h.make_node("Add", ["m", "b"], ["y"], name="fc_bias"),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 1, 4, 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")],
    )
    path = tmp_path / "mlp.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)
    model = dsptrain.load_model(path)
    assert model.layers[-1].bias and np.array_equal(model.initial_weights[f"{model.layers[-1].name}.b"], b)
    pixels = images(8, (4, 4, 1))
    expected = ((pixels.astype(np.float64) - 128) / 128).reshape(8, -1) @ w + b
    got = dsptrain_logits(model, "fp32", pixels, tmp_path)
    assert np.abs(got - expected).max() <= FP32_TOLERANCE * np.abs(expected).max()


@pytest.mark.parametrize("recipe", ["fp32", "octo"])
def test_biases_train_and_frozen_ones_stay(recipe, tmp_path):
    torch = need_torch()
    path = _onnx_file(torch, _biased_net(torch), tmp_path / "biased.onnx")
    run = dsptrain.load_run(
        write_run(tmp_path, recipe, f"model: {{onnx: {path}}}\ntrain: {{epochs: 1, batch_size: 16, freeze: ['0']}}\n")
    )
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "out")
    data = synthetic("train", (14, 14, 1), count=64)
    labels = data.labels % 5
    before = {k: np.array(v) for k, v in trainer.state.items() if k.endswith(".b")}
    losses = []
    try:
        for _ in range(6):
            for i in range(0, 64, 16):
                losses.append(trainer.step(data.images[i : i + 16], labels[i : i + 16]).loss)
    finally:
        trainer.close()
    assert np.array_equal(before["0.b"], trainer.state["0.b"])  # frozen: bit for bit
    for name in ("2.b", "5.b", "7.b"):
        assert not np.array_equal(before[name], trainer.state[name]), name
    assert np.mean(losses[-4:]) < np.mean(losses[:4]), losses


def test_niti_trains_a_bias_and_drops_it_when_asked(tmp_path):
    torch = need_torch()
    net = _biased_net(torch)
    model = dsptrain.from_torch(net, torch.zeros(1, 1, 14, 14))
    pixels = images(16, (14, 14, 1))
    expected = torch_logits(net, pixels)
    niti = dsptrain_logits(model, "niti", pixels, tmp_path)
    assert np.abs(niti - expected).max() <= EMULATED_BOUND * np.abs(expected).max()
    trainer = trainer_for(model, "niti", tmp_path, "model: {num_classes: 5}\ntrain: {epochs: 1, batch_size: 16}\n")
    data = synthetic("train", (14, 14, 1), count=16, classes=5)
    before = {k: np.array(v) for k, v in trainer.state.items() if k.endswith(".b")}
    try:
        trainer.step(data.images, data.labels)
    finally:
        trainer.close()
    assert sorted(before) == ["0.b", "2.b", "5.b", "7.b"]
    for name, value in before.items():
        assert trainer.state[name].dtype == np.float32 and np.abs(trainer.state[name] - value).max() > 0, name
    path = _onnx_file(torch, net, tmp_path / "biased.onnx")
    run = write_run(
        tmp_path,
        "niti",
        f"model: {{onnx: {path}, bias: drop, num_classes: 10}}\ntrain: {{epochs: 1, batch_size: 16}}\n",
        name="d",
    )
    result = cli("train", run, "--train-limit", "32", "--out", tmp_path / "d")
    assert result.returncode == 0, result.stderr
    for layer in ("0", "2", "5", "7"):
        assert f"{layer}: bias dropped as asked" in result.stderr


def test_export_writes_the_bias_back(tmp_path):
    torch = need_torch()
    model = dsptrain.from_torch(_biased_net(torch), torch.zeros(1, 1, 14, 14))
    trainer = trainer_for(model, "fp32", tmp_path, "model: {num_classes: 5}\ntrain: {epochs: 1, batch_size: 16}\n")
    data = synthetic("train", (14, 14, 1), count=32)
    try:
        for i in range(0, 32, 16):
            trainer.step(data.images[i : i + 16], data.labels[i : i + 16] % 5)
        checkpoint = trainer.save()
    finally:
        trainer.close()
    out = tmp_path / "biased.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    assert np.array_equal(inits["7.bias"], trainer.state["7.b"])
    test = synthetic("test", (14, 14, 1), count=200).images
    found = agreement(checkpoint_logits(checkpoint, test), onnxruntime_logits(out, test))
    assert found["top1_agreement"] >= 0.999 and found["max_logit_diff"] <= FP32_TOLERANCE * found["logit_scale"]
    dsptrain.export(checkpoint, tmp_path / "qdq.onnx", "onnx-qdq")  # int8 weights; the bias stays float
    qdq = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(tmp_path / "qdq.onnx").graph.initializer}
    assert qdq["7.weight_q"].dtype == np.int8 and np.array_equal(qdq["7.bias"], trainer.state["7.b"])
    dsptrain.export(checkpoint, tmp_path / "biased.npz", "npz")
    with np.load(tmp_path / "biased.npz") as arrays:
        assert np.array_equal(arrays["5.bias"], trainer.state["5.b"])
    again = dsptrain.load_model(out)  # the export imports back, biases and all
    assert [layer.name for layer in again.layers if getattr(layer, "bias", False)] == ["0", "2", "5", "7"]
