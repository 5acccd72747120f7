"""The inverted-residual CNNs of torchvision restated: MobileNetV2, MobileNetV3-Small,
EfficientNet-B0, MNASNet (each section names torchvision's file)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .blocks import ConvNormAct, SqueezeExcitation, make_divisible

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
            layers.append(SqueezeExcitation(expanded, make_divisible(expanded // 4, 8), scale_act=nn.Hardsigmoid))
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
        expanded = make_divisible(cin * expand_ratio, 8)
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
