"""Layers as plain descriptions, and shape inference over them.

A model is a name, an input shape (H, W, C) and an ordered list of layers. Layers
hold no tensors: a recipe's `lower()` turns them into ops and owns the weights.

Most layers read the output of the layer before them. Branches (residual blocks,
squeeze-excitation, Fire modules, ShuffleNet's split and shuffle) stay a flat list in
topological order: a single-input layer with `source` reads the output of the named
layer instead (a ResNet's projection shortcut reads the block input), `Add` adds the
output of `skip_from` to its input, and the layers of several inputs (`Mul`, `Concat`)
name them all in `inputs`. Each name is an earlier layer, or `INPUT` for the model
input; `inputs_of(layer, previous)` gives the names any layer reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ShapeError


@dataclass(frozen=True)
class Conv2d:
    name: str
    in_channels: int
    out_channels: int
    kernel: int
    stride: int = 1
    padding: int = 0
    source: str | None = None  # read this layer's output instead of the previous one
    bias: bool = False  # a per-output-channel bias (float32 in every recipe)
    groups: int = 1  # in_channels // groups inputs per output; groups == in == out: depthwise
    dilation: int = 1  # taps `dilation` pixels apart

    @property
    def weight_shape(self):
        return (self.out_channels, self.kernel, self.kernel, self.in_channels // self.groups)

    @property
    def bias_shape(self):
        return (self.out_channels,)

    @property
    def depthwise(self) -> bool:
        """One filter per channel (the CONTRACT-dwconv hooks), not a grouped or dense product."""
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    @property
    def span(self) -> int:
        """The kernel's reach on the input: (kernel - 1) * dilation + 1."""
        return (self.kernel - 1) * self.dilation + 1

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if c != self.in_channels:
            raise ShapeError(f"{self.name} weight shape {self.weight_shape} does not match input channels {c}")
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise ShapeError(
                f"{self.name}: groups {self.groups} does not divide {self.in_channels} input and "
                f"{self.out_channels} output channels"
            )
        oh = (h + 2 * self.padding - self.span) // self.stride + 1
        ow = (w + 2 * self.padding - self.span) // self.stride + 1
        if oh < 1 or ow < 1:
            raise ShapeError(
                f"{self.name}: kernel {self.kernel} does not fit input {h}x{w} with padding {self.padding}"
            )
        return (oh, ow, self.out_channels)


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    bias: bool = False  # a per-output bias (float32 in every recipe)

    @property
    def weight_shape(self):
        return (self.out_features, self.in_features)

    @property
    def bias_shape(self):
        return (self.out_features,)

    def out_shape(self, shape):
        if len(shape) != 1 or shape[0] != self.in_features:
            raise ShapeError(f"{self.name} expects {self.in_features} input features, got shape {shape}")
        return (self.out_features,)


@dataclass(frozen=True)
class ReLU:
    name: str

    def out_shape(self, shape):
        return shape


@dataclass(frozen=True)
class MaxPool2d:
    """Max over each window; `padding` cells of -inf on every side, and with `ceil_mode` a
    last partial window where one starts inside the input or its left padding (PyTorch's
    and ONNX's rule)."""

    name: str
    kernel: int = 2
    stride: int = 2
    padding: int = 0
    ceil_mode: bool = False

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if self.padding * 2 > self.kernel:
            raise ShapeError(f"{self.name}: padding {self.padding} is more than half of pool {self.kernel}")
        oh, ow = (pooled_size(n, self.kernel, self.stride, self.padding, self.ceil_mode) for n in (h, w))
        if oh < 1 or ow < 1:
            raise ShapeError(f"{self.name}: pool {self.kernel} does not fit input {h}x{w}")
        return (oh, ow, c)


