"""A ResNet-18-shaped torch model (BasicBlocks 2-2-2-2 with batch norm and projection
shortcuts, small widths for speed) imported through ONNX: the same forward as torch
under FP32, and a few training steps under every recipe. NITI runs its batch norms as
float ops between int8 products, and the BN-free variant integer-only."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain.data import synthetic
from dsptrain.numerics import QTensor

from .helpers import images, need_torch, torch_logits, trainer_for

BN_RECIPES = ["fp32", "niti", "octo", "wageubn", "afp", "mls", "fp8"]
WIDTHS = (8, 8, 16, 16)
SHAPE = (3, 16, 16)


def resnet18_shaped(torch, norm=True, num_classes=5):
    nn = torch.nn

    def bn(c):
        return nn.BatchNorm2d(c) if norm else nn.Identity()

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), bn(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), bn(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

        def forward(self, x):
            out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(out + (self.down(x) if self.down is not None else x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, WIDTHS[0], 3, 1, 1, bias=False), bn(WIDTHS[0])
            blocks, cin = [], WIDTHS[0]
            for stage, width in enumerate(WIDTHS):
                for index in range(2):
                    blocks.append(Block(cin, width, 2 if stage > 0 and index == 0 else 1))
                    cin = width
            self.layers = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, num_classes, bias=False)

        def forward(self, x):
            x = self.layers(torch.relu(self.bn1(self.conv1(x))))
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    net = Net()
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return net.eval()


@pytest.fixture(scope="module")
def imported():
    torch = need_torch()
    net = resnet18_shaped(torch)
    return net, dsptrain.from_torch(net, torch.zeros(1, *SHAPE))


def test_structure_and_fp32_forward(imported, tmp_path):
    net, model = imported
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("Conv2d") == 1 + 8 * 2 + 3 and kinds.count("Add") == 8 and kinds.count("BatchNorm2d") == 20
    assert sum(1 for layer in model.layers if getattr(layer, "source", None)) == 3  # projection shortcuts
    pixels = images(8, (16, 16, 3))
    trainer = trainer_for(model, "fp32", tmp_path)
    got = trainer.predict(pixels)
    trainer.close()
    expected = torch_logits(net, pixels)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


def _weights(state):
    return {k: (v.q.copy() if isinstance(v, QTensor) else np.array(v)) for k, v in state.items() if k.endswith(".w")}


@pytest.mark.parametrize("recipe", BN_RECIPES)
def test_trains_under_every_recipe_that_lowers_it(imported, recipe, tmp_path):
    _, model = imported
    trainer = trainer_for(model, recipe, tmp_path)
    try:
        before = _weights(trainer.state)
        data = synthetic("train", (16, 16, 3), count=16, classes=5)
        losses = [trainer.step(data.images[i : i + 8], data.labels[i : i + 8]).loss for i in (0, 8)]
        after = _weights(trainer.state)
    finally:
        trainer.close()
    assert all(np.isfinite(losses)), (recipe, losses)
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert len(changed) == len(before), f"{recipe}: weights that did not move: {set(before) - set(changed)}"


def test_niti_runs_the_bn_free_variant_integer_only(tmp_path):
    from dsptrain import precision
    from dsptrain.graph import lower

    torch = need_torch()
    plain = dsptrain.from_torch(resnet18_shaped(torch, norm=False), torch.zeros(1, *SHAPE))
    graph = lower(plain, dsptrain.load_recipe("niti"), 8)
    assert set(precision.layer_formats(graph).values()) == {"integer"}
    assert not any(precision.is_cast(op) for op in graph.ops)
    trainer = trainer_for(plain, "niti", tmp_path)
    try:
        data = synthetic("train", (16, 16, 3), count=8, classes=5)
        stats = trainer.step(data.images, data.labels)
    finally:
        trainer.close()
    assert np.isfinite(stats.loss)
