"""ONNX import: a model file becomes the same `Model` the zoo builds, plus its weights.

The file's graph is walked once in its (topological) node order. Every node either
becomes one engine layer (`nn.py`), aliases its input (Identity, a Flatten of a vector),
folds into a layer before it (a bias into the following batch norm), or is refused with
a `ModelFileError` naming the node, its op type and what is supported, before anything
trains. The file's NCHW activations and OIHW weights become the engine's NHWC and OHWI;
a Linear after a Flatten of an image gets its input columns permuted from ONNX's (C, H, W)
order to the engine's (H, W, C) order.

Bias: a conv or linear bias is folded into a batch norm that directly follows it
(exactly: BN subtracts the mean, so `mean -= bias` gives the same function, in training
too); a zero bias is dropped; any other becomes the layer's own bias (`bias=True`, weight
"<layer>.b"), which FP32 and the emulated recipes add, train and export, and NITI (no bias
in its algorithm) refuses naming the layer, unless the caller passes `bias="drop"`, which
drops it. The notes name each layer and say which happened.

The operators themselves: onnx_ops.py.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..nn import INPUT, Model
from .onnx_checks import check_model, read_model
from .onnx_ops import HANDLERS, SUPPORTED, Activation, ImportState, ModelFileError, attrs_of, onnx_module, settle_biases

MIN_OPSET, MAX_OPSET = 7, 22  # default-domain opsets whose semantics of these ops we read
BIAS_POLICIES = ("fold", "drop")


def load_onnx(path, bias: str = "fold", name: str | None = None) -> tuple[Model, list[str]]:
    """(Model with initial_weights, notes for the user) from an ONNX file; ModelFileError on
    anything this importer does not support."""
    path = str(path)
    proto, folder = read_model(path)
    if not proto.HasField("graph") or not proto.graph.node:
        raise ModelFileError(f"{path}: not an ONNX model (no graph nodes)")
    return from_proto(proto, path, bias, name, folder=folder)


def from_proto(
    proto, path: str = "<onnx>", bias: str = "fold", name: str | None = None, folder=None
) -> tuple[Model, list[str]]:
    """`folder`: where the file's external data may be (None: a model built in memory)."""
    if bias not in BIAS_POLICIES:
        raise UserError(f"bias policy {bias!r} is not one of {', '.join(BIAS_POLICIES)}")
    numpy_helper = onnx_module().numpy_helper
    graph = proto.graph
    check_model(proto, path, folder, _check_opset(proto, path))
    state = ImportState(path, bias)
    for node in graph.node:
        for tensor in node.input:
            state.consumers.setdefault(tensor, []).append(node.op_type)
    for init in graph.initializer:
        state.values[init.name] = numpy_helper.to_array(init)
    input_name, input_shape = _the_input(graph, state, path)
    state.values[input_name] = Activation(INPUT, input_shape, (input_shape[1], input_shape[2], input_shape[0]))
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise state.fail(node, f"operators of domain {node.domain!r} are not supported; supported: {SUPPORTED}")
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise state.fail(node, f"op type {node.op_type} is not supported; supported: {SUPPORTED}")
        try:
            handler(state, node, attrs_of(node))
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            # a combination the checks (onnx_checks.py) let through and the handler did not foresee
            raise state.fail(node, f"cannot be imported ({type(exc).__name__}: {str(exc)[:80]})") from None
    if len(graph.output) != 1:
        raise ModelFileError(
            f"{path}: the graph has {len(graph.output)} outputs; dsptrain imports a "
            f"classifier with one output (class scores)"
        )
    out = state.values.get(graph.output[0].name)
    if not isinstance(out, Activation) or out.layer == INPUT or len(out.engine_shape) != 1:
        raise ModelFileError(f"{path}: output {graph.output[0].name!r} is not a vector of class scores")
    if out.layer != state.last:
        raise ModelFileError(
            f"{path}: output {graph.output[0].name!r} comes from layer {out.layer!r}, "
            f"not from the last layer {state.last!r}"
        )
    settle_biases(state)
    h, w, c = input_shape[1], input_shape[2], input_shape[0]
    model = Model(
        name or Path(path).stem, (h, w, c), out.engine_shape[0], tuple(state.layers), initial_weights=state.weights
    )
    model.shapes()
    return model, state.notes


# ---------------------------------------------------------------- file-level checks


def _check_opset(proto, path):
    opsets = {o.domain or "ai.onnx": o.version for o in proto.opset_import}
    version = opsets.get("ai.onnx")
    if version is None:
        raise ModelFileError(f"{path}: the model imports no default-domain (ai.onnx) opset")
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise ModelFileError(
            f"{path}: opset {version} is not supported (supported: {MIN_OPSET}..{MAX_OPSET}); "
            f"export with opset_version={min(max(version, MIN_OPSET), MAX_OPSET)}"
        )
    return version


def _the_input(graph, state, path):
    inputs = [i for i in graph.input if i.name not in state.values]
    if len(inputs) != 1:
        names = ", ".join(repr(i.name) for i in inputs) or "none"
        raise ModelFileError(
            f"{path}: the graph has {len(inputs)} inputs ({names}); dsptrain imports models "
            f"with one image input (N, C, H, W)"
        )
    value = inputs[0]
    dims = value.type.tensor_type.shape.dim
    if len(dims) != 4:
        raise ModelFileError(
            f"{path}: input {value.name!r} has {len(dims)} dimensions; expected an image batch (N, C, H, W)"
        )
    shape = []
    for axis, dim in zip("CHW", dims[1:]):
        if not dim.HasField("dim_value") or dim.dim_value < 1:
            raise ModelFileError(
                f"{path}: input {value.name!r} has a dynamic {axis} dimension "
                f"({dim.dim_param or '?'}); only the batch dimension may be dynamic"
            )
        shape.append(int(dim.dim_value))
    return value.name, tuple(shape)
