"""The model zoo, NHWC, no biases (integer recipes have none; FP32 matches them)."""
from __future__ import annotations

from .nn import Conv2d, Flatten, Linear, MaxPool2d, Model, ReLU


def lenet5(num_classes: int = 10) -> Model:
    """LeNet-5 for 28x28x1 (LeCun et al. 1998), padding 2 on the first conv."""
    return Model("lenet5", (28, 28, 1), num_classes, (
        Conv2d("conv1", 1, 6, 5, padding=2), ReLU("relu1"), MaxPool2d("pool1"),
        Conv2d("conv2", 6, 16, 5), ReLU("relu2"), MaxPool2d("pool2"),
        Flatten("flatten"),
        Linear("fc1", 400, 120), ReLU("relu3"),
        Linear("fc2", 120, 84), ReLU("relu4"),
        Linear("fc3", 84, num_classes),
    ))


def mandheling_lenet(num_classes: int = 10) -> Model:
    """The LeNet of Mandheling's demo: conv 1->20, conv 20->52, fc 832->500->12.

    Its code pads the 10 classes to 12 outputs; the two extra logits never match a
    label and train toward 'not this class'.
    """
    outputs = max(12, num_classes)
    return Model("mandheling_lenet", (28, 28, 1), outputs, (
        Conv2d("conv1", 1, 20, 5), ReLU("relu1"), MaxPool2d("pool1"),
        Conv2d("conv2", 20, 52, 5), ReLU("relu2"), MaxPool2d("pool2"),
        Flatten("flatten"),
        Linear("fc1", 832, 500), ReLU("relu3"),
        Linear("fc2", 500, outputs),
    ))


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
    return _vgg("vgg11", (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
                (32, 32, 3), num_classes)


MODELS = {
    "lenet5": lenet5,
    "mandheling_lenet": mandheling_lenet,
    "vgg_small": vgg_small,
    "vgg11": vgg11,
}


def build_model(name: str, num_classes: int = 10) -> Model:
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    model = MODELS[name](num_classes)
    model.shapes()
    return model
