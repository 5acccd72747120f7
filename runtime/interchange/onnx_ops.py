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
from ..nn import INPUT, Add, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU

SUPPORTED = ("Conv, Gemm, MatMul(+Add), Relu, MaxPool, AveragePool, GlobalAveragePool, Flatten, "
             "Reshape (flatten only; its shape from Shape/Gather/Unsqueeze/Concat), BatchNormalization, Add, "
             "Dropout, Identity, Constant")


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
                               "dilations": lambda d: all(v == 1 for v in d), "group": lambda g: g == 1})
    x = _act(state, node)
    c, h, w = _image(state, node, x)
    weight = _const(state, node, 1, "the weight")
    if weight.ndim != 4 or weight.shape[1] != c or weight.shape[2] != weight.shape[3]:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {weight.shape}; expected (out, {c}, k, k) "
                               f"for an input of {c} channels")
    kernel = weight.shape[2]
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != [kernel, kernel]:
        raise state.fail(node, f"kernel_shape={list(attrs['kernel_shape'])} does not match weight shape {weight.shape}")
    stride = _square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = _pads(state, node, attrs)
    name = _layer_name(state, node, node.input[1])
    source = None if x.layer == state.last else x.layer
    layer = Conv2d(name, c, int(weight.shape[0]), int(kernel), stride, pad, source=source)
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
    for layer_name, (_label, bias) in state.pending_bias.items():
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
    if _pads(state, node, attrs):
        raise state.fail(node, f"pads={list(attrs['pads'])} is not supported: max-pool without padding only")
    layer = MaxPool2d(_layer_name(state, node, None), kernel, stride)
    oh, ow, _ = layer.out_shape((h, w, c))
    if attrs.get("ceil_mode", 0) and ((h - kernel) % stride or (w - kernel) % stride):
        raise state.fail(node, f"ceil_mode=1 on a {h}x{w} input with kernel {kernel}, stride {stride} adds a "
                               f"partial window; dsptrain's max-pool has none")
    _emit(state, node, layer, (c, oh, ow), (oh, ow, c))


def _global_pool(state, node, x):
    _reads_previous(state, node, x)
    c, _, _ = _image(state, node, x)
    _emit(state, node, GlobalAvgPool(_layer_name(state, node, None)), (c, 1, 1), (c,))


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
    x = _act(state, node)
    shape = list(_shape_input(state, node, 1).dims)    # None: the batch dimension
    features = int(np.prod(x.onnx_shape))
    if len(shape) != 2 or shape[1] not in (-1, features) or (shape[0] == -1 and shape[1] == -1):
        raise state.fail(node, f"Reshape to {shape} is not supported: only a flatten to (N, {features}) or (N, -1)")
    _flatten_to_vector(state, node, x)


def _batch_norm(state, node, attrs):
    _only(state, node, attrs, {"epsilon": None, "momentum": None, "training_mode": lambda t: t == 0,
                               "spatial": lambda s: s == 1, "is_test": None, "consumed_inputs": None})
    if len([o for o in node.output if o]) > 1:
        raise state.fail(node, "training-mode outputs (running mean and variance) are not supported")
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
    if len(node.input) > 2 and node.input[2]:
        mode = state.values.get(node.input[2])
        if not isinstance(mode, np.ndarray) or bool(mode):
            raise state.fail(node, "training_mode must be a constant false")
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
    "Shape": _shape, "Gather": _gather, "Unsqueeze": _unsqueeze, "Concat": _concat,
    "Conv": _conv, "Gemm": _gemm, "MatMul": _matmul, "Add": _add, "Relu": _relu,
    "MaxPool": _maxpool, "AveragePool": _average_pool, "GlobalAveragePool": _global_average_pool,
    "Flatten": _flatten, "Reshape": _reshape, "BatchNormalization": _batch_norm,
    "Dropout": _dropout, "Identity": _identity, "Constant": _constant,
}
