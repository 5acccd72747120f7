"""The blocks torchvision's mobile CNNs share (torchvision/ops/misc.py, models/_utils.py)."""

from __future__ import annotations

from torch import nn


def make_divisible(v, divisor=8, min_value=None):
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
