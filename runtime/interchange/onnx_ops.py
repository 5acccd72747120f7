"""The ONNX operators dsptrain imports, one handler each (HANDLERS: op type -> handler):
a node becomes an engine layer, an alias of its input, a fold into the layer before it, or
a ModelFileError naming the node, its op type and what is supported. onnx_import.py walks
the graph and calls these. By family: products and their biases (onnx_products.py),
pooling (onnx_pools.py), activations, Mul and the branch ops (onnx_branches.py), shape
arithmetic (onnx_shapes.py); here Flatten and Reshape, BatchNormalization, Dropout,
Identity, Constant and the table.

Operator semantics: the ONNX operator specification (github.com/onnx/onnx, docs/Operators.md).
"""

from __future__ import annotations

import numpy as np

from ..nn import BatchNorm2d, ChannelShuffle, Dropout, Flatten
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
    layer_name,
    onnx_module,
    reads_previous,
)
from .onnx_pools import average_pool, global_average_pool, maxpool, reduce_mean
from .onnx_products import add, conv, gemm, matmul, settle_biases
from .onnx_shapes import cast, gather, shape_arith, shape_input, shape_node, unsqueeze

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
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": matmul,
    "Add": add,
    "Relu": relu,
    "MaxPool": maxpool,
    "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool,
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
    "ReduceMean": reduce_mean,
    "Div": shape_arith,
    "Sub": shape_arith,
    "Cast": cast,
}