def pooled_size(n: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """Windows along an axis of `n` cells (PyTorch's pooling_output_shape: with ceil_mode a
    partial last window counts unless it would start in the right padding)."""
    span = n + 2 * pad - kernel
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= n + pad:
        out -= 1
    return out


@dataclass(frozen=True)
class AvgPool2d:
    """Mean over each kernel x kernel window (ONNX AveragePool): zero padding on every side,
    which the divisor counts only with `count_include_pad` (else it counts the window's
    cells inside the input). Float recipes lower it; NITI has no such integer layer."""

    name: str
    kernel: int = 2
    stride: int = 2
    padding: int = 0
    count_include_pad: bool = False

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if self.padding >= self.kernel:  # then a window could hold padding only
            raise ShapeError(f"{self.name}: padding {self.padding} is not smaller than pool {self.kernel}")
        oh = (h + 2 * self.padding - self.kernel) // self.stride + 1
        ow = (w + 2 * self.padding - self.kernel) // self.stride + 1
        if oh < 1 or ow < 1:
            raise ShapeError(f"{self.name}: pool {self.kernel} does not fit input {h}x{w} with padding {self.padding}")
        return (oh, ow, c)


@dataclass(frozen=True)
class Flatten:
    name: str

    def out_shape(self, shape):
        n = 1
        for d in shape:
            n *= d
        return (n,)


@dataclass(frozen=True)
class Dropout:
    name: str
    p: float = 0.5

    def out_shape(self, shape):
        return shape


@dataclass(frozen=True)
class BatchNorm2d:
    """Batch normalisation over channels (only recipes that have it can lower it)."""

    name: str
    channels: int
    eps: float = 1e-5  # added to the variance (EfficientNet and MNASNet use 1e-3)
    momentum: float = 0.1  # running = (1 - momentum) * running + momentum * batch statistic (PyTorch's)

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if c != self.channels:
            raise ShapeError(f"{self.name} normalises {self.channels} channels, the input has {c}")
        return shape


@dataclass(frozen=True)
class GlobalAvgPool:
    """Mean over H and W: (H, W, C) -> (C,), or (1, 1, C) with `keep_dims` (a
    squeeze-excitation's pool, read by 1x1 convs)."""

    name: str
    keep_dims: bool = False

    def out_shape(self, shape):
        c = _expect_image(self, shape)[2]
        return (1, 1, c) if self.keep_dims else (c,)


FUNCTIONS = {  # Nonlinearity.function -> the number of its params
    "clip": 2,  # (low, high): ReLU6 is clip (0, 6)
    "hardsigmoid": 2,  # (alpha, beta): clip(alpha * x + beta, 0, 1); PyTorch's is (1/6, 1/2)
    "hardswish": 0,  # x * clip(x / 6 + 1/2, 0, 1)
    "sigmoid": 0,
    "tanh": 0,
    "silu": 0,  # x * sigmoid(x), also called Swish
}


@dataclass(frozen=True)
class Nonlinearity:
    """An element-wise function (FUNCTIONS) with its derivative; ReLU keeps its own layer."""

    name: str
    function: str
    params: tuple = ()
    source: str | None = None

    def out_shape(self, shape):
        if self.function not in FUNCTIONS or len(self.params) != FUNCTIONS[self.function]:
            raise ShapeError(
                f"{self.name}: {self.function!r} with params {self.params} is not one of "
                f"{', '.join(f'{k} ({n} params)' for k, n in FUNCTIONS.items())}"
            )
        if self.function == "clip" and not self.params[0] < self.params[1]:
            raise ShapeError(f"{self.name}: clip bounds {self.params} are not increasing")
        return shape


@dataclass(frozen=True)
class Mul:
    """inputs[0] * inputs[1], element by element; the second may be (1, 1, C) and scale every
    pixel's channels (squeeze-excitation)."""

    name: str
    inputs: tuple

    def out_shape_of(self, shapes):
        x, g = shapes
        if g != x and not (len(x) == 3 and g == (1, 1, x[2])):
            raise ShapeError(f"{self.name}: cannot multiply shape {x} by {g} (equal, or (1, 1, C) per channel)")
        return x


@dataclass(frozen=True)
class Concat:
    """The inputs' channels one after another (images of one H, W)."""

    name: str
    inputs: tuple

    def out_shape_of(self, shapes):
        first = _expect_image(self, shapes[0])
        for s in shapes[1:]:
            if len(s) != 3 or s[:2] != first[:2]:
                raise ShapeError(f"{self.name}: concatenates images of shapes {list(shapes)}: H and W differ")
        return (*first[:2], sum(s[2] for s in shapes))


@dataclass(frozen=True)
class SliceChannels:
    """Channels [start, stop) of an image (one output of a channel Split or Slice)."""

    name: str
    start: int
    stop: int
    source: str | None = None

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if not 0 <= self.start < self.stop <= c:
            raise ShapeError(f"{self.name}: channels [{self.start}, {self.stop}) are not inside 0..{c}")
        return (h, w, self.stop - self.start)


@dataclass(frozen=True)
class ChannelShuffle:
    """ShuffleNet's shuffle: channels seen as (groups, C / groups), transposed (Zhang et al. 2018)."""

    name: str
    groups: int

    def out_shape(self, shape):
        c = _expect_image(self, shape)[2]
        if self.groups < 1 or c % self.groups:
            raise ShapeError(f"{self.name}: {self.groups} groups do not divide {c} channels")
        return shape


@dataclass(frozen=True)
class Add:
    """Residual add: output = input + the output of layer `skip_from` (or the block input)."""

    name: str
    skip_from: str

    def out_shape(self, shape):
        return shape


Layer = (
    Conv2d
    | Linear
    | ReLU
    | MaxPool2d
    | AvgPool2d
    | Flatten
    | Dropout
    | BatchNorm2d
    | GlobalAvgPool
    | Add
    | Nonlinearity
    | Mul
    | Concat
    | SliceChannels
    | ChannelShuffle
)
PARAMETRIC = (Conv2d, Linear)
MULTI_INPUT = (Mul, Concat)  # layers naming all their inputs in `inputs`
INPUT = "input"  # `source` / `skip_from` / `inputs` value naming the model input


def has_bias(layer) -> bool:
    """Does `layer` (a conv or linear layer) add a bias, named "<layer>.b" in a recipe's state?"""
    return bool(getattr(layer, "bias", False))


def source_of(layer) -> str | None:
    """The layer whose output `layer` reads, when it is not the previous one."""
    return getattr(layer, "source", None)


def inputs_of(layer, previous: str) -> tuple[str, ...]:
    """The names of the layers (or INPUT) whose outputs `layer` reads, in order, when
    `previous` is the layer before it: its first input is what a recipe's forward gets."""
    if isinstance(layer, MULTI_INPUT):
        return tuple(layer.inputs)
    first = source_of(layer) or previous
    return (first, layer.skip_from) if isinstance(layer, Add) else (first,)


def _expect_image(layer, shape):
    if len(shape) != 3:
        raise ShapeError(f"{layer.name} expects an image (H, W, C), got shape {shape}")
    return shape


@dataclass(frozen=True)
class Model:
    name: str
    input_shape: tuple[int, int, int]  # H, W, C
    num_classes: int
    layers: tuple[Layer, ...]
    # Starting weights in the engine's layout ("conv1.w" OHWI, "fc.w" (out, in), a bias "fc.b", batch
    # norm's "bn1.gamma/beta/mean/var"), float; None: the recipe initialises every layer.
    # An imported model carries them; the recipe converts them (interchange.weights).
    initial_weights: dict | None = field(default=None, compare=False, hash=False, repr=False)

    def shapes(self) -> list[tuple[int, ...]]:
        """Per-sample output shape of every layer, checking that they fit."""
        shapes, shape = [], tuple(self.input_shape)
        seen, previous = {INPUT: shape}, INPUT
        for layer in self.layers:
            if layer.name in seen:
                raise ShapeError(f"{self.name}: layer name {layer.name!r} is used twice")
            ins = [self._earlier(layer, name, seen) for name in inputs_of(layer, previous)]
            if isinstance(layer, MULTI_INPUT):
                shape = layer.out_shape_of(ins)
            else:
                shape = ins[0]
                if isinstance(layer, Add) and ins[1] != shape:
                    raise ShapeError(
                        f"{self.name}: {layer.name} adds {layer.skip_from} of shape {ins[1]} "
                        f"to an input of shape {shape}"
                    )
                shape = layer.out_shape(shape)
            seen[layer.name], previous = shape, layer.name
            shapes.append(shape)
        if shapes and shapes[-1] != (self.num_classes,):
            raise ShapeError(
                f"{self.name}: the last layer gives shape {shapes[-1]}, expected ({self.num_classes},) class scores"
            )
        return shapes

    def _earlier(self, layer, name, seen):
        if name not in seen:
            raise ShapeError(f"{self.name}: {layer.name} reads {name!r}, which is not an earlier layer")
        return seen[name]

    def parametric(self):
        return [layer for layer in self.layers if isinstance(layer, PARAMETRIC)]
