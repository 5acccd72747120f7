"""The ONNX operators that become product layers: Conv (group, dilations), Gemm, MatMul,
and Add (a residual join, or a constant bias after a product). A product's bias waits in
`state.pending_bias` until a batch norm folds it into its mean (BatchNormalization, onnx_ops.py) or
`settle_biases` keeps or drops it at the end.

Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..nn import INPUT, Add, Conv2d, Linear
from .onnx_common import (
    Activation,
    act_of,
    check_attrs,
    const_of,
    emit,
    image_of,
    label,
    layer_name,
    pads_of,
    reads_previous,
    square,
)
from .onnx_shapes import ShapeValue, shape_arith


def conv(state, node, attrs):
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


def gemm(state, node, attrs):
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


def matmul(state, node, attrs):
    check_attrs(state, node, attrs, {})
    b = const_of(state, node, 1, "the weight (second input)")
    if b.ndim != 2:
        raise state.fail(node, f"weight {node.input[1]!r} has shape {b.shape}; expected 2-D (in, out)")
    _linear(state, node, node.input[1], act_of(state, node), b.T)


def add(state, node, attrs):
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
