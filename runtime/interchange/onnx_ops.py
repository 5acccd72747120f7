"""The ONNX operators dsptrain imports, one handler each: a node becomes an engine layer,
an alias of its input, a fold into the layer before it, or a ModelFileError naming the
node, its op type and what is supported. onnx_import.py walks the graph and calls these.

Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..nn import (
    INPUT,
    Add,
    AvgPool2d,
    BatchNorm2d,
    ChannelShuffle,
    Conv2d,
    Dropout,
    Flatten,
    GlobalAvgPool,
    Linear,
    MaxPool2d,
)
from .onnx_branches import (
    ShuffleView,
    clip,
    concat_node,
    hard_sigmoid,
    mul,
    relu,
    simple,
    slice_channels,
    split,
    transpose,
)
from .onnx_common import (
    Activation,
    ImportState,
    ModelFileError,
    act_of,
    attrs_of,
    check_attrs,
    const_of,
    emit,
    image_of,
    label,
    layer_name,
    onnx_module,
    pads_of,
    reads_previous,
    square,
)
from .onnx_shapes import ShapeValue, cast, gather, shape_arith, shape_input, shape_node, unsqueeze

__all__ = [
    "HANDLERS",
    "SUPPORTED",
    "ModelFileError",
    "Activation",
    "ImportState",
    "onnx_module",
    "attrs_of",
    "settle_biases",
]

SUPPORTED = (
    "Conv (group, dilations), Gemm, MatMul(+Add), Relu, Clip, HardSwish, HardSigmoid, Sigmoid, Tanh, "
    "Mul (x * Sigmoid(x), channel scales), MaxPool (pads, ceil_mode), AveragePool, GlobalAveragePool, "
    "ReduceMean over H and W, Flatten, Reshape (flatten; the Reshape-Transpose-Reshape channel shuffle; "
    "shapes from Shape/Gather/Unsqueeze/Concat), BatchNormalization, Add, Concat, Split and Slice on "
    "channels, Dropout, Identity, Constant"
)


# ---------------------------------------------------------------- op handlers


def _conv(state, node, attrs):
    check_attrs(
        state,
        node,
        attrs,
        {
            "kernel_shape": None,
            "strides": None,
            "pads": None,
            "auto_pad": None,
            "dilations": None,
            "group": lambda g: g >= 1,
        },
    )
    x = act_of(state, node)
    c, h, w = image_of(state, node, x)
    weight = const_of(state, node, 1, "the weight")
    groups = int(attrs.get("group", 1))
    if (
        c % groups
        or weight.ndim != 4
        or weight.shape[1] * groups != c
        or weight.shape[2] != weight.shape[3]
        or weight.shape[0] % groups
    ):
        raise state.fail(
            node,
            f"weight {node.input[1]!r} has shape {weight.shape}; expected (out, {c} / group "
            f"{groups}, k, k) for an input of {c} channels",
        )
    dilation = square(state, node, "dilations", attrs.get("dilations", [1, 1]))
    kernel = weight.shape[2]
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != [kernel, kernel]:
        raise state.fail(node, f"kernel_shape={list(attrs['kernel_shape'])} does not match weight shape {weight.shape}")
    stride = square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = pads_of(state, node, attrs)
    name = layer_name(state, node, node.input[1])
    source = None if x.layer == state.last else x.layer
    layer = Conv2d(
        name, c, int(weight.shape[0]), int(kernel), stride, pad, source=source, groups=groups, dilation=dilation
    )
    oh, ow, oc = layer.out_shape((h, w, c))
    state.weights[f"{name}.w"] = np.ascontiguousarray(weight.transpose(0, 2, 3, 1), np.float32)  # OIHW -> OHWI
    emit(state, node, layer, (oc, oh, ow), (oh, ow, oc))
    if len(node.input) > 2 and node.input[2]:
        _bias(state, node, name, const_of(state, node, 2, "the bias"), oc)


def _linear(state, node, name_hint, x: Activation, weight_out_in: np.ndarray):
    if len(x.engine_shape) != 1:
        raise state.fail(node, f"expects a vector per sample (Flatten first), got shape {x.onnx_shape}")
    reads_previous(state, node, x)
    features = x.engine_shape[0]
    out, inp = weight_out_in.shape
    if inp != features:
        raise state.fail(node, f"weight {name_hint!r} has {inp} input features, the input has {features}")
    if x.flat_from is not None:  # columns in ONNX (C, H, W) order -> the engine's (H, W, C)
        c, h, w = x.flat_from
        weight_out_in = weight_out_in.reshape(out, c, h, w).transpose(0, 2, 3, 1).reshape(out, inp)
    name = layer_name(state, node, name_hint)
    state.weights[f"{name}.w"] = np.ascontiguousarray(weight_out_in, np.float32)
    emit(state, node, Linear(name, features, out), (out,), (out,))
    return name


def _gemm(state, node, attrs):
    check_attrs(
        state,
        node,
        attrs,
        {"alpha": lambda a: a == 1.0, "beta": lambda b: b == 1.0, "transA": lambda t: t == 0, "transB": None},
    )
    x = act_of(state, node)
    b = const_of(state, node, 1, "the weight B")
    if b.ndim != 2:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {b.shape}; expected 2-D")
    weight = b if attrs.get("transB", 0) else b.T
    name = _linear(state, node, node.input[1], x, weight)
    if len(node.input) > 2 and node.input[2]:
        _bias(state, node, name, const_of(state, node, 2, "the bias C"), weight.shape[0])


def _matmul(state, node, attrs):
    check_attrs(state, node, attrs, {})
    b = const_of(state, node, 1, "the weight (second input)")
    if b.ndim != 2:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {b.shape}; expected 2-D (in, out)")
    _linear(state, node, node.input[1], act_of(state, node), b.T)


def _add(state, node, attrs):
    check_attrs(state, node, attrs, {})
    if isinstance(state.values.get(node.input[0]), ShapeValue):
        return shape_arith(state, node, attrs)
    a, b = (state.values.get(name) for name in node.input[:2])
    if isinstance(a, Activation) and isinstance(b, Activation):  # a residual join
        if a.onnx_shape != b.onnx_shape:
            raise state.fail(node, f"adds shapes {a.onnx_shape} and {b.onnx_shape}")
        if state.last not in (a.layer, b.layer):
            raise state.fail(
                node,
                f"adds {a.layer!r} and {b.layer!r}, neither of which is the layer just "
                f"before it ({state.last!r}); reorder the graph so one branch ends last",
            )
        skip = b.layer if a.layer == state.last else a.layer
        emit(state, node, Add(layer_name(state, node, None), skip_from=skip), a.onnx_shape, a.engine_shape)
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
    state.pending_bias[layer_name] = (label(node), total)


def settle_biases(state):
    """Biases no batch norm took: a zero one is dropped (it changes nothing); any other
    becomes the layer's own bias (`bias=True`, weight "<layer>.b"), which the float and
    emulated recipes train and NITI refuses by name, or under bias='drop' is dropped.
    Each case leaves a note naming the layer."""
    for name_of_layer, (_label, bias) in state.pending_bias.items():
        top = float(np.max(np.abs(bias)))
        if top == 0.0:
            state.notes.append(f"{name_of_layer}: zero bias dropped (it changes nothing)")
        elif state.bias == "drop":
            state.notes.append(f"{name_of_layer}: bias dropped as asked (max |b| = {top:.3g}); the function changes")
        else:
            index = next(i for i, layer in enumerate(state.layers) if layer.name == name_of_layer)
            state.layers[index] = replace(state.layers[index], bias=True)
            state.weights[f"{name_of_layer}.b"] = bias.astype(np.float32)
            state.notes.append(
                f"{name_of_layer}: bias kept (max |b| = {top:.3g}); a float32 bias in every recipe "
                f"(model.bias: drop drops it)"
            )
    state.pending_bias.clear()


def _maxpool(state, node, attrs):
    check_attrs(
        state,
        node,
        attrs,
        {
            "kernel_shape": None,
            "strides": None,
            "pads": None,
            "auto_pad": None,
            "dilations": lambda d: all(v == 1 for v in d),
            "ceil_mode": None,
            "storage_order": lambda s: s == 0,
        },
    )
    if len(node.output) > 1 and node.output[1]:
        raise state.fail(node, "the Indices output is not supported")
    x = act_of(state, node)
    reads_previous(state, node, x)
    c, h, w = image_of(state, node, x)
    kernel = square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = square(state, node, "strides", attrs.get("strides", [1, 1]))
    pad = pads_of(state, node, attrs)
    if 2 * pad > kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are more than half of kernel_shape={[kernel, kernel]}")
    ceil = bool(attrs.get("ceil_mode", 0)) and any(  # a ceil_mode adding no window is the plain pool
        MaxPool2d("p", kernel, stride, pad, True).out_shape((n, n, 1))[0]
        != MaxPool2d("p", kernel, stride, pad, False).out_shape((n, n, 1))[0]
        for n in (h, w)
    )
    layer = MaxPool2d(layer_name(state, node, None), kernel, stride, pad, ceil)
    oh, ow, _ = layer.out_shape((h, w, c))
    emit(state, node, layer, (c, oh, ow), (oh, ow, c))


_TO_VECTOR = {"Flatten", "Reshape", "Squeeze"}


def _global_pool(state, node, x, keep_dims=True):
    """A mean over H and W; read as a vector when every reader flattens it (a classifier's
    head), else kept as a 1x1 image (a squeeze-excitation's, read by 1x1 convs)."""
    reads_previous(state, node, x)
    c, _, _ = image_of(state, node, x)
    readers = state.consumers.get(node.output[0], [])
    as_image = keep_dims and any(r not in _TO_VECTOR for r in readers)
    layer = GlobalAvgPool(layer_name(state, node, None), keep_dims=as_image)
    emit(state, node, layer, (c, 1, 1) if keep_dims else (c,), (1, 1, c) if as_image else (c,))


def _reduce_mean(state, node, attrs):
    """ReduceMean over H and W (axes [2, 3] or [-2, -1]; an attribute before opset 18, an input since)."""
    check_attrs(
        state, node, attrs, {"axes": None, "keepdims": lambda k: k in (0, 1), "noop_with_empty_axes": lambda v: v == 0}
    )
    x = act_of(state, node)
    axes = list(attrs.get("axes", [])) or (
        [int(v) for v in const_of(state, node, 1, "the axes")] if len(node.input) > 1 and node.input[1] else []
    )
    if sorted(a % 4 for a in axes) != [2, 3]:
        raise state.fail(node, f"axes={axes} is not supported: only the mean over H and W (axes [2, 3])")
    _global_pool(state, node, x, keep_dims=bool(attrs.get("keepdims", 1)))


def _global_average_pool(state, node, attrs):
    check_attrs(state, node, attrs, {})
    _global_pool(state, node, act_of(state, node))


def _average_pool(state, node, attrs):
    """A window over the whole input without padding is a global average (which NITI also
    lowers); any other square window, stride and equal padding an AvgPool2d (float recipes)."""
    check_attrs(
        state,
        node,
        attrs,
        {
            "kernel_shape": None,
            "strides": None,
            "pads": None,
            "auto_pad": None,
            "ceil_mode": None,
            "count_include_pad": lambda v: v in (0, 1),
            "dilations": lambda d: all(v == 1 for v in d),
        },
    )
    x = act_of(state, node)
    c, h, w = image_of(state, node, x)
    pad = pads_of(state, node, attrs)
    if list(attrs["kernel_shape"]) == [h, w] and not pad:
        return _global_pool(state, node, x)
    reads_previous(state, node, x)
    kernel = square(state, node, "kernel_shape", attrs["kernel_shape"])
    stride = square(state, node, "strides", attrs.get("strides", [1, 1]))
    if pad >= kernel:
        raise state.fail(node, f"pads={list(attrs['pads'])} are not smaller than kernel_shape={[kernel, kernel]}")
    if attrs.get("ceil_mode", 0) and ((h + 2 * pad - kernel) % stride or (w + 2 * pad - kernel) % stride):
        raise state.fail(
            node,
            f"ceil_mode=1 on a {h}x{w} input with kernel {kernel}, stride {stride}, pads {pad} "
            f"adds a partial window; dsptrain's average pool has none",
        )
    layer = AvgPool2d(layer_name(state, node, None), kernel, stride, pad, bool(attrs.get("count_include_pad", 0)))
    oh, ow, _ = layer.out_shape((h, w, c))
    emit(state, node, layer, (c, oh, ow), (oh, ow, c))


def _flatten_to_vector(state, node, x: Activation):
    if len(x.engine_shape) == 1:  # already a vector (after a global pool): nothing to do
        state.values[node.output[0]] = Activation(x.layer, (int(np.prod(x.onnx_shape)),), x.engine_shape, x.flat_from)
        return
    reads_previous(state, node, x)
    c, h, w = x.onnx_shape
    emit(state, node, Flatten(layer_name(state, node, None)), (c * h * w,), (c * h * w,), flat_from=(c, h, w))


def _flatten(state, node, attrs):
    check_attrs(state, node, attrs, {"axis": lambda a: a == 1})
    _flatten_to_vector(state, node, act_of(state, node))


def _reshape(state, node, attrs):
    check_attrs(state, node, attrs, {"allowzero": lambda a: a == 0})
    view = state.values.get(node.input[0])
    shape = list(shape_input(state, node, 1).dims)  # None: the batch dimension
    if isinstance(view, ShuffleView):
        c, h, w = view.x.onnx_shape
        if not view.transposed or shape[1:] not in ([c, h, w], [-1, h, w]):
            raise state.fail(node, f"Reshape to {shape} does not end a channel shuffle of {view.x.onnx_shape}")
        reads_previous(state, node, view.x)
        emit(
            state,
            node,
            ChannelShuffle(layer_name(state, node, None), view.groups),
            view.x.onnx_shape,
            view.x.engine_shape,
        )
        return
    x = act_of(state, node)
    if len(shape) == 5 and len(x.onnx_shape) == 3:  # (N, g, C/g, H, W): a channel shuffle begins
        c, h, w = x.onnx_shape
        groups = shape[1] if shape[1] != -1 else c // shape[2]
        if groups < 1 or c % groups or shape[2] not in (c // groups, -1) or shape[3:] != [h, w]:
            raise state.fail(node, f"Reshape of {x.onnx_shape} to {shape} is not a channel shuffle's (N, g, C/g, H, W)")
        state.values[node.output[0]] = ShuffleView(x, groups)
        return
    features = int(np.prod(x.onnx_shape))
    if len(shape) != 2 or shape[1] not in (-1, features) or (shape[0] == -1 and shape[1] == -1):
        raise state.fail(node, f"Reshape to {shape} is not supported: only a flatten to (N, {features}) or (N, -1)")
    _flatten_to_vector(state, node, x)


def _batch_norm(state, node, attrs):
    # A train-mode export (training_mode=1, or the running statistics as extra outputs before
    # opset 14) describes the same layer: dsptrain's batch norm trains on batch statistics and
    # keeps its running ones itself, so the extra outputs are left unread.
    check_attrs(
        state,
        node,
        attrs,
        {
            "epsilon": None,
            "momentum": None,
            "training_mode": lambda t: t in (0, 1),
            "spatial": lambda s: s == 1,
            "is_test": None,
            "consumed_inputs": None,
        },
    )
    x = act_of(state, node)
    reads_previous(state, node, x)
    c, h, w = image_of(state, node, x)
    params = {}
    for index, key in enumerate(("gamma", "beta", "mean", "var"), start=1):
        value = const_of(state, node, index, key)
        if value.shape != (c,):
            raise state.fail(node, f"{key} {node.input[index]!r} has shape {value.shape}; expected ({c},)")
        params[key] = np.asarray(value, np.float64)
    # The layer keeps the node's epsilon, and its momentum in PyTorch's sense (ONNX's is the
    # running statistics' weight: 1 - PyTorch's; both default to PyTorch's 0.1).
    eps, momentum = float(attrs.get("epsilon", 1e-5)), 1.0 - float(attrs.get("momentum", 0.9))
    if not (eps > 0 and np.isfinite(eps)):
        raise state.fail(node, f"epsilon {eps} must be a positive number")
    if not 0.0 <= momentum <= 1.0:
        raise state.fail(node, f"momentum {1.0 - momentum} must be in [0, 1]")
    if np.any(params["var"] + eps <= 0):
        raise state.fail(node, "running variance below zero")
    previous = state.layers[-1] if state.layers else None
    if previous is not None and previous.name in state.pending_bias:  # conv bias -> BN mean, exactly
        label, bias = state.pending_bias.pop(previous.name)
        params["mean"] = params["mean"] - bias
        if np.any(bias):
            state.notes.append(f"{previous.name}: bias folded into batch norm (running mean shifted)")
    name = layer_name(state, node, node.input[1])
    for key, value in params.items():
        state.weights[f"{name}.{key}"] = value.astype(np.float32)
    emit(state, node, BatchNorm2d(name, c, eps, momentum), x.onnx_shape, x.engine_shape)


def _dropout(state, node, attrs):
    check_attrs(state, node, attrs, {"ratio": None, "seed": None, "is_test": None})
    if len(node.input) > 2 and node.input[2] and not isinstance(state.values.get(node.input[2]), np.ndarray):
        raise state.fail(node, "training_mode must be a constant")  # true (a train-mode export) or false: one layer
    x = act_of(state, node)
    reads_previous(state, node, x)
    ratio = attrs.get("ratio", 0.5)
    if len(node.input) > 1 and node.input[1]:
        ratio = float(const_of(state, node, 1, "the ratio"))
    if not 0 <= ratio < 1:
        raise state.fail(node, f"ratio {ratio} is outside [0, 1)")
    emit(state, node, Dropout(layer_name(state, node, None), float(ratio)), x.onnx_shape, x.engine_shape, x.flat_from)


def _identity(state, node, attrs):
    check_attrs(state, node, attrs, {})
    value = state.values.get(node.input[0])
    if value is None:
        raise state.fail(node, f"reads {node.input[0]!r}, which no earlier node produces")
    state.values[node.output[0]] = value


def _constant(state, node, attrs):
    numpy_helper = onnx_module().numpy_helper
    if "value" in attrs:
        state.values[node.output[0]] = numpy_helper.to_array(attrs["value"])
        return
    for key, dtype in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            state.values[node.output[0]] = np.asarray(attrs[key], dtype)
            return
    raise state.fail(
        node, f"Constant with {', '.join(attrs) or 'no value'} is not supported (value, value_float(s), value_int(s))"
    )


HANDLERS = {
    "Shape": shape_node,
    "Gather": gather,
    "Unsqueeze": unsqueeze,
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _add,
    "Relu": relu,
    "MaxPool": _maxpool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _global_average_pool,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "BatchNormalization": _batch_norm,
    "Dropout": _dropout,
    "Identity": _identity,
    "Constant": _constant,
    "Clip": clip,
    "HardSigmoid": hard_sigmoid,
    "HardSwish": simple("hardswish"),
    "Sigmoid": simple("sigmoid"),
    "Tanh": simple("tanh"),
    "Mul": mul,
    "Concat": concat_node,
    "Split": split,
    "Slice": slice_channels,
    "Transpose": transpose,
    "ReduceMean": _reduce_mean,
    "Div": shape_arith,
    "Sub": shape_arith,
    "Cast": cast,
}
