"""torchvision's eight mobile CNNs restated in torch.nn, at reduced width and depth for CI.

PyPI's torchvision wheel for torch 2.13 fails `import torchvision` (torchvision::nms), so
the tests do not import it: each class follows torchvision's definition (v0.23,
torchvision/models/<file>.py, named at each model), block for block: the same layers, the
same order, the same activations, padding, pooling and biases, the same torch functions in
`forward` (so the ONNX export has the same operators). Only widths and repeats are
parameters here (torchvision's own `width_mult`, settings and layer counts), smaller by
default; `FULL` holds torchvision's. Random weights only: nothing is downloaded.

The models by family: inverted.py (MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
MNASNet), branching.py (SqueezeNet 1.1, ShuffleNetV2), resnet.py (ResNet-18, -50), on the
blocks of blocks.py; here the table of names and `build`.
"""

from __future__ import annotations

import torch
from torch import nn

from .branching import ShuffleNetV2, SqueezeNet11
from .inverted import EfficientNetB0, MNASNet, MobileNetV2, MobileNetV3Small
from .resnet import BasicBlock, Bottleneck, ResNet


def resnet18(num_classes=10, **kw):
    return ResNet(BasicBlock, num_classes=num_classes, **kw)


def resnet50(num_classes=10, **kw):
    kw.setdefault("widths", (4, 8, 8, 16))
    return ResNet(Bottleneck, num_classes=num_classes, **kw)


ZOO = {
    "mobilenet_v2": MobileNetV2,
    "mobilenet_v3_small": MobileNetV3Small,
    "efficientnet_b0": EfficientNetB0,
    "squeezenet1_1": SqueezeNet11,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "shufflenet_v2_x0_5": ShuffleNetV2,
    "mnasnet0_5": MNASNet,
}

# torchvision's own sizes, for bench/bench_zoo.py (the tests use the reduced defaults)
FULL = {
    "mobilenet_v2": dict(
        settings=(
            (1, 16, 1, 1),
            (6, 24, 2, 2),
            (6, 32, 3, 2),
            (6, 64, 4, 2),
            (6, 96, 3, 1),
            (6, 160, 3, 2),
            (6, 320, 1, 1),
        ),
        first=32,
        last=1280,
    ),
    "resnet18": dict(layers=(2, 2, 2, 2), widths=(64, 128, 256, 512)),
    "resnet50": dict(layers=(3, 4, 6, 3), widths=(64, 128, 256, 512)),
    "shufflenet_v2_x0_5": dict(repeats=(4, 8, 4), channels=(24, 48, 96, 192, 1024)),
    "mobilenet_v3_small": dict(
        settings=(
            (16, 3, 16, 16, True, nn.ReLU, 2),
            (16, 3, 72, 24, False, nn.ReLU, 2),
            (24, 3, 88, 24, False, nn.ReLU, 1),
            (24, 5, 96, 40, True, nn.Hardswish, 2),
            (40, 5, 240, 40, True, nn.Hardswish, 1),
            (40, 5, 240, 40, True, nn.Hardswish, 1),
            (40, 5, 120, 48, True, nn.Hardswish, 1),
            (48, 5, 144, 48, True, nn.Hardswish, 1),
            (48, 5, 288, 96, True, nn.Hardswish, 2),
            (96, 5, 576, 96, True, nn.Hardswish, 1),
            (96, 5, 576, 96, True, nn.Hardswish, 1),
        ),
        last_channel=1024,
    ),
    "efficientnet_b0": dict(
        settings=(
            (1, 3, 1, 32, 16, 1),
            (6, 3, 2, 16, 24, 2),
            (6, 5, 2, 24, 40, 2),
            (6, 3, 2, 40, 80, 3),
            (6, 5, 1, 80, 112, 3),
            (6, 5, 2, 112, 192, 4),
            (6, 3, 1, 192, 320, 1),
        )
    ),
    "squeezenet1_1": dict(w=16, full=True),
    # mnasnet0_5: torchvision's depths for alpha 0.5 (_get_depths: 16, 8, then 16, 24, 40, 48, 96, 160)
    "mnasnet0_5": dict(
        stem=(16, 8),
        stacks=(
            (16, 3, 2, 3, 3),
            (24, 5, 2, 3, 3),
            (40, 5, 2, 6, 3),
            (48, 3, 1, 6, 2),
            (96, 5, 2, 6, 4),
            (160, 3, 1, 6, 1),
        ),
        last=1280,
    ),
}


def build(name: str, num_classes: int = 10, full: bool = False, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return ZOO[name](num_classes=num_classes, **(FULL.get(name, {}) if full else {}))
