"""ONNX AveragePool with kernel, stride and padding as ONNX defines them (count_include_pad
either way): FP32 (and the emulated recipes) run it and its gradient; NITI runs the
windows it can divide by a shift (stride = kernel, no padding, power-of-two kernel) on
int8 and any other as a float op between its int8 tensors. One SGD step of an imported model with average pools
and biases equals PyTorch's step."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain import precision
from dsptrain.graph import lower

from .helpers import cli, dsptrain_logits, images, need_torch, torch_logits, torch_sgd_step, trainer_for, write_run

FP32_TOLERANCE = 1e-4  # relative to the largest |logit| (or weight change)
NITI_BOUND = 0.06  # |NITI - torch| <= 6 % of the largest |logit| (as test_import_ops)
NITI_INTEGER_POOLS = {"k2-s2"}
EMULATED_BOUND = 0.06  # Octo's int8 products: within 6 % of the largest |logit|
POOLS = {  # name -> (kernel, stride, padding, count_include_pad)
    "k2-s2": (2, 2, 0, True),
    "k3-s2-pad1-include": (3, 2, 1, True),
    "k3-s2-pad1-exclude": (3, 2, 1, False),
    "k3-s1-overlapping": (3, 1, 0, True),
    "k2-s1-pad1-exclude": (2, 1, 1, False),
}


def _net(torch, kernel, stride, padding, include):
    nn = torch.nn
    pool = nn.AvgPool2d(kernel, stride, padding, count_include_pad=include)
    out = pool(torch.zeros(1, 4, 12, 12)).shape
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), pool, nn.Flatten(), nn.Linear(4 * out[2] * out[3], 5)
    )


@pytest.mark.parametrize("case", sorted(POOLS))
def test_average_pool_forward_equals_torch(case, tmp_path):
    torch = need_torch()
    net = _net(torch, *POOLS[case])
    model = dsptrain.from_torch(net, torch.zeros(1, 1, 12, 12))
    pool = model.layers[2]
    assert (
        type(pool).__name__ == "AvgPool2d"
        and (pool.kernel, pool.stride, pool.padding, pool.count_include_pad) == POOLS[case]
    )
    pixels = images(8, (12, 12, 1))
    expected = torch_logits(net, pixels)
    got = dsptrain_logits(model, "fp32", pixels, tmp_path)
    assert np.abs(got - expected).max() <= FP32_TOLERANCE * np.abs(expected).max(), case
    if case == "k3-s2-pad1-exclude":  # an emulated recipe runs the same float pool around int8 products
        octo = dsptrain_logits(model, "octo", pixels, tmp_path)
        assert np.abs(octo - expected).max() <= EMULATED_BOUND * np.abs(expected).max()
    # NITI divides a power-of-two window with stride = kernel by a shift; other pools (and the
    # biases) run as float ops between its int8 products (algorithms/int_mixed.py)
    niti = dsptrain_logits(model, "niti", pixels, tmp_path)
    assert np.abs(niti - expected).max() <= NITI_BOUND * np.abs(expected).max(), case
    # the conv's bias makes its output float, and the pool follows its input: without it the
    # pool reads int8 and runs on it where it can
    formats = precision.layer_formats(lower(_without_biases(model), dsptrain.load_recipe("niti"), 8))
    assert formats[pool.name] == ("integer" if case in NITI_INTEGER_POOLS else "float"), case
    assert precision.layer_formats(lower(model, dsptrain.load_recipe("niti"), 8))[pool.name] == "float"


def _without_biases(model):
    import dataclasses

    layers = tuple(
        dataclasses.replace(layer, bias=False) if hasattr(layer, "bias") else layer for layer in model.layers
    )
    return dataclasses.replace(model, layers=layers, initial_weights=None)


def test_one_sgd_step_equals_torch(tmp_path):
    """Forward, the average pool's and the biases' gradients, and the update: after one
    step of the FP32 recipe (SGD, momentum, weight decay as PyTorch's) every parameter
    is where PyTorch's one step puts it."""
    torch = need_torch()
    net = _net(torch, 3, 2, 1, False)
    model = dsptrain.from_torch(net, torch.zeros(1, 1, 12, 12))
    trainer = trainer_for(model, "fp32", tmp_path, "model: {num_classes: 5}\ntrain: {epochs: 1, batch_size: 16}\n")
    pixels, labels = images(16, (12, 12, 1), seed=4), np.arange(16) % 5
    before = {k: np.array(v) for k, v in trainer.state.items()}
    try:
        trainer.step(pixels, labels)
    finally:
        trainer.close()
    torch_sgd_step(net.train(), pixels, labels, trainer.recipe.optimizer)
    theirs = {
        "0.w": net[0].weight.detach().numpy().transpose(0, 2, 3, 1),
        "0.b": net[0].bias.detach().numpy(),
        "4.b": net[4].bias.detach().numpy(),
    }
    for name, value in theirs.items():
        moved = np.abs(value - before[name]).max()
        assert moved > 0, name
        assert np.abs(trainer.state[name] - value).max() <= FP32_TOLERANCE * np.abs(value).max(), name


def test_niti_trains_an_average_pool_it_cannot_shift_and_plan_says_float(tmp_path):
    torch = need_torch()
    from dsptrain.interchange.torch_bridge import to_onnx_bytes

    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, bias=False),
        torch.nn.AvgPool2d(3, 2, 1),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 5 * 5, 10, bias=False),
    )
    path = tmp_path / "avg.onnx"
    path.write_bytes(to_onnx_bytes(net, torch.zeros(1, 1, 12, 12)))
    run = write_run(tmp_path, "niti", f"model: {{onnx: {path}}}\ntrain: {{epochs: 1, batch_size: 16}}\n")
    result = cli("train", run, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    result = cli("plan", run)
    assert result.returncode == 0, result.stderr
    assert (
        "float 2 layers (AvgPool2d 1, Flatten 1)" in result.stdout
        and "integer 2 layers (Conv2d 1, Linear 1)" in result.stdout
    )
