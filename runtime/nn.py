"""Layers as plain descriptions, and shape inference over them.

A model is a name, an input shape (H, W, C) and an ordered list of layers. Layers
hold no tensors: a recipe's `lower()` turns them into ops and owns the weights.

Most layers read the output of the layer before them. Two exceptions make residual
networks expressible as a flat list: a `Conv2d` with `source` reads the output of the
named layer (a ResNet's projection shortcut reads the block input), and `Add` adds the
output of `skip_from` to its input. `source`/`skip_from` name an earlier layer, or
`INPUT` for the model input.
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
    source: str | None = None   # read this layer's output instead of the previous one
    bias: bool = False          # a per-output-channel bias (recipes with float biases; NITI has none)

    @property
    def weight_shape(self):
        return (self.out_channels, self.kernel, self.kernel, self.in_channels)

    @property
    def bias_shape(self):
        return (self.out_channels,)

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if c != self.in_channels:
            raise ShapeError(f"{self.name} weight shape {self.weight_shape} does not match input channels {c}")
        oh = (h + 2 * self.padding - self.kernel) // self.stride + 1
        ow = (w + 2 * self.padding - self.kernel) // self.stride + 1
        if oh < 1 or ow < 1:
            raise ShapeError(f"{self.name}: kernel {self.kernel} does not fit input {h}x{w} with padding {self.padding}")
        return (oh, ow, self.out_channels)


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    bias: bool = False          # a per-output bias (recipes with float biases; NITI has none)

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
    name: str
    kernel: int = 2
    stride: int = 2

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if h < self.kernel or w < self.kernel:
            raise ShapeError(f"{self.name}: pool {self.kernel} does not fit input {h}x{w}")
        return ((h - self.kernel) // self.stride + 1, (w - self.kernel) // self.stride + 1, c)


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
        if self.padding >= self.kernel:   # then a window could hold padding only
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

    def out_shape(self, shape):
        h, w, c = _expect_image(self, shape)
        if c != self.channels:
            raise ShapeError(f"{self.name} normalises {self.channels} channels, the input has {c}")
        return shape


@dataclass(frozen=True)
class GlobalAvgPool:
    """Mean over H and W: (H, W, C) -> (C,)."""

    name: str

    def out_shape(self, shape):
        return (_expect_image(self, shape)[2],)


@dataclass(frozen=True)
class Add:
    """Residual add: output = input + the output of layer `skip_from` (or the block input)."""

    name: str
    skip_from: str

    def out_shape(self, shape):
        return shape


Layer = Conv2d | Linear | ReLU | MaxPool2d | AvgPool2d | Flatten | Dropout | BatchNorm2d | GlobalAvgPool | Add
PARAMETRIC = (Conv2d, Linear)
INPUT = "input"   # `source` / `skip_from` value naming the model input


def has_bias(layer) -> bool:
    """Does `layer` (a conv or linear layer) add a bias, named "<layer>.b" in a recipe's state?"""
    return bool(getattr(layer, "bias", False))


def source_of(layer) -> str | None:
    """The layer whose output `layer` reads, when it is not the previous one."""
    return getattr(layer, "source", None)


def _expect_image(layer, shape):
    if len(shape) != 3:
        raise ShapeError(f"{layer.name} expects an image (H, W, C), got shape {shape}")
    return shape


@dataclass(frozen=True)
class Model:
    name: str
    input_shape: tuple[int, int, int]   # H, W, C
    num_classes: int
    layers: tuple[Layer, ...]
    # Starting weights in the engine's layout ("conv1.w" OHWI, "fc.w" (out, in), a bias "fc.b", batch
    # norm's "bn1.gamma/beta/mean/var"), float; None: the recipe initialises every layer.
    # An imported model carries them; the recipe converts them (interchange.weights).
    initial_weights: dict | None = field(default=None, compare=False, hash=False, repr=False)

    def shapes(self) -> list[tuple[int, ...]]:
        """Per-sample output shape of every layer, checking that they fit."""
        shapes, shape = [], tuple(self.input_shape)
        seen = {INPUT: shape}
        for layer in self.layers:
            if layer.name in seen:
                raise ShapeError(f"{self.name}: layer name {layer.name!r} is used twice")
            if source_of(layer) is not None:
                shape = self._earlier(layer, source_of(layer), seen)
            if isinstance(layer, Add):
                skip = self._earlier(layer, layer.skip_from, seen)
                if skip != shape:
                    raise ShapeError(f"{self.name}: {layer.name} adds {layer.skip_from} of shape {skip} "
                                     f"to an input of shape {shape}")
            shape = layer.out_shape(shape)
            seen[layer.name] = shape
            shapes.append(shape)
        if shapes and shapes[-1] != (self.num_classes,):
            raise ShapeError(f"{self.name}: the last layer gives shape {shapes[-1]}, "
                             f"expected ({self.num_classes},) class scores")
        return shapes

    def _earlier(self, layer, name, seen):
        if name not in seen:
            raise ShapeError(f"{self.name}: {layer.name} reads {name!r}, which is not an earlier layer")
        return seen[name]

    def parametric(self):
        return [layer for layer in self.layers if isinstance(layer, PARAMETRIC)]
