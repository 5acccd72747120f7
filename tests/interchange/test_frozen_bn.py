"""A frozen batch norm (train.freeze) evaluates: it normalises by its running statistics and
keeps them, its gamma and beta stay, and the error it passes on is scaled by
gamma / sqrt(var + eps), as PyTorch's module in eval mode with no gradient on its parameters
(torchvision's FrozenBatchNorm2d). One FP32 step equals PyTorch's; under NITI the frozen
layer's statistics and affine parameters stay bit for bit while the layers around it train."""

from __future__ import annotations

import dsptrain
import numpy as np

from .helpers import images, need_torch, torch_sgd_step, write_run

FP32_TOLERANCE = 1e-4


def _trainer(torch, net, recipe, tmp_path):
    """A run of `net` (an ONNX file of it) with its batch norm, layer '1', frozen."""
    from dsptrain.interchange.torch_bridge import to_onnx_bytes

    path = tmp_path / "net.onnx"
    path.write_bytes(to_onnx_bytes(net, torch.zeros(1, 1, 8, 8)))
    run = write_run(tmp_path, recipe, f"model: {{onnx: {path}}}\ntrain: {{epochs: 1, batch_size: 16, freeze: ['1']}}\n")
    return dsptrain.Trainer(dsptrain.load_run(run), progress=False, out_dir=tmp_path / "out")


def _net(torch):
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)
    )
    with torch.no_grad():  # statistics and affine parameters away from their defaults
        net[1].running_mean.uniform_(-0.3, 0.3)
        net[1].running_var.uniform_(0.5, 2.0)
        net[1].weight.uniform_(0.5, 1.5)
        net[1].bias.uniform_(-0.2, 0.2)
    return net


def test_one_fp32_step_with_a_frozen_batch_norm_equals_torch(tmp_path):
    torch = need_torch()
    net = _net(torch)
    trainer = _trainer(torch, net, "fp32", tmp_path)
    pixels, labels = images(16, (8, 8, 1), seed=5), np.arange(16) % 5
    before = {k: np.array(v) for k, v in trainer.state.items()}
    try:
        trainer.step(pixels, labels)
    finally:
        trainer.close()
    net[1].eval()
    net[1].weight.requires_grad_(False)
    net[1].bias.requires_grad_(False)
    torch_sgd_step(net, pixels, labels, trainer.recipe.optimizer)
    for name in ("1.gamma", "1.beta", "1.mean", "1.var"):  # kept, bit for bit
        assert np.array_equal(trainer.state[name], before[name]), name
    theirs = {"0.w": net[0].weight.detach().numpy().transpose(0, 2, 3, 1), "4.b": net[4].bias.detach().numpy()}
    for name, value in theirs.items():  # the conv below learns through the frozen layer's error
        assert np.abs(value - before[name]).max() > 0, name
        assert np.abs(trainer.state[name] - value).max() <= FP32_TOLERANCE * np.abs(value).max(), name


def test_niti_keeps_a_frozen_batch_norm(tmp_path):
    torch = need_torch()
    trainer = _trainer(torch, _net(torch), "niti", tmp_path)
    before = {k: (v.q.copy() if hasattr(v, "q") else np.array(v)) for k, v in trainer.state.items()}
    try:
        for seed in range(3):
            trainer.step(images(16, (8, 8, 1), seed=seed), np.arange(16) % 5)
    finally:
        trainer.close()
    for name in ("1.gamma", "1.beta", "1.mean", "1.var"):
        assert np.array_equal(trainer.state[name], before[name]), name
    assert not np.array_equal(trainer.state["0.w"].q, before["0.w"]), "the conv below trains"
