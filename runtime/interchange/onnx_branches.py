"""ONNX handlers of the mobile CNNs' layers: activations (Relu, Clip / ReLU6, HardSwish,
HardSigmoid, Sigmoid, Tanh, and x * Sigmoid(x) as SiLU), products of two activations
(squeeze-excitation's channel scale), Concat, Split and Slice on channels, and the
Reshape-Transpose-Reshape channel shuffle's Transpose (onnx_ops._reshape ends it).
Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn import INPUT, Concat, Mul, Nonlinearity, ReLU, SliceChannels
from .onnx_common import Activation, act_of, check_attrs, const_of, emit, image_of, layer_name, reads_previous
from .onnx_shapes import ShapeValue, shape_arith, shape_concat, shape_input


def relu(state, node, attrs):
    check_attrs(state, node, attrs, {})
    x = act_of(state, node)
    reads_previous(state, node, x)
    emit(state, node, ReLU(layer_name(state, node, None)), x.onnx_shape, x.engine_shape, x.flat_from)


def _nonlinearity(state, node, function, params=()):
    x = act_of(state, node)
    source = None if x.layer == state.last else x.layer
    layer = Nonlinearity(layer_name(state, node, None), function, tuple(float(p) for p in params), source=source)
    emit(state, node, layer, x.onnx_shape, x.engine_shape, x.flat_from)


def clip(state, node, attrs):
    """Clip(min, max): bounds as attributes before opset 11, as constant inputs since; Clip(0, 6) is ReLU6,
    Clip(0, inf) a ReLU."""
    check_attrs(state, node, attrs, {"min": None, "max": None})
    low, high = attrs.get("min", -np.inf), attrs.get("max", np.inf)
    if len(node.input) > 1 and node.input[1]:
        low = float(const_of(state, node, 1, "min"))
    if len(node.input) > 2 and node.input[2]:
        high = float(const_of(state, node, 2, "max"))
    if not low < high:
        raise state.fail(node, f"min {low} is not below max {high}")
    if low == 0 and high == np.inf and act_of(state, node).layer == state.last:
        return relu(state, node, {})
    _nonlinearity(state, node, "clip", (low, high))


def hard_sigmoid(state, node, attrs):
    check_attrs(state, node, attrs, {"alpha": None, "beta": None})
    _nonlinearity(state, node, "hardsigmoid", (attrs.get("alpha", 0.2), attrs.get("beta", 0.5)))


def simple(function):
    def handler(state, node, attrs):
        check_attrs(state, node, attrs, {})
        _nonlinearity(state, node, function)

    return handler


def mul(state, node, attrs):
    """x * f(x) just computed (Sigmoid: SiLU; HardSigmoid(1/6, 1/2): HardSwish) becomes one layer;
    any other product of two activations a Mul (equal shapes, or a (C, 1, 1) channel scale)."""
    check_attrs(state, node, attrs, {})
    if isinstance(state.values.get(node.input[0]), ShapeValue):
        return shape_arith(state, node, attrs)
    a, b = act_of(state, node, 0), act_of(state, node, 1)
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
        raise state.fail(
            node,
            f"multiplies shapes {a.onnx_shape} and {b.onnx_shape}; supported: equal shapes, "
            f"or an image by a (C, 1, 1) channel scale",
        )
    emit(state, node, Mul(layer_name(state, node, None), (big.layer, small.layer)), big.onnx_shape, big.engine_shape)


def _input_of_last(state) -> str:
    """The name of the layer (or INPUT) the last single-input layer reads."""
    last = state.layers[-1]
    return last.source or (state.layers[-2].name if len(state.layers) > 1 else INPUT)


def concat_node(state, node, attrs):
    """Concat of activations on channels (Fire modules, ShuffleNet), or of shapes (a Reshape's)."""
    values = [state.values.get(name) for name in node.input]
    if not any(isinstance(v, Activation) for v in values):
        return shape_concat(state, node, attrs)
    check_attrs(state, node, attrs, {"axis": None})
    parts = [act_of(state, node, i) for i in range(len(node.input))]
    if any(len(p.onnx_shape) != 3 for p in parts) or attrs.get("axis") not in (1, -3):
        raise state.fail(node, f"axis={attrs.get('axis')} is not supported: only images joined on channels (axis 1)")
    layer = Concat(layer_name(state, node, None), tuple(p.layer for p in parts))
    h, w, c = layer.out_shape_of([p.engine_shape for p in parts])
    emit(state, node, layer, (c, h, w), (h, w, c))


def _slice_layer(state, node, output, x, start, stop, index):
    c, h, w = x.onnx_shape
    source = None if x.layer == state.last else x.layer
    name = layer_name(state, node, None) + (f".{index}" if index is not None else "")
    state.layers.append(SliceChannels(name, int(start), int(stop), source))
    state.values[output] = Activation(name, (stop - start, h, w), (h, w, stop - start))


def split(state, node, attrs):
    """Split on channels (x.chunk / torch.split): each output one SliceChannels layer."""
    check_attrs(state, node, attrs, {"axis": lambda a: a in (1, -3), "split": None, "num_outputs": None})
    x = act_of(state, node)
    c, _, _ = image_of(state, node, x)
    sizes = list(attrs.get("split", [])) or (
        list(shape_input(state, node, 1).dims) if len(node.input) > 1 and node.input[1] else []
    )
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


def slice_channels(state, node, attrs):
    """Slice of channels (axis 1, step 1): starts/ends as attributes before opset 10, inputs since."""
    check_attrs(state, node, attrs, {"starts": None, "ends": None, "axes": None})
    x = act_of(state, node)
    c, _, _ = image_of(state, node, x)

    def part(key, index, default=None):
        if key in attrs:
            return [int(v) for v in attrs[key]]
        if len(node.input) > index and node.input[index]:  # a constant, or a size computed from a Shape
            return list(shape_input(state, node, index).dims)
        return default

    starts, ends, axes = part("starts", 1), part("ends", 2), part("axes", 3, [0])
    steps = part("steps", 4, [1])
    if len(starts) != 1 or axes[0] % 4 != 1 or steps != [1]:
        raise state.fail(
            node,
            f"Slice starts={starts} ends={ends} axes={axes} steps={steps} is not supported: "
            f"only a range of channels (one axis, 1, step 1)",
        )
    start, stop = (min(max(v + c if v < 0 else v, 0), c) for v in (starts[0], ends[0]))
    if stop <= start:
        raise state.fail(node, f"channels [{starts[0]}, {ends[0]}) of {c} are empty")
    _slice_layer(state, node, node.output[0], x, start, stop, None)


@dataclass(frozen=True)
class ShuffleView:
    """A channel shuffle under way: the image seen as (groups, C / groups, H, W), maybe transposed."""

    x: Activation
    groups: int
    transposed: bool = False


def transpose(state, node, attrs):
    view = state.values.get(node.input[0])
    if not isinstance(view, ShuffleView) or view.transposed or list(attrs.get("perm", [])) != [0, 2, 1, 3, 4]:
        raise state.fail(
            node,
            f"Transpose perm={list(attrs.get('perm', []))} is supported only inside a channel "
            f"shuffle (Reshape to (N, g, C/g, H, W), Transpose [0, 2, 1, 3, 4], Reshape back)",
        )
    state.values[node.output[0]] = ShuffleView(view.x, view.groups, True)
