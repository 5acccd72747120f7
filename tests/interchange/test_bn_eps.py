"""An imported batch norm keeps its own epsilon and momentum (EfficientNet and MNASNet use
eps 1e-3, momentum 0.01): eval forward, the running statistics a training step leaves, the
YAML form a checkpoint keeps, and the exported ONNX node."""

from __future__ import annotations

import warnings

import dsptrain
import numpy as np
from dsptrain.interchange.layer_spec import describe, from_description
from dsptrain.nn import BatchNorm2d

from .helpers import images, need_torch, torch_logits, trainer_for

EPS, MOMENTUM = 1e-3, 0.01


def _net(torch):
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1, bias=False),
        nn.BatchNorm2d(6, eps=EPS, momentum=MOMENTUM),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 10),
    )
    bn = net[1]
    with torch.no_grad():  # a variance near eps, so another epsilon would show
        bn.running_var.copy_(torch.linspace(5e-4, 4e-3, 6))
        bn.running_mean.copy_(torch.linspace(-0.2, 0.3, 6))
    return net


def _import(torch, net, mode="eval"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dsptrain.from_torch(net, torch.zeros(2, 3, 8, 8), mode=mode)


def test_import_keeps_eps_and_momentum_through_yaml():
    torch = need_torch()
    for mode in ("eval", "train"):
        model = _import(torch, _net(torch), mode)
        bn = next(layer for layer in model.layers if isinstance(layer, BatchNorm2d))
        assert abs(bn.eps - EPS) < 1e-9, bn
        assert abs(bn.momentum - MOMENTUM) < 1e-6, bn
        assert from_description(describe(model)).layers == model.layers


def test_eval_forward_uses_the_layers_eps(tmp_path):
    torch = need_torch()
    net = _net(torch)
    model = _import(torch, net)
    pixels = images(4, (8, 8, 3))
    trainer = trainer_for(model, "fp32", tmp_path)
    try:
        got = trainer.predict(pixels)
    finally:
        trainer.close()
    want = torch_logits(net, pixels)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_a_training_step_moves_running_statistics_by_the_layers_momentum(tmp_path):
    torch = need_torch()
    net = _net(torch)
    model = _import(torch, net)
    bn_name = next(layer.name for layer in model.layers if isinstance(layer, BatchNorm2d))
    pixels = images(16, (8, 8, 3), seed=4)
    labels = np.arange(16) % 10
    trainer = trainer_for(model, "fp32", tmp_path)
    try:
        trainer.step(pixels, labels)
        mean, var = (np.asarray(trainer.state[f"{bn_name}.{k}"], np.float64) for k in ("mean", "var"))
    finally:
        trainer.close()
    net.train()
    with torch.no_grad():
        net(torch.from_numpy(((pixels.astype(np.float32) - 128) / 128).transpose(0, 3, 1, 2).copy()))
    np.testing.assert_allclose(mean, net[1].running_mean.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(var, net[1].running_var.numpy(), rtol=1e-5, atol=1e-7)


def test_yaml_batchnorm_eps_reaches_the_exported_node(tmp_path):
    import onnx

    from .helpers import trained_checkpoint

    body = (
        "model: {name: bn, input_shape: [8, 8, 3], layers: [{kind: conv, out: 4, kernel: 3, padding: 1}, "
        "{kind: batchnorm, eps: 0.001, momentum: 0.01}, {kind: relu}, {kind: globalavgpool}, "
        "{kind: linear, out: 10}]}\n"
    )
    checkpoint = trained_checkpoint(tmp_path, "fp32", body, steps=1, batch=8)
    out = tmp_path / "bn.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    node = next(n for n in onnx.load(out).graph.node if n.op_type == "BatchNormalization")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert abs(attrs["epsilon"] - EPS) < 1e-9 and abs(attrs["momentum"] - (1 - MOMENTUM)) < 1e-6, attrs
