"""torchvision's eight mobile CNNs restated in torch.nn, at reduced width and depth for CI.

PyPI's torchvision wheel for torch 2.13 fails `import torchvision` (torchvision::nms), so
the tests do not import it: each class below follows torchvision's definition (v0.23,
torchvision/models/<file>.py, named at each model), block for block: the same layers, the
same order, the same activations, padding, pooling and biases, the same torch functions in
`forward` (so the ONNX export has the same operators). Only widths and repeats are
parameters here (torchvision's own `width_mult`, settings and layer counts), smaller by
default; `FULL` holds torchvision's. Random weights only: nothing is downloaded.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _make_divisible(v, divisor=8, min_value=None):
    """torchvision/models/_utils.py: the channel count rounded to a multiple of 8, at most 10 % down."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvNormAct(nn.Sequential):
    """torchvision/ops/misc.py Conv2dNormActivation: conv (bias only without a norm), BN, activation."""

    def __init__(self, cin, cout, kernel=3, stride=1, groups=1, act=nn.ReLU6, norm=True, bn_eps=1e-5, bn_momentum=0.1):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=not norm)]
        if norm:
            layers.append(nn.BatchNorm2d(cout, eps=bn_eps, momentum=bn_momentum))
        if act is not None:
            layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.SiLU) else act())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision/ops/misc.py SqueezeExcitation: avgpool, fc1 (1x1 conv), act, fc2, scale act, x * scale."""

    def __init__(self, channels, squeeze, act=nn.ReLU, scale_act=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = act(), scale_act()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


# ---------------------------------------------------------------- mobilenet_v2 (mobilenetv2.py)


class InvertedResidualV2(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvNormAct(cin, hidden, 1)] if expand != 1 else []
        layers += [
            ConvNormAct(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=10, settings=((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2)), first=16, last=64):
        super().__init__()
        features, cin = [ConvNormAct(3, first, stride=2)], first
        for t, c, n, s in settings:
            for i in range(n):
                features.append(InvertedResidualV2(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(ConvNormAct(cin, last, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------- mobilenet_v3_small (mobilenetv3.py)


class InvertedResidualV3(nn.Module):
    def __init__(self, cin, kernel, expanded, cout, use_se, act, stride):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        norm = dict(bn_eps=0.001, bn_momentum=0.01)
        layers = [ConvNormAct(cin, expanded, 1, act=act, **norm)] if expanded != cin else []
        layers.append(ConvNormAct(expanded, expanded, kernel, stride, groups=expanded, act=act, **norm))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8), scale_act=nn.Hardsigmoid))
        layers.append(ConvNormAct(expanded, cout, 1, act=None, **norm))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


class MobileNetV3Small(nn.Module):
    # (in, kernel, expanded, out, SE, activation, stride): torchvision's first blocks, narrower
    SETTINGS = (
        (16, 3, 16, 16, True, nn.ReLU, 2),
        (16, 3, 32, 16, False, nn.ReLU, 2),
        (16, 3, 40, 16, False, nn.ReLU, 1),
        (16, 5, 48, 24, True, nn.Hardswish, 2),
        (24, 5, 64, 24, True, nn.Hardswish, 1),
    )

    def __init__(self, num_classes=10, settings=SETTINGS, last_channel=64):
        super().__init__()
        norm = dict(bn_eps=0.001, bn_momentum=0.01)
        layers = [ConvNormAct(3, settings[0][0], 3, 2, act=nn.Hardswish, **norm)]
        layers += [InvertedResidualV3(*s) for s in settings]
        last_in = settings[-1][3]
        layers.append(ConvNormAct(last_in, 6 * last_in, 1, act=nn.Hardswish, **norm))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(6 * last_in, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2, inplace=True),
            nn.Linear(last_channel, num_classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------- efficientnet_b0 (efficientnet.py)


class MBConv(nn.Module):
    def __init__(self, expand_ratio, kernel, stride, cin, cout):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        norm = dict(bn_eps=1e-3)
        expanded = _make_divisible(cin * expand_ratio, 8)
        layers = [ConvNormAct(cin, expanded, 1, act=nn.SiLU, **norm)] if expanded != cin else []
        layers += [
            ConvNormAct(expanded, expanded, kernel, stride, groups=expanded, act=nn.SiLU, **norm),
            SqueezeExcitation(expanded, max(1, cin // 4), act=nn.SiLU),
            ConvNormAct(expanded, cout, 1, act=None, **norm),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x):  # stochastic depth is the identity with p = 0 (torchvision skips it then)
        result = self.block(x)
        return result + x if self.use_res_connect else result


class EfficientNetB0(nn.Module):
    # (expand, kernel, stride, in, out, layers): torchvision's B0 stages, narrower and shallower
    SETTINGS = ((1, 3, 1, 16, 8, 1), (6, 3, 2, 8, 12, 2), (6, 5, 2, 12, 16, 1))

    def __init__(self, num_classes=10, settings=SETTINGS):
        super().__init__()
        layers = [ConvNormAct(3, settings[0][3], 3, 2, act=nn.SiLU, bn_eps=1e-3)]
        for expand, kernel, stride, cin, cout, count in settings:
            layers.append(
                nn.Sequential(
                    *[
                        MBConv(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout)
                        for i in range(count)
                    ]
                )
            )
        last_in = settings[-1][4]
        layers.append(ConvNormAct(last_in, 4 * last_in, 1, act=nn.SiLU, bn_eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2, inplace=True), nn.Linear(4 * last_in, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------- squeezenet1_1 (squeezenet.py)


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand1x1, expand3x3):
        super().__init__()
        self.squeeze, self.squeeze_activation = nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True)
        self.expand1x1, self.expand1x1_activation = nn.Conv2d(squeeze, expand1x1, 1), nn.ReLU(inplace=True)
        self.expand3x3, self.expand3x3_activation = nn.Conv2d(squeeze, expand3x3, 3, padding=1), nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
        )


class SqueezeNet11(nn.Module):
    def __init__(self, num_classes=10, w=8, full=False):
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
        if full:  # torchvision's: w = 16, two Fires a stage, four in the last
            fires = [
                [Fire(4 * w, w, 4 * w, 4 * w), Fire(8 * w, w, 4 * w, 4 * w)],
                [Fire(8 * w, 2 * w, 8 * w, 8 * w), Fire(16 * w, 2 * w, 8 * w, 8 * w)],
                [
                    Fire(16 * w, 3 * w, 12 * w, 12 * w),
                    Fire(24 * w, 3 * w, 12 * w, 12 * w),
                    Fire(24 * w, 4 * w, 16 * w, 16 * w),
                    Fire(32 * w, 4 * w, 16 * w, 16 * w),
                ],
            ]
            last = 32 * w
        else:
            fires = [
                [Fire(4 * w, w, 4 * w, 4 * w), Fire(8 * w, w, 4 * w, 4 * w)],
                [Fire(8 * w, 2 * w, 8 * w, 8 * w)],
                [Fire(16 * w, 3 * w, 12 * w, 12 * w)],
            ]
            last = 24 * w
        self.features = nn.Sequential(
            nn.Conv2d(3, 4 * w, 3, 2), nn.ReLU(inplace=True), pool(), *fires[0], pool(), *fires[1], pool(), *fires[2]
        )
        final_conv = nn.Conv2d(last, num_classes, 1)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), final_conv, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )
        nn.init.normal_(final_conv.weight, mean=0.0, std=0.01)

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# ---------------------------------------------------------------- resnet18 / resnet50 (resnet.py)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, width * 4, 1, bias=False), nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers=(1, 1, 1, 1), widths=(8, 16, 16, 32), num_classes=10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, 2, 3, bias=False)
        self.bn1, self.relu = nn.BatchNorm2d(self.inplanes), nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], 2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], 2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

    def _make_layer(self, block, width, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != width * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, width * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(width * block.expansion),
            )
        layers = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = width * block.expansion
        layers += [block(self.inplanes, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------- shufflenet_v2_x0_5 (shufflenetv2.py)


def channel_shuffle(x, groups: int):
    batchsize, num_channels, height, width = x.size()
    x = x.view(batchsize, groups, num_channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batchsize, num_channels, height, width)


class ShuffleBlock(nn.Module):
    def __init__(self, inp, oup, stride):
        super().__init__()
        self.stride = stride
        branch = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
                nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch, 1, 1, 0, bias=False),
                nn.BatchNorm2d(branch),
                nn.ReLU(inplace=True),
            )
        else:
            self.branch1 = nn.Sequential()
        cin = inp if stride > 1 else branch
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin, branch, 1, 1, 0, bias=False),
            nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False),
            nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, 1, 0, bias=False),
            nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(2, 1, 1), channels=(8, 16, 32, 64, 128), num_classes=10):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU(inplace=True)
        )
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for name, count, cout in zip(("stage2", "stage3", "stage4"), repeats, channels[1:4]):
            setattr(
                self,
                name,
                nn.Sequential(ShuffleBlock(cin, cout, 2), *[ShuffleBlock(cout, cout, 1) for _ in range(count - 1)]),
            )
            cin = cout
        self.conv5 = nn.Sequential(
            nn.Conv2d(cin, channels[-1], 1, 1, 0, bias=False), nn.BatchNorm2d(channels[-1]), nn.ReLU(inplace=True)
        )
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x):
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean([2, 3]))


# ---------------------------------------------------------------- mnasnet0_5 (mnasnet.py)

_BN_MOMENTUM = 1 - 0.9997


class MnasInvertedResidual(nn.Module):
    def __init__(self, cin, cout, kernel, stride, expansion):
        super().__init__()
        mid = cin * expansion
        self.apply_residual = cin == cout and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False),
            nn.BatchNorm2d(mid, momentum=_BN_MOMENTUM),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid, momentum=_BN_MOMENTUM),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout, momentum=_BN_MOMENTUM),
        )

    def forward(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


class MNASNet(nn.Module):
    # (out, kernel, stride, expansion, repeats) after the stem: torchvision's first stacks, shallower
    STACKS = ((12, 3, 2, 3, 2), (16, 5, 2, 3, 1), (24, 5, 2, 6, 1))

    def __init__(self, num_classes=10, stem=(16, 8), stacks=STACKS, last=64):
        super().__init__()
        m = _BN_MOMENTUM
        layers = [
            nn.Conv2d(3, stem[0], 3, padding=1, stride=2, bias=False),
            nn.BatchNorm2d(stem[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(stem[0], stem[0], 3, padding=1, stride=1, groups=stem[0], bias=False),
            nn.BatchNorm2d(stem[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(stem[0], stem[1], 1, bias=False),
            nn.BatchNorm2d(stem[1], momentum=m),
        ]
        cin = stem[1]
        for cout, kernel, stride, expansion, repeats in stacks:
            layers.append(
                nn.Sequential(
                    *[
                        MnasInvertedResidual(cin if i == 0 else cout, cout, kernel, stride if i == 0 else 1, expansion)
                        for i in range(repeats)
                    ]
                )
            )
            cin = cout
        layers += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last, momentum=m), nn.ReLU(inplace=True)]
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2, inplace=True), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


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
