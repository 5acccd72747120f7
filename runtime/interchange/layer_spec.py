"""Models written as YAML layer lists, and any Model written back to that form.

    model:
      name: tiny_cnn
      input_shape: [28, 28, 1]          # H, W, C
      layers:
        - {kind: conv, out: 8, kernel: 3, padding: 1}
        - relu
        - {kind: maxpool, kernel: 2}
        - {kind: residual, body: [{kind: conv, out: 8, kernel: 3, padding: 1}, relu,
                                  {kind: conv, out: 8, kernel: 3, padding: 1}]}
        - relu
        - flatten
        - {kind: linear, out: 10}

Kinds (parameters, defaults): conv (out, kernel, stride 1, padding 0, source, bias false,
groups 1, dilation 1), linear (out, bias false; a bias is float32 in every recipe, NITI adds it to
its exact int32 sums), relu, maxpool (kernel 2, stride = kernel, padding 0, ceil_mode false),
avgpool (kernel 2, stride = kernel, padding 0, count_include_pad false; NITI shifts a
power-of-two window with stride = kernel on int8, others run in float),
globalavgpool (keep_dims false), flatten, dropout (p 0.5), batchnorm (eps 1e-5, momentum 0.1:
PyTorch's), add (skip_from),
residual (body: [...], shortcut: [...] or none); the mobile CNNs' layers: relu6, clip (low,
high), hardswish, hardsigmoid (alpha 1/6, beta 1/2), sigmoid, silu, tanh (each with an
optional source), mul (inputs: [a, b]; b may be a (1, 1, C) channel scale), concat
(inputs: [...], on channels), slice (start, stop, source: channels [start, stop)),
shuffle (groups). Input sizes
(conv's in_channels, linear's in_features) follow from the shapes. A layer without `name`
is named by its kind and a count (conv1, conv2, relu1, ...); layers of a residual block
are named `<block>.<name>`. `source` and `skip_from` are the flat form a residual block
expands to (a conv reading an earlier layer; an add of an earlier layer's output), which
is also what `layers_of` writes, so every model (zoo, ONNX, YAML) round-trips through it.
"""

from __future__ import annotations

import math

from ..errors import ConfigError, ShapeError
from ..nn import (
    INPUT,
    MULTI_INPUT,
    Add,
    AvgPool2d,
    BatchNorm2d,
    ChannelShuffle,
    Concat,
    Conv2d,
    Dropout,
    Flatten,
    GlobalAvgPool,
    Linear,
    MaxPool2d,
    Model,
    Mul,
    Nonlinearity,
    ReLU,
    SliceChannels,
)

# YAML kind -> (nn.Nonlinearity function, its params' keys and defaults)
ACTIVATIONS = {
    "relu6": ("clip", ()),
    "clip": ("clip", (("low", None), ("high", None))),
    "hardswish": ("hardswish", ()),
    "hardsigmoid": ("hardsigmoid", (("alpha", 1 / 6), ("beta", 0.5))),
    "sigmoid": ("sigmoid", ()),
    "silu": ("silu", ()),
    "tanh": ("tanh", ()),
}

KINDS = {
    "conv": {"name", "out", "kernel", "stride", "padding", "source", "bias", "groups", "dilation"},
    "linear": {"name", "out", "bias"},
    "relu": {"name"},
    "flatten": {"name"},
    "batchnorm": {"name", "eps", "momentum"},
    "globalavgpool": {"name", "keep_dims"},
    "maxpool": {"name", "kernel", "stride", "padding", "ceil_mode"},
    **{kind: {"name", "source", *(k for k, _ in params)} for kind, (_, params) in ACTIVATIONS.items()},
    "mul": {"name", "inputs"},
    "concat": {"name", "inputs"},
    "slice": {"name", "start", "stop", "source"},
    "shuffle": {"name", "groups"},
    "avgpool": {"name", "kernel", "stride", "padding", "count_include_pad"},
    "dropout": {"name", "p"},
    "add": {"name", "skip_from"},
    "residual": {"name", "body", "shortcut"},
}


