"""Shapes computed in an ONNX graph (Shape -> Gather -> Unsqueeze -> Concat, `//` and the
exporter's casts), as PyTorch writes `x.view(x.size(0), -1)`, a channel shuffle's view or
`x.chunk(2, dim=1)`: their values are known at import, so they become plain ints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .onnx_common import act_of, check_attrs, const_of


@dataclass(frozen=True)
class ShapeValue:
    """A shape computed in the graph (Shape -> Gather -> Unsqueeze -> Concat, as PyTorch
    writes `x.view(x.size(0), -1)`): ints, None for the batch dimension."""

    dims: tuple
    scalar: bool = False


def shape_input(state, node, index):
    value = state.values.get(node.input[index])
    if isinstance(value, ShapeValue):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1:
        return ShapeValue(tuple(int(v) for v in value.reshape(-1)), value.ndim == 0)
    raise state.fail(node, f"input {index} must be a shape (from Shape) or an integer constant")


def shape_arith(state, node, attrs):
    """Div, Mul, Add or Sub of a picked dimension and an integer constant (`num_channels // groups`,
    the exporter's chunk sizes)."""
    check_attrs(state, node, attrs, {})
    dims = shape_input(state, node, 0)
    k = const_of(state, node, 1, "the integer constant")
    if k.size != 1 or k.dtype.kind not in "iu" or None in dims.dims or (node.op_type == "Div" and not k.any()):
        raise state.fail(node, f"{node.op_type} is supported only on known dimensions of a Shape by an integer")
    k = int(k.reshape(-1)[0])
    apply = {"Div": lambda d: d // k, "Mul": lambda d: d * k, "Add": lambda d: d + k, "Sub": lambda d: d - k}
    picked = tuple(apply[node.op_type](d) for d in dims.dims)
    state.values[node.output[0]] = ShapeValue(picked, dims.scalar)


def cast(state, node, attrs):
    """A Cast of a computed shape (the exporter's int64 casts around `//`): the same dimensions."""
    value = state.values.get(node.input[0])
    if not isinstance(value, ShapeValue):
        raise state.fail(node, "Cast is supported only on a shape computed from Shape")
    state.values[node.output[0]] = value


def shape_node(state, node, attrs):
    check_attrs(state, node, attrs, {})
    x = act_of(state, node)
    state.values[node.output[0]] = ShapeValue((None, *x.onnx_shape))


def gather(state, node, attrs):
    check_attrs(state, node, attrs, {"axis": lambda a: a == 0})
    dims = shape_input(state, node, 0)
    index = const_of(state, node, 1, "the index")
    if index.ndim > 1 or dims.scalar:
        raise state.fail(node, "Gather is supported only to pick dimensions of a Shape")
    picked = tuple(dims.dims[int(i)] for i in index.reshape(-1))
    state.values[node.output[0]] = ShapeValue(picked, index.ndim == 0)


def unsqueeze(state, node, attrs):
    axes = list(attrs.get("axes", [])) or (
        [int(v) for v in const_of(state, node, 1, "the axes")] if len(node.input) > 1 else []
    )
    dims = shape_input(state, node, 0)
    if axes != [0] or not dims.scalar:
        raise state.fail(node, "Unsqueeze is supported only to turn a picked dimension into a 1-D shape")
    state.values[node.output[0]] = ShapeValue(dims.dims)


def shape_concat(state, node, attrs):
    check_attrs(state, node, attrs, {"axis": lambda a: a == 0})
    parts = [shape_input(state, node, i) for i in range(len(node.input))]
    state.values[node.output[0]] = ShapeValue(tuple(d for p in parts for d in p.dims))
