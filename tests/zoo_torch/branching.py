"""torchvision's CNNs with parallel branches joined by Concat, restated: SqueezeNet 1.1
(Fire modules) and ShuffleNetV2 (split, channel shuffle)."""

from __future__ import annotations

import torch
from torch import nn

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