class _Builder:
    def __init__(self, source, key, input_shape):
        self.source, self.key = source, key
        self.layers, self.shapes, self.counts = [], {INPUT: tuple(input_shape)}, {}

    @property
    def last(self):
        return self.layers[-1].name if self.layers else INPUT

    def error(self, where, message):
        return ConfigError(self.source, f"{self.key}{where}", message)

    def name(self, item, kind, prefix, where):
        if "name" in item:
            if not isinstance(item["name"], str) or not item["name"]:
                raise self.error(f"{where}.name", f"{item['name']!r} is not a name")
            return prefix + item["name"]
        self.counts[prefix + kind] = self.counts.get(prefix + kind, 0) + 1
        return f"{prefix}{kind}{self.counts[prefix + kind]}"

    def int_param(self, item, key, where, default=None, low=1):
        value = item.get(key, default)
        if value is None:
            raise self.error(f"{where}.{key}", "is required")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.error(f"{where}.{key}", f"{value!r} must be an integer >= {low}")
        return value

    def flag(self, item, key, where, default=False):
        value = item.get(key, default)
        if not isinstance(value, bool):
            raise self.error(f"{where}.{key}", f"{value!r} must be true or false")
        return value

    def add(self, layer, where, reads=None):
        if isinstance(layer, MULTI_INPUT):
            for name in layer.inputs:
                if name not in self.shapes:
                    raise self.error(f"{where}.inputs", f"{name!r} is not an earlier layer")
            if layer.name in self.shapes:
                raise self.error(f"{where}.name", f"{layer.name!r} is used twice")
            try:
                self.shapes[layer.name] = layer.out_shape_of([self.shapes[n] for n in layer.inputs])
            except ShapeError as exc:
                raise self.error(where, str(exc)) from None
            self.layers.append(layer)
            return
        shape = self.shapes[reads or self.last]
        if isinstance(layer, Add):
            if layer.skip_from not in self.shapes:
                raise self.error(f"{where}.skip_from", f"{layer.skip_from!r} is not an earlier layer")
            if self.shapes[layer.skip_from] != shape:
                raise self.error(
                    where,
                    f"adds {layer.skip_from!r} of shape {self.shapes[layer.skip_from]} to an input of shape {shape}",
                )
        if layer.name in self.shapes:
            raise self.error(f"{where}.name", f"{layer.name!r} is used twice")
        try:
            self.shapes[layer.name] = layer.out_shape(shape)
        except ShapeError as exc:
            raise self.error(where, str(exc)) from None
        self.layers.append(layer)

    def items(self, items, where, prefix=""):
        if not isinstance(items, (list, tuple)) or not items:
            raise self.error(where, f"expected a non-empty list of layers, got {items!r}")
        for index, item in enumerate(items):
            self.item(item, f"{where}[{index}]", prefix)

    def item(self, item, where, prefix):
        if isinstance(item, str):
            item = {"kind": item}
        if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
            raise self.error(where, f"{item!r} is neither a kind name nor a mapping with 'kind'")
        kind = item["kind"]
        if kind not in KINDS:
            raise self.error(f"{where}.kind", f"{kind!r} is not one of {', '.join(sorted(KINDS))}")
        unknown = set(item) - KINDS[kind] - {"kind"}
        if unknown:
            raise self.error(
                f"{where}.{sorted(unknown)[0]}", f"unknown key for {kind} (known: {', '.join(sorted(KINDS[kind]))})"
            )
        name = self.name(item, kind, prefix, where)
        if kind == "residual":
            return self.residual(item, name, where)
        source = item.get("source")
        if source is not None and (not isinstance(source, str) or source not in self.shapes):
            raise self.error(f"{where}.source", f"{source!r} is not an earlier layer")
        shape = self.shapes[source or self.last]
        reads = None if source in (None, self.last) else source
        layer = self.BUILDERS[kind](self, item, kind, name, shape, where, reads)
        return self.add(layer, where, reads=source)  # only kinds that take `source` (KINDS) can have one

    # One builder per kind: (item, kind, name, input shape, where, the `source` layer it reads or None) -> a layer.

    def _conv(self, item, kind, name, shape, where, reads):
        if len(shape) != 3:
            raise self.error(where, f"conv needs an image input (H, W, C), got shape {shape}")
        return Conv2d(
            name,
            shape[2],
            self.int_param(item, "out", where),
            self.int_param(item, "kernel", where),
            self.int_param(item, "stride", where, 1),
            self.int_param(item, "padding", where, 0, 0),
            source=reads,
            bias=self.flag(item, "bias", where),
            groups=self.int_param(item, "groups", where, 1),
            dilation=self.int_param(item, "dilation", where, 1),
        )

    def _activation(self, item, kind, name, shape, where, reads):
        function, keys = ACTIVATIONS[kind]
        if kind == "relu6":
            params = (0.0, 6.0)
        else:
            params = tuple(self.number(item, key, where, default) for key, default in keys)
        return Nonlinearity(name, function, params, source=reads)

    def _mul(self, item, kind, name, shape, where, reads):
        inputs = item.get("inputs")
        if (
            not isinstance(inputs, list)
            or len(inputs) < 2
            or not all(isinstance(i, str) for i in inputs)
            or (kind == "mul" and len(inputs) != 2)
        ):
            raise self.error(
                f"{where}.inputs", f"{inputs!r}: name {'two' if kind == 'mul' else 'two or more'} earlier layers"
            )
        return (Mul if kind == "mul" else Concat)(name, tuple(inputs))

    def _slice(self, item, kind, name, shape, where, reads):
        start, stop = self.int_param(item, "start", where, None, 0), self.int_param(item, "stop", where)
        return SliceChannels(name, start, stop, source=reads)

    def _shuffle(self, item, kind, name, shape, where, reads):
        return ChannelShuffle(name, self.int_param(item, "groups", where))

    def _linear(self, item, kind, name, shape, where, reads):
        if len(shape) != 1:
            raise self.error(where, f"linear needs a vector input (flatten first), got shape {shape}")
        return Linear(name, shape[0], self.int_param(item, "out", where), bias=self.flag(item, "bias", where))

    def _maxpool(self, item, kind, name, shape, where, reads):
        k = self.int_param(item, "kernel", where, 2)
        stride, padding = self.int_param(item, "stride", where, k), self.int_param(item, "padding", where, 0, 0)
        return MaxPool2d(name, k, stride, padding, self.flag(item, "ceil_mode", where))

    def _avgpool(self, item, kind, name, shape, where, reads):
        k = self.int_param(item, "kernel", where, 2)
        stride, padding = self.int_param(item, "stride", where, k), self.int_param(item, "padding", where, 0, 0)
        return AvgPool2d(name, k, stride, padding, self.flag(item, "count_include_pad", where))

    def _dropout(self, item, kind, name, shape, where, reads):
        p = item.get("p", 0.5)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            raise self.error(f"{where}.p", f"{p!r} must be a number in [0, 1)")
        return Dropout(name, float(p))

    def _batchnorm(self, item, kind, name, shape, where, reads):
        if len(shape) != 3:
            raise self.error(where, f"batchnorm needs an image input (H, W, C), got shape {shape}")
        eps, momentum = self.number(item, "eps", where, 1e-5), self.number(item, "momentum", where, 0.1)
        if not (math.isfinite(eps) and eps > 0):
            raise self.error(f"{where}.eps", f"{eps!r} must be a number > 0")
        if not 0 <= momentum <= 1:
            raise self.error(f"{where}.momentum", f"{momentum!r} must be a number in [0, 1]")
        return BatchNorm2d(name, shape[2], eps, momentum)

    def _add(self, item, kind, name, shape, where, reads):
        if not isinstance(item.get("skip_from"), str):
            raise self.error(f"{where}.skip_from", f"{item.get('skip_from')!r}: name an earlier layer")
        return Add(name, item["skip_from"])

    def _globalavgpool(self, item, kind, name, shape, where, reads):
        return GlobalAvgPool(name, self.flag(item, "keep_dims", where))

    def _plain(self, item, kind, name, shape, where, reads):
        return {"relu": ReLU, "flatten": Flatten}[kind](name)

    BUILDERS = {
        "conv": _conv,
        **dict.fromkeys(ACTIVATIONS, _activation),
        "mul": _mul,
        "concat": _mul,
        "slice": _slice,
        "shuffle": _shuffle,
        "linear": _linear,
        "maxpool": _maxpool,
        "avgpool": _avgpool,
        "dropout": _dropout,
        "batchnorm": _batchnorm,
        "add": _add,
        "globalavgpool": _globalavgpool,
        "relu": _plain,
        "flatten": _plain,
    }

    def number(self, item, key, where, default):
        value = item.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(
                f"{where}.{key}", f"{value!r} must be a number" + ("" if default is None else f" (default {default:g})")
            )
        return float(value)

    def residual(self, item, name, where):
        """body, then the shortcut reading the block input, then the add: the flat form of nn.py."""
        block_in = self.last
        self.items(item.get("body"), f"{where}.body", f"{name}.")
        body_out = self.last
        shortcut = item.get("shortcut") or []
        if shortcut:
            first = shortcut[0] if isinstance(shortcut, list) else None
            if not isinstance(first, dict) or first.get("kind") != "conv":
                raise self.error(f"{where}.shortcut[0]", "a shortcut starts with a conv (it reads the block input)")
            self.items([{**first, "source": block_in}, *shortcut[1:]], f"{where}.shortcut", f"{name}.")
            self.add(Add(f"{name}.add", skip_from=body_out), where)
        else:
            self.add(Add(f"{name}.add", skip_from=block_in), where)


