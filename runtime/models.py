"""The model zoo, NHWC, no biases (integer recipes have none; FP32 matches them).

Batch normalisation is part of the model's name, not a switch a recipe flips: a model
with BN (`lenet5_bn`, `resnet18`, `resnet34`) trains only under recipes that lower
BatchNorm2d (WAGEUBN, Octo, AFP, MLS, FP8); NITI has no BN, so it trains the `_nobn`
ResNets, and asking it for `resnet18` fails at load time naming the first BN layer.
"""

from __future__ import annotations

from functools import partial

from .nn import Add, BatchNorm2d, Conv2d, Flatten, GlobalAvgPool, Linear, MaxPool2d, Model, ReLU


def lenet5(num_classes: int = 10) -> Model:
    """LeNet-5 for 28x28x1 (LeCun et al. 1998), padding 2 on the first conv."""
    return Model(
        "lenet5",
        (28, 28, 1),
        num_classes,
        (
            Conv2d("conv1", 1, 6, 5, padding=2),
            ReLU("relu1"),
            MaxPool2d("pool1"),
            Conv2d("conv2", 6, 16, 5),
            ReLU("relu2"),
            MaxPool2d("pool2"),
            Flatten("flatten"),
            Linear("fc1", 400, 120),
            ReLU("relu3"),
            Linear("fc2", 120, 84),
            ReLU("relu4"),
            Linear("fc3", 84, num_classes),
        ),
    )


def lenet5_bn(num_classes: int = 10) -> Model:
    """LeNet-5 with batch norm after each conv (for recipes built around BN, e.g. WAGEUBN)."""
    return Model(
        "lenet5_bn",
        (28, 28, 1),
        num_classes,
        (
            Conv2d("conv1", 1, 6, 5, padding=2),
            BatchNorm2d("bn1", 6),
            ReLU("relu1"),
            MaxPool2d("pool1"),
            Conv2d("conv2", 6, 16, 5),
            BatchNorm2d("bn2", 16),
            ReLU("relu2"),
            MaxPool2d("pool2"),
            Flatten("flatten"),
            Linear("fc1", 400, 120),
            ReLU("relu3"),
            Linear("fc2", 120, 84),
            ReLU("relu4"),
            Linear("fc3", 84, num_classes),
        ),
    )


def mandheling_lenet(num_classes: int = 10) -> Model:
    """The LeNet of Mandheling's demo: conv 1->20, conv 20->52, fc 832->500->12.

    Its code pads the 10 classes to 12 outputs; the two extra logits never match a
    label and train toward 'not this class'.
    """
    outputs = max(12, num_classes)
    return Model(
        "mandheling_lenet",
        (28, 28, 1),
        outputs,
        (
            Conv2d("conv1", 1, 20, 5),
            ReLU("relu1"),
            MaxPool2d("pool1"),
            Conv2d("conv2", 20, 52, 5),
            ReLU("relu2"),
            MaxPool2d("pool2"),
            Flatten("flatten"),
            Linear("fc1", 832, 500),
            ReLU("relu3"),
            Linear("fc2", 500, outputs),
        ),
    )


def _vgg(name, plan, input_shape, num_classes) -> Model:
    layers, channels, block, index = [], input_shape[2], 1, 1
    for item in plan:
        if item == "M":
            layers.append(MaxPool2d(f"pool{block}"))
            block += 1
            continue
        layers += [Conv2d(f"conv{index}", channels, item, 3, padding=1), ReLU(f"relu{index}")]
        channels, index = item, index + 1
    h = input_shape[0] // 2 ** plan.count("M")
    layers += [Flatten("flatten"), Linear("fc", channels * h * h, num_classes)]
    return Model(name, input_shape, num_classes, tuple(layers))


def vgg_small(num_classes: int = 10) -> Model:
    """NITI's VGG-small for 32x32x3 (Wang et al., NITI, TPDS 2022)."""
    return _vgg("vgg_small", (128, 128, "M", 256, 256, "M", 512, 512, "M"), (32, 32, 3), num_classes)


def vgg11(num_classes: int = 10) -> Model:
    """VGG-11 (Simonyan & Zisserman 2015, configuration A) for 32x32x3."""
    return _vgg("vgg11", (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"), (32, 32, 3), num_classes)


def _basic_block(name, block_in, in_ch, out_ch, stride, norm) -> list:
    """He et al.'s BasicBlock: two 3x3 convs; a strided 1x1 conv on the shortcut when the
    shape changes. Flat: the shortcut layers follow the main path, so `Add` reads the main
    path through `skip_from` and the shortcut (or the block input) as its input."""

    def bn(tag, channels):
        return [BatchNorm2d(f"{name}.{tag}", channels)] if norm else []

    main = [
        Conv2d(f"{name}.conv1", in_ch, out_ch, 3, stride, 1),
        *bn("bn1", out_ch),
        ReLU(f"{name}.relu1"),
        Conv2d(f"{name}.conv2", out_ch, out_ch, 3, 1, 1),
        *bn("bn2", out_ch),
    ]
    main_out = main[-1].name
    if stride != 1 or in_ch != out_ch:
        shortcut = [Conv2d(f"{name}.short", in_ch, out_ch, 1, stride, 0, source=block_in), *bn("short_bn", out_ch)]
        return [*main, *shortcut, Add(f"{name}.add", skip_from=main_out), ReLU(f"{name}.relu2")]
    return [*main, Add(f"{name}.add", skip_from=block_in), ReLU(f"{name}.relu2")]


def resnet(depths: tuple[int, ...], num_classes: int = 10, norm: bool = True, name: str = "resnet") -> Model:
    """ResNet for 32x32x3 (He et al. 2016, CIFAR stem): 3x3 conv, no max-pool, BasicBlocks
    of 64/128/256/512 channels (stride 2 from the second stage), global average pool, fc."""
    layers = [Conv2d("conv1", 3, 64, 3, 1, 1), *([BatchNorm2d("bn1", 64)] if norm else []), ReLU("relu1")]
    channels, block_in = 64, "relu1"
    for stage, (depth, width) in enumerate(zip(depths, (64, 128, 256, 512)), start=1):
        for index in range(depth):
            stride = 2 if stage > 1 and index == 0 else 1
            block = _basic_block(f"layer{stage}.{index}", block_in, channels, width, stride, norm)
            layers += block
            channels, block_in = width, block[-1].name
    layers += [GlobalAvgPool("avgpool"), Linear("fc", channels, num_classes)]
    return Model(name, (32, 32, 3), num_classes, tuple(layers))


MODELS = {
    "lenet5": lenet5,
    "mandheling_lenet": mandheling_lenet,
    "vgg_small": vgg_small,
    "vgg11": vgg11,
    "lenet5_bn": lenet5_bn,
    "resnet18": partial(resnet, (2, 2, 2, 2), norm=True, name="resnet18"),
    "resnet34": partial(resnet, (3, 4, 6, 3), norm=True, name="resnet34"),
    "resnet18_nobn": partial(resnet, (2, 2, 2, 2), norm=False, name="resnet18_nobn"),
    "resnet34_nobn": partial(resnet, (3, 4, 6, 3), norm=False, name="resnet34_nobn"),
}


def build_model(name: str, num_classes: int = 10) -> Model:
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    model = MODELS[name](num_classes)
    model.shapes()
    return model
