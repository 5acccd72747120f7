"""The ONNX operators dsptrain imports, one handler each: a node becomes an engine layer,
an alias of its input, a fold into the layer before it, or a ModelFileError naming the
node, its op type and what is supported. onnx_import.py walks the graph and calls these.

Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..algorithms._float_layers import BN_EPS as BN_EPS_DEFAULT
from ..errors import UserError
from ..nn import (INPUT, Add, AvgPool2d, BatchNorm2d, ChannelShuffle, Concat, Conv2d, Dropout, Flatten, GlobalAvgPool,
                  Linear, MaxPool2d, Mul, Nonlinearity, ReLU, SliceChannels)

SUPPORTED = ("Conv (group, dilations), Gemm, MatMul(+Add), Relu, Clip, HardSwish, HardSigmoid, Sigmoid, Tanh, "
             "Mul (x * Sigmoid(x), channel scales), MaxPool (pads, ceil_mode), AveragePool, GlobalAveragePool, "
             "ReduceMean over H and W, Flatten, Reshape (flatten; the Reshape-Transpose-Reshape channel shuffle; "
             "shapes from Shape/Gather/Unsqueeze/Concat), BatchNormalization, Add, Concat, Split and Slice on "
             "channels, Dropout, Identity, Constant")


class ModelFileError(UserError):
    """An ONNX file dsptrain cannot import; the message names the file, node and op."""


@dataclass
class Activation:
    """An activation: the engine layer producing it and its ONNX shape (C, H, W) or (F,)."""

    layer: str                   # engine layer name, or INPUT
    onnx_shape: tuple            # per sample, ONNX layout
    engine_shape: tuple          # per sample, engine layout
    flat_from: tuple | None = None   # (C, H, W) when the vector is a Flatten of that image


@dataclass
class ImportState:
    path: str
    bias: str
    layers: list = field(default_factory=list)
    weights: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    values: dict = field(default_factory=dict)       # ONNX tensor name -> Activation or np.ndarray
    pending_bias: dict = field(default_factory=dict)  # layer name -> (node label, bias vector)
    names: set = field(default_factory=set)
    consumers: dict = field(default_factory=dict)     # ONNX tensor name -> op types of the nodes reading it

    @property
    def last(self) -> str:
        return self.layers[-1].name if self.layers else INPUT

    def fail(self, node, message) -> ModelFileError:
        return ModelFileError(f"{self.path}: node {_label(node)}: {message}")


def _label(node) -> str:
    return f"{node.name or '(unnamed)'!r} ({node.op_type})"



def onnx_module():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
    except ImportError as exc:   # a dependency in pyproject.toml; only a broken install lacks it
        raise UserError(f"ONNX import needs the onnx package ({exc}); pip install onnx") from None
    return onnx


def attrs_of(node) -> dict:
    helper = onnx_module().helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# ---------------------------------------------------------------- helpers for handlers

def _layer_name(state, node, hint: str | None) -> str:
    """A readable, unique layer name: the weight's name without '.weight' (PyTorch's module
    path), else the node's name without its op type ('/features/3/Relu' -> 'features.3'),
    else the op type and a number."""
    if hint and hint.endswith(".weight"):
        base = hint[:-len(".weight")]
    else:
        parts = [p for p in (node.name or "").split("/") if p]
        if len(parts) > 1 and parts[-1].split("_")[0] == node.op_type:
            parts = parts[:-1]
        base = ".".join(parts)
    base = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in base) or node.op_type.lower()
    name, n = base, 1
    while name in state.names or name == INPUT:
        n += 1
        name = f"{base}_{n}"
    state.names.add(name)
    return name


def _act(state, node, index=0) -> Activation:
    value = state.values.get(node.input[index]) if index < len(node.input) else None
    if not isinstance(value, Activation):
        raise state.fail(node, f"input {index} ({node.input[index] if index < len(node.input) else 'missing'!r}) "
                               f"must be an activation, got a constant or nothing")
    return value


def _const(state, node, index, what) -> np.ndarray:
    value = state.values.get(node.input[index]) if index < len(node.input) and node.input[index] else None
    if not isinstance(value, np.ndarray):
        raise state.fail(node, f"{what} (input {index}) must be an initializer or Constant")
    return value


def _only(state, node, attrs, allowed: dict):
    """Refuse attributes this importer does not read, or values other than the allowed ones."""
    for key, value in attrs.items():
        if key not in allowed:
            raise state.fail(node, f"attribute {key}={value!r} is not supported")
        ok = allowed[key]
        if ok is not None and not ok(value):
            raise state.fail(node, f"attribute {key}={value!r} is not supported")


def _emit(state, node, layer, shape_onnx, shape_engine, flat_from=None):
    """Append `layer`, reading the previous layer's output (checked), and bind the node's output."""
    state.layers.append(layer)
    state.values[node.output[0]] = Activation(layer.name, shape_onnx, shape_engine, flat_from)


def _reads_previous(state, node, x: Activation):
    if x.layer != state.last:
        raise state.fail(node, f"reads {x.layer!r}, not the layer just before it ({state.last!r}); dsptrain "
                               f"layers other than Conv and Add read the previous layer")


def _image(state, node, x: Activation):
    if len(x.onnx_shape) != 3:
        raise state.fail(node, f"expects an image (C, H, W), got shape {x.onnx_shape}")
    return x.onnx_shape


def _square(state, node, key, values, allow_one=True):
    values = list(values)
    if len(values) != 2 or values[0] != values[1]:
        raise state.fail(node, f"{key}={values} is not supported: only square 2-D {key}")
    return int(values[0])


def _pads(state, node, attrs) -> int:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
        raise state.fail(node, f"auto_pad={attrs['auto_pad']!r} is not supported (give explicit pads)")
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4 or len(set(pads)) != 1:
        raise state.fail(node, f"pads={pads} is not supported: only equal padding on every side")
    return int(pads[0])


# ---------------------------------------------------------------- op handlers

def _conv(state, node, attrs):
    _only(state, node, attrs, {"kernel_shape": None, "strides": None, "pads": None, "auto_pad": None,
                               "dilations": None, "group": lambda g: g >= 1})
    x = _act(state, node)
    c, h, w = _image(state, node, x)
    weight = _const(state, node, 1, "the weight")
    groups = int(attrs.get("group", 1))
    if c % groups or weight.ndim != 4 or weight.shape[1] * groups != c or weight.shape[2] != weight.shape[3] \
            or weight.shape[0] % groups:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {weight.shape}; expected (out, {c} / group "
                               f"{groups}, k, k) for an input of {c} channels")
    dilation = _square(state, node, "dilations", attrs.get("dilations", [1, 1]))
    kernel = weight.shape[2]
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != [kernel, kernel]:
        raise state.fail(node, f"kernel_shape={list(attrs['kernel_shape'])} does not match weight shape {weight.shape}")
    stride = _square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = _pads(state, node, attrs)
    name = _layer_name(state, node, node.input[1])
    source = None if x.layer == state.last else x.layer
    layer = Conv2d(name, c, int(weight.shape[0]), int(kernel), stride, pad, source=source, groups=groups,
                   dilation=dilation)
    oh, ow, oc = layer.out_shape((h, w, c))
    state.weights[f"{name}.w"] = np.ascontiguousarray(weight.transpose(0, 2, 3, 1), np.float32)   # OIHW -> OHWI
    _emit(state, node, layer, (oc, oh, ow), (oh, ow, oc))
    if len(node.input) > 2 and node.input[2]:
        _bias(state, node, name, _const(state, node, 2, "the bias"), oc)


def _linear(state, node, name_hint, x: Activation, weight_out_in: np.ndarray):
    if len(x.engine_shape) != 1:
        raise state.fail(node, f"expects a vector per sample (Flatten first), got shape {x.onnx_shape}")
    _reads_previous(state, node, x)
    features = x.engine_shape[0]
    out, inp = weight_out_in.shape
    if inp != features:
        raise state.fail(node, f"weight {name_hint!r} has {inp} input features, the input has {features}")
    if x.flat_from is not None:   # columns in ONNX (C, H, W) order -> the engine's (H, W, C)
        c, h, w = x.flat_from
        weight_out_in = weight_out_in.reshape(out, c, h, w).transpose(0, 2, 3, 1).reshape(out, inp)
    name = _layer_name(state, node, name_hint)
    state.weights[f"{name}.w"] = np.ascontiguousarray(weight_out_in, np.float32)
    _emit(state, node, Linear(name, features, out), (out,), (out,))
    return name


def _gemm(state, node, attrs):
    _only(state, node, attrs, {"alpha": lambda a: a == 1.0, "beta": lambda b: b == 1.0,
                               "transA": lambda t: t == 0, "transB": None})
    x = _act(state, node)
    b = _const(state, node, 1, "the weight B")
    if b.ndim != 2:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {b.shape}; expected 2-D")
    weight = b if attrs.get("transB", 0) else b.T
    name = _linear(state, node, node.input[1], x, weight)
    if len(node.input) > 2 and node.input[2]:
        _bias(state, node, name, _const(state, node, 2, "the bias C"), weight.shape[0])


def _matmul(state, node, attrs):
    _only(state, node, attrs, {})
    b = _const(state, node, 1, "the weight (second input)")
    if b.ndim != 2:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {b.shape}; expected 2-D (in, out)")
    _linear(state, node, node.input[1], _act(state, node), b.T)


def _add(state, node, attrs):
    _only(state, node, attrs, {})
    if isinstance(state.values.get(node.input[0]), _ShapeValue):
        return _shape_arith(state, node, attrs)
    a, b = (state.values.get(name) for name in node.input[:2])
    if isinstance(a, Activation) and isinstance(b, Activation):   # a residual join
        if a.onnx_shape != b.onnx_shape:
            raise state.fail(node, f"adds shapes {a.onnx_shape} and {b.onnx_shape}")
        if state.last not in (a.layer, b.layer):
            raise state.fail(node, f"adds {a.layer!r} and {b.layer!r}, neither of which is the layer just "
                                   f"before it ({state.last!r}); reorder the graph so one branch ends last")
        skip = b.layer if a.layer == state.last else a.layer
        _emit(state, node, Add(_layer_name(state, node, None), skip_from=skip), a.onnx_shape, a.engine_shape)
        return
    x, bias = (a, b) if isinstance(a, Activation) else (b, a)
    if not isinstance(x, Activation) or not isinstance(bias, np.ndarray):
        raise state.fail(node, "Add needs two activations (a residual join) or an activation and a constant bias")
    if x.layer == INPUT or x.layer != state.last or not isinstance(state.layers[-1], (Linear, Conv2d)):
        raise state.fail(node, "a constant Add is supported only as the bias right after MatMul/Gemm/Conv")
    layer = state.layers[-1]
    channels = layer.out_features if isinstance(layer, Linear) else layer.out_channels
    vector = bias.reshape(-1) if bias.size == channels else None
    if vector is None:
        raise state.fail(node, f"bias {node.input[1]!r} has shape {bias.shape}; expected {channels} values")
    _bias(state, node, layer.name, vector, channels)
    state.values[node.output[0]] = x


def _bias(state, node, layer_name, bias, channels):
    bias = np.asarray(bias, np.float64).reshape(-1)
    if bias.shape != (channels,):
        raise state.fail(node, f"bias has shape {bias.shape}; expected ({channels},)")
    previous = state.pending_bias.get(layer_name)
    total = bias + (previous[1] if previous else 0.0)
    state.pending_bias[layer_name] = (_label(node), total)


def settle_biases(state):
    """Biases no batch norm took: a zero one is dropped (it changes nothing); any other
    becomes the layer's own bias (`bias=True`, weight "<layer>.b"), which the float and
    emulated recipes train and NITI refuses by name, or under bias='drop' is dropped.
    Each case leaves a note naming the layer."""
    for layer_name, (label, bias) in state.pending_bias.items():
        top = float(np.max(np.abs(bias)))
        if top == 0.0:
            state.notes.append(f"{layer_name}: zero bias dropped (it changes nothing)")
        elif state.bias == "drop":
            state.notes.append(f"{layer_name}: bias dropped as asked (max |b| = {top:.3g}); the function changes")
        else:
            index = next(i for i, layer in enumerate(state.layers) if layer.name == layer_name)
            state.layers[index] = replace(state.layers[index], bias=True)
            state.weights[f"{layer_name}.b"] = bias.astype(np.float32)
            state.notes.append(f"{layer_name}: bias kept (max |b| = {top:.3g}); recipes with float biases train it, "
                               f"NITI has none (model.bias: drop drops it)")
    state.pending_bias.clear()


def _relu(state, node, attrs):
    _only(state, node, attrs, {})
    x = _act(state, node)
    _reads_previous(state, node, x)
    _emit(state, node, ReLU(_layer_name(state, node, None)), x.onnx_shape, x.engine_shape, x.flat_from)


def _nonlinearity(state, node, function, params=()):
    x = _act(state, node)
    source = None if x.layer == state.last else x.layer
    layer = Nonlinearity(_layer_name(state, node, None), function, tuple(float(p) for p in params), source=source)
    _emit(state, node, layer, x.onnx_shape, x.engine_shape, x.flat_from)


def _clip(state, node, attrs):
    """Clip(min, max): bounds as attributes before opset 11, as constant inputs since; Clip(0, 6) is ReLU6,
    Clip(0, inf) a ReLU."""
    _only(state, node, attrs, {"min": None, "max": None})
    low, high = attrs.get("min", -np.inf), attrs.get("max", np.inf)
    if len(node.input) > 1 and node.input[1]:
        low = float(_const(state, node, 1, "min"))
    if len(node.input) > 2 and node.input[2]:
        high = float(_const(state, node, 2, "max"))
    if not low < high:
        raise state.fail(node, f"min {low} is not below max {high}")
    if low == 0 and high == np.inf and _act(state, node).layer == state.last:
        return _relu(state, node, {})
    _nonlinearity(state, node, "clip", (low, high))


def _hard_sigmoid(state, node, attrs):
    _only(state, node, attrs, {"alpha": None, "beta": None})
    _nonlinearity(state, node, "hardsigmoid", (attrs.get("alpha", 0.2), attrs.get("beta", 0.5)))


def _simple(function):
    def handler(state, node, attrs):
        _only(state, node, attrs, {})
        _nonlinearity(state, node, function)
    return handler


def _mul(state, node, attrs):
    """x * f(x) just computed (Sigmoid: SiLU; HardSigmoid(1/6, 1/2): HardSwish) becomes one layer;
    any other product of two activations a Mul (equal shapes, or a (C, 1, 1) channel scale)."""
    _only(state, node, attrs, {})
    if isinstance(state.values.get(node.input[0]), _ShapeValue):
        return _shape_arith(state, node, attrs)
    a, b = _act(state, node, 0), _act(state, node, 1)
    last = state.layers[-1] if state.layers else None
    for x, f in ((a, b), (b, a)):
        if isinstance(last, Nonlinearity) and f.layer == last.name and _input_of_last(state) == x.layer:
            fused = {"sigmoid": "silu"}.get(last.function)
            if last.function == "hardsigmoid" and np.allclose(last.params, (1 / 6, 0.5)):
                fused = "hardswish"
            if fused:
                state.layers[-1] = Nonlinearity(last.name, fused, (), last.source)
                state.values[node.output[0]] = f
                return
    big, small = (b, a) if np.prod(a.onnx_shape) < np.prod(b.onnx_shape) else (a, b)
    if big.onnx_shape != small.onnx_shape and small.onnx_shape != (big.onnx_shape[0], 1, 1):
        raise state.fail(node, f"multiplies shapes {a.onnx_shape} and {b.onnx_shape}; supported: equal shapes, "
                               f"or an image by a (C, 1, 1) channel scale")
    _emit(state, node, Mul(_layer_name(state, node, None), (big.layer, small.layer)), big.onnx_shape,
          big.engine_shape)


def _input_of_last(state) -> str:
    """The name of the layer (or INPUT) the last single-input layer reads."""
    last = state.layers[-1]
    return last.source or (state.layers[-2].name if len(state.layers) > 1 else INPUT)


def _concat_node(state, node, attrs):
    """Concat of activations on channels (Fire modules, ShuffleNet), or of shapes (a Reshape's)."""
    values = [state.values.get(name) for name in node.input]
    if not any(isinstance(v, Activation) for v in values):
        return _concat(state, node, attrs)
    _only(state, node, attrs, {"axis": None})
    parts = [_act(state, node, i) for i in range(len(node.input))]
    if any(len(p.onnx_shape) != 3 for p in parts) or attrs.get("axis") not in (1, -3):
        raise state.fail(node, f"axis={attrs.get('axis')} is not supported: only images joined on channels (axis 1)")
    layer = Concat(_layer_name(state, node, None), tuple(p.layer for p in parts))
    h, w, c = layer.out_shape_of([p.engine_shape for p in parts])
    _emit(state, node, layer, (c, h, w), (h, w, c))


def _slice_layer(state, node, output, x, start, stop, index):
    c, h, w = x.onnx_shape
    source = None if x.layer == state.last else x.layer
    name = _layer_name(state, node, None) + (f".{index}" if index is not None else "")
    state.layers.append(SliceChannels(name, int(start), int(stop), source))
    state.values[output] = Activation(name, (stop - start, h, w), (h, w, stop - start))


def _split(state, node, attrs):
    """Split on channels (x.chunk / torch.split): each output one SliceChannels layer."""
    _only(state, node, attrs, {"axis": lambda a: a in (1, -3), "split": None, "num_outputs": None})
    x = _act(state, node)
    c, _, _ = _image(state, node, x)
    sizes = list(attrs.get("split", [])) or (list(_shape_input(state, node, 1).dims)
                                             if len(node.input) > 1 and node.input[1] else [])
    count = len(node.output)
    if not sizes:
        step = -(-c // count)
        sizes = [min(step, c - i * step) for i in range(count)]
    if sum(sizes) != c or len(sizes) != count or min(sizes) < 1:
        raise state.fail(node, f"split sizes {sizes} do not cut {c} channels into {count} outputs")
    start = 0
    for index, (output, size) in enumerate(zip(node.output, sizes)):
        _slice_layer(state, node, output, x, start, start + size, index)
        start += size


def _slice(state, node, attrs):
    """Slice of channels (axis 1, step 1): starts/ends as attributes before opset 10, inputs since."""
    _only(state, node, attrs, {"starts": None, "ends": None, "axes": None})
    x = _act(state, node)
    c, _, _ = _image(state, node, x)
    def part(key, index, default=None):
        if key in attrs:
            return [int(v) for v in attrs[key]]
        if len(node.input) > index and node.input[index]:   # a constant, or a size computed from a Shape
            return list(_shape_input(state, node, index).dims)
        return default
    starts, ends, axes = part("starts", 1), part("ends", 2), part("axes", 3, [0])
    steps = part("steps", 4, [1])
    if len(starts) != 1 or axes[0] % 4 != 1 or steps != [1]:
        raise state.fail(node, f"Slice starts={starts} ends={ends} axes={axes} steps={steps} is not supported: "
                               f"only a range of channels (one axis, 1, step 1)")
    start, stop = (min(max(v + c if v < 0 else v, 0), c) for v in (starts[0], ends[0]))
    if stop <= start:
        raise state.fail(node, f"channels [{starts[0]}, {ends[0]}) of {c} are empty")
    _slice_layer(state, node, node.output[0], x, start, stop, None)


@dataclass(frozen=True)
class _ShuffleView:
    """A channel shuffle under way: the image seen as (groups, C / groups, H, W), maybe transposed."""

    x: Activation
    groups: int
    transposed: bool = False


def _transpose(state, node, attrs):
    view = state.values.get(node.input[0])
    if not isinstance(view, _ShuffleView) or view.transposed or list(attrs.get("perm", [])) != [0, 2, 1, 3, 4]:
        raise state.fail(node, f"Transpose perm={list(attrs.get('perm', []))} is supported only inside a channel "
                               f"shuffle (Reshape to (N, g, C/g, H, W), Transpose [0, 2, 1, 3, 4], Reshape back)")
    state.values[node.output[0]] = _ShuffleView(view.x, view.groups, True)


def _maxpool(state, node, attrs):
    _only(state, node, attrs, {"kernel_shape": None, "strides": None, "pads": None, "auto_pad": None,
                               "dilations": lambda d: all(v == 1 for v in d), "ceil_mode": None,
                               "storage_order": lambda s: s == 0})
    if len(node.output) > 1 and node.output[1]:
        raise state.fail(node, "the Indices output is not supported")
    x = _act(state, node)
    _reads_previous(state, node, x)
    c, h, w = _image(state, node, x)
    kernel = _square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = _square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = _pads(state, node, attrs)
    if 2 * pad > kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are more than half of kernel_shape={[kernel, kernel]}")
    ceil = bool(attrs.get("ceil_mode", 0)) and any(   # a ceil_mode adding no window is the plain pool
        MaxPool2d("p", kernel, stride, pad, True).out_shape((n, n, 1))[0] !=
        MaxPool2d("p", kernel, stride, pad, False).out_shape((n, n, 1))[0] for n in (h, w))
    layer = MaxPool2d(_layer_name(state, node, None), kernel, stride, pad, ceil)
    oh, ow, _ = layer.out_shape((h, w, c))
    _emit(state, node, layer, (c, oh, ow), (oh, ow, c))


_TO_VECTOR = {"Flatten", "Reshape", "Squeeze"}


def _global_pool(state, node, x, keep_dims=True):
    """A mean over H and W; read as a vector when every reader flattens it (a classifier's
    head), else kept as a 1x1 image (a squeeze-excitation's, read by 1x1 convs)."""
    _reads_previous(state, node, x)
    c, _, _ = _image(state, node, x)
    readers = state.consumers.get(node.output[0], [])
    as_image = keep_dims and any(r not in _TO_VECTOR for r in readers)
    layer = GlobalAvgPool(_layer_name(state, node, None), keep_dims=as_image)
    _emit(state, node, layer, (c, 1, 1) if keep_dims else (c,), (1, 1, c) if as_image else (c,))


def _reduce_mean(state, node, attrs):
    """ReduceMean over H and W (axes [2, 3] or [-2, -1]; an attribute before opset 18, an input since)."""
    _only(state, node, attrs, {"axes": None, "keepdims": lambda k: k in (0, 1),
                               "noop_with_empty_axes": lambda v: v == 0})
    x = _act(state, node)
    axes = list(attrs.get("axes", [])) or ([int(v) for v in _const(state, node, 1, "the axes")]
                                           if len(node.input) > 1 and node.input[1] else [])
    if sorted(a % 4 for a in axes) != [2, 3]:
        raise state.fail(node, f"axes={axes} is not supported: only the mean over H and W (axes [2, 3])")
    _global_pool(state, node, x, keep_dims=bool(attrs.get("keepdims", 1)))


def _global_average_pool(state, node, attrs):
    _only(state, node, attrs, {})
    _global_pool(state, node, _act(state, node))


def _average_pool(state, node, attrs):
    """A window over the whole input without padding is a global average (which NITI also
    lowers); any other square window, stride and equal padding an AvgPool2d (float recipes)."""
    _only(state, node, attrs, {"kernel_shape": None, "strides": None, "pads": None, "auto_pad": None,
                               "ceil_mode": None, "count_include_pad": lambda v: v in (0, 1),
                               "dilations": lambda d: all(v == 1 for v in d)})
    x = _act(state, node)
    c, h, w = _image(state, node, x)
    pad = _pads(state, node, attrs)
    if list(attrs["kernel_shape"]) == [h, w] and not pad:
        return _global_pool(state, node, x)
    _reads_previous(state, node, x)
    kernel = _square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = _square(state, node, "strides", attrs.get("strides", [1, 1]))
    if pad >= kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are not smaller than kernel_shape={[kernel, kernel]}")
    if attrs.get("ceil_mode", 0) and ((h + 2 * pad - kernel) % stride or (w + 2 * pad - kernel) % stride):
        raise state.fail(node, f"ceil_mode=1 on a {h}x{w} input with kernel {kernel}, stride {stride}, pads {pad} "
                               f"adds a partial window; dsptrain's average pool has none")
    layer = AvgPool2d(_layer_name(state, node, None), kernel, stride, pad, bool(attrs.get("count_include_pad", 0)))
    oh, ow, _ = layer.out_shape((h, w, c))
    _emit(state, node, layer, (c, oh, ow), (oh, ow, c))


def _flatten_to_vector(state, node, x: Activation):
    if len(x.engine_shape) == 1:      # already a vector (after a global pool): nothing to do
        state.values[node.output[0]] = Activation(x.layer, (int(np.prod(x.onnx_shape)),), x.engine_shape, x.flat_from)
        return
    _reads_previous(state, node, x)
    c, h, w = x.onnx_shape
    _emit(state, node, Flatten(_layer_name(state, node, None)), (c * h * w,), (c * h * w,), flat_from=(c, h, w))


def _flatten(state, node, attrs):
    _only(state, node, attrs, {"axis": lambda a: a == 1})
    _flatten_to_vector(state, node, _act(state, node))


def _reshape(state, node, attrs):
    _only(state, node, attrs, {"allowzero": lambda a: a == 0})
    view = state.values.get(node.input[0])
    shape = list(_shape_input(state, node, 1).dims)    # None: the batch dimension
    if isinstance(view, _ShuffleView):
        c, h, w = view.x.onnx_shape
        if not view.transposed or shape[1:] not in ([c, h, w], [-1, h, w]):
            raise state.fail(node, f"Reshape to {shape} does not end a channel shuffle of {view.x.onnx_shape}")
        _reads_previous(state, node, view.x)
        _emit(state, node, ChannelShuffle(_layer_name(state, node, None), view.groups), view.x.onnx_shape,
              view.x.engine_shape)
        return
    x = _act(state, node)
    if len(shape) == 5 and len(x.onnx_shape) == 3:   # (N, g, C/g, H, W): a channel shuffle begins
        c, h, w = x.onnx_shape
        groups = shape[1] if shape[1] != -1 else c // shape[2]
        if groups < 1 or c % groups or shape[2] not in (c // groups, -1) or shape[3:] != [h, w]:
            raise state.fail(node, f"Reshape of {x.onnx_shape} to {shape} is not a channel shuffle's (N, g, C/g, H, W)")
        state.values[node.output[0]] = _ShuffleView(x, groups)
        return
    features = int(np.prod(x.onnx_shape))
    if len(shape) != 2 or shape[1] not in (-1, features) or (shape[0] == -1 and shape[1] == -1):
        raise state.fail(node, f"Reshape to {shape} is not supported: only a flatten to (N, {features}) or (N, -1)")
    _flatten_to_vector(state, node, x)


def _batch_norm(state, node, attrs):
    # A train-mode export (training_mode=1, or the running statistics as extra outputs before
    # opset 14) describes the same layer: dsptrain's batch norm trains on batch statistics and
    # keeps its running ones itself, so the extra outputs are left unread.
    _only(state, node, attrs, {"epsilon": None, "momentum": None, "training_mode": lambda t: t in (0, 1),
                               "spatial": lambda s: s == 1, "is_test": None, "consumed_inputs": None})
    x = _act(state, node)
    _reads_previous(state, node, x)
    c, h, w = _image(state, node, x)
    params = {}
    for index, key in enumerate(("gamma", "beta", "mean", "var"), start=1):
        value = _const(state, node, index, key)
        if value.shape != (c,):
            raise state.fail(node, f"{key} {node.input[index]!r} has shape {value.shape}; expected ({c},)")
        params[key] = np.asarray(value, np.float64)
    # The engine's epsilon is fixed (BN_EPS_DEFAULT); another epsilon is the same function
    # with the variance shifted by the difference.
    params["var"] = params["var"] + float(attrs.get("epsilon", 1e-5)) - BN_EPS_DEFAULT
    if np.any(params["var"] <= -BN_EPS_DEFAULT):
        raise state.fail(node, "running variance below zero")
    previous = state.layers[-1] if state.layers else None
    if previous is not None and previous.name in state.pending_bias:   # conv bias -> BN mean, exactly
        label, bias = state.pending_bias.pop(previous.name)
        params["mean"] = params["mean"] - bias
        if np.any(bias):
            state.notes.append(f"{previous.name}: bias folded into batch norm (running mean shifted)")
    name = _layer_name(state, node, node.input[1])
    for key, value in params.items():
        state.weights[f"{name}.{key}"] = value.astype(np.float32)
    _emit(state, node, BatchNorm2d(name, c), x.onnx_shape, x.engine_shape)


def _dropout(state, node, attrs):
    _only(state, node, attrs, {"ratio": None, "seed": None, "is_test": None})
    if len(node.input) > 2 and node.input[2] and not isinstance(state.values.get(node.input[2]), np.ndarray):
        raise state.fail(node, "training_mode must be a constant")   # true (a train-mode export) or false: one layer
    x = _act(state, node)
    _reads_previous(state, node, x)
    ratio = attrs.get("ratio", 0.5)
    if len(node.input) > 1 and node.input[1]:
        ratio = float(_const(state, node, 1, "the ratio"))
    if not 0 <= ratio < 1:
        raise state.fail(node, f"ratio {ratio} is outside [0, 1)")
    _emit(state, node, Dropout(_layer_name(state, node, None), float(ratio)), x.onnx_shape, x.engine_shape,
          x.flat_from)


def _identity(state, node, attrs):
    _only(state, node, attrs, {})
    value = state.values.get(node.input[0])
    if value is None:
        raise state.fail(node, f"reads {node.input[0]!r}, which no earlier node produces")
    state.values[node.output[0]] = value


def _constant(state, node, attrs):
    numpy_helper = onnx_module().numpy_helper
    if "value" in attrs:
        state.values[node.output[0]] = numpy_helper.to_array(attrs["value"])
        return
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            state.values[node.output[0]] = np.asarray(attrs[key], dtype)
            return
    raise state.fail(node, f"Constant with {', '.join(attrs) or 'no value'} is not supported "
                           f"(value, value_float(s), value_int(s))")


@dataclass(frozen=True)
class _ShapeValue:
    """A shape computed in the graph (Shape -> Gather -> Unsqueeze -> Concat, as PyTorch
    writes `x.view(x.size(0), -1)`): ints, None for the batch dimension."""

    dims: tuple
    scalar: bool = False


def _shape_input(state, node, index):
    value = state.values.get(node.input[index])
    if isinstance(value, _ShapeValue):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1:
        return _ShapeValue(tuple(int(v) for v in value.reshape(-1)), value.ndim == 0)
    raise state.fail(node, f"input {index} must be a shape (from Shape) or an integer constant")


def _shape_arith(state, node, attrs):
    """Div, Mul, Add or Sub of a picked dimension and an integer constant (`num_channels // groups`,
    the exporter's chunk sizes)."""
    _only(state, node, attrs, {})
    dims = _shape_input(state, node, 0)
    k = _const(state, node, 1, "the integer constant")
    if k.size != 1 or k.dtype.kind not in "iu" or None in dims.dims or (node.op_type == "Div" and not k.any()):
        raise state.fail(node, f"{node.op_type} is supported only on known dimensions of a Shape by an integer")
    k = int(k.reshape(-1)[0])
    apply = {"Div": lambda d: d // k, "Mul": lambda d: d * k, "Add": lambda d: d + k, "Sub": lambda d: d - k}
    picked = tuple(apply[node.op_type](d) for d in dims.dims)
    state.values[node.output[0]] = _ShapeValue(picked, dims.scalar)


def _cast(state, node, attrs):
    """A Cast of a computed shape (the exporter's int64 casts around `//`): the same dimensions."""
    value = state.values.get(node.input[0])
    if not isinstance(value, _ShapeValue):
        raise state.fail(node, "Cast is supported only on a shape computed from Shape")
    state.values[node.output[0]] = value


def _shape(state, node, attrs):
    _only(state, node, attrs, {})
    x = _act(state, node)
    state.values[node.output[0]] = _ShapeValue((None, *x.onnx_shape))


def _gather(state, node, attrs):
    _only(state, node, attrs, {"axis": lambda a: a == 0})
    dims = _shape_input(state, node, 0)
    index = _const(state, node, 1, "the index")
    if index.ndim > 1 or dims.scalar:
        raise state.fail(node, "Gather is supported only to pick dimensions of a Shape")
    picked = tuple(dims.dims[int(i)] for i in index.reshape(-1))
    state.values[node.output[0]] = _ShapeValue(picked, index.ndim == 0)


def _unsqueeze(state, node, attrs):
    axes = list(attrs.get("axes", [])) or ([int(v) for v in _const(state, node, 1, "the axes")]
                                           if len(node.input) > 1 else [])
    dims = _shape_input(state, node, 0)
    if axes != [0] or not dims.scalar:
        raise state.fail(node, "Unsqueeze is supported only to turn a picked dimension into a 1-D shape")
    state.values[node.output[0]] = _ShapeValue(dims.dims)


def _concat(state, node, attrs):
    _only(state, node, attrs, {"axis": lambda a: a == 0})
    parts = [_shape_input(state, node, i) for i in range(len(node.input))]
    state.values[node.output[0]] = _ShapeValue(tuple(d for p in parts for d in p.dims))


HANDLERS = {
    "Shape": _shape, "Gather": _gather, "Unsqueeze": _unsqueeze,
    "Conv": _conv, "Gemm": _gemm, "MatMul": _matmul, "Add": _add, "Relu": _relu,
    "MaxPool": _maxpool, "AveragePool": _average_pool, "GlobalAveragePool": _global_average_pool,
    "Flatten": _flatten, "Reshape": _reshape, "BatchNormalization": _batch_norm,
    "Dropout": _dropout, "Identity": _identity, "Constant": _constant,
    "Clip": _clip, "HardSigmoid": _hard_sigmoid, "HardSwish": _simple("hardswish"), "Sigmoid": _simple("sigmoid"),
    "Tanh": _simple("tanh"), "Mul": _mul, "Concat": _concat_node, "Split": _split, "Slice": _slice,
    "Transpose": _transpose, "ReduceMean": _reduce_mean, "Div": _shape_arith, "Sub": _shape_arith, "Cast": _cast,
}