def model_from_layers(
    name: str, input_shape, layers, num_classes: int | None = None, source="model", key: str = "model.layers"
) -> Model:
    """A Model from a YAML layer list; ConfigError naming `source` and the item's key."""
    shape = tuple(input_shape or ())
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ConfigError(
            source,
            key.rsplit(".", 1)[0] + ".input_shape",
            f"{input_shape!r}: give the input as [H, W, C] (layers need it)",
        )
    builder = _Builder(source, key, shape)
    builder.items(layers, "")
    out = builder.shapes[builder.last]
    if len(out) != 1:
        raise builder.error("", f"the last layer gives shape {out}; a classifier ends with a vector (linear)")
    if num_classes is not None and out[0] != num_classes:
        raise ConfigError(
            source,
            key.rsplit(".", 1)[0] + ".num_classes",
            f"{num_classes} does not match the last layer's {out[0]} outputs",
        )
    return Model(name, shape, out[0], tuple(builder.layers))


def layers_of(model: Model) -> list[dict]:
    """The flat layer list of any Model, readable by `model_from_layers`."""
    items = []
    for layer in model.layers:
        if isinstance(layer, Conv2d):
            item = {
                "kind": "conv",
                "out": layer.out_channels,
                "kernel": layer.kernel,
                "stride": layer.stride,
                "padding": layer.padding,
            }
            item.update({k: getattr(layer, k) for k in ("groups", "dilation") if getattr(layer, k) != 1})
        elif isinstance(layer, Nonlinearity):
            if layer.function == "clip" and tuple(layer.params) == (0.0, 6.0):
                item = {"kind": "relu6"}
            else:
                function_keys = {"clip": ("low", "high"), "hardsigmoid": ("alpha", "beta")}.get(layer.function, ())
                item = {"kind": layer.function, **dict(zip(function_keys, layer.params))}
        elif isinstance(layer, (Mul, Concat)):
            item = {"kind": "mul" if isinstance(layer, Mul) else "concat", "inputs": list(layer.inputs)}
        elif isinstance(layer, SliceChannels):
            item = {"kind": "slice", "start": layer.start, "stop": layer.stop}
        elif isinstance(layer, ChannelShuffle):
            item = {"kind": "shuffle", "groups": layer.groups}
        elif isinstance(layer, Linear):
            item = {"kind": "linear", "out": layer.out_features}
        elif isinstance(layer, MaxPool2d):
            item = {"kind": "maxpool", "kernel": layer.kernel, "stride": layer.stride}
            item.update({k: getattr(layer, k) for k in ("padding", "ceil_mode") if getattr(layer, k)})
        elif isinstance(layer, GlobalAvgPool):
            item = {"kind": "globalavgpool", **({"keep_dims": True} if layer.keep_dims else {})}
        elif isinstance(layer, AvgPool2d):
            item = {
                "kind": "avgpool",
                "kernel": layer.kernel,
                "stride": layer.stride,
                "padding": layer.padding,
                "count_include_pad": layer.count_include_pad,
            }
        elif isinstance(layer, Dropout):
            item = {"kind": "dropout", "p": layer.p}
        elif isinstance(layer, Add):
            item = {"kind": "add", "skip_from": layer.skip_from}
        else:
            item = {"kind": {ReLU: "relu", Flatten: "flatten", BatchNorm2d: "batchnorm"}[type(layer)]}
            if isinstance(layer, BatchNorm2d):  # written only where not PyTorch's defaults
                item.update(
                    {
                        k: v
                        for k, v in (("eps", layer.eps), ("momentum", layer.momentum))
                        if v != {"eps": 1e-5, "momentum": 0.1}[k]
                    }
                )
        if getattr(layer, "source", None) is not None:
            item["source"] = layer.source
        if getattr(layer, "bias", False):  # written only when set: bias-free descriptions stay as they were
            item["bias"] = True
        items.append({**item, "name": layer.name})
    return items


def describe(model: Model) -> dict:
    """name, input_shape, num_classes and layers: what a checkpoint keeps to rebuild the model."""
    return {
        "name": model.name,
        "input_shape": list(model.input_shape),
        "num_classes": model.num_classes,
        "layers": layers_of(model),
    }


def from_description(spec: dict, source="checkpoint") -> Model:
    return model_from_layers(
        spec["name"], spec["input_shape"], spec["layers"], spec["num_classes"], source, "model.layers"
    )
