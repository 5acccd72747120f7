"""An ONNX file checked whole before any node is imported: read like every other input,
its external data taken only from inside its own folder, every field validated.

The importer's op handlers (onnx_ops.py) may then trust what they read: every tensor has
a known numeric dtype, non-negative dims of bounded size, data of the right length and
finite values; every node has its schema's inputs, outputs and attributes (each of its
declared type; no unknown one, no missing required one), and the graph is in single
static assignment with every input defined before it is read. The checks are generic
(by the op's schema in onnx.defs, by attribute name and type), so an op handler added
later is covered without a line here. Each problem is one ModelFileError naming the file
and the node or tensor.

External data (an initializer's or a Constant's bytes in another file, ONNX's
`external_data` location/offset/length) is resolved here and only here, against the
model's folder: an absolute location, one that climbs out with `..` or a symlink, or one
naming a FIFO or a device is refused by name, and the bytes are read within the file's
size. After this no tensor in the proto points at a file, so nothing later (numpy_helper,
ONNX Runtime) opens one by itself, and never one relative to the working directory.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..inputs import read_limited, read_slice
from .onnx_ops import ModelFileError, onnx_module

MAX_MODEL_BYTES = (2 << 30) - 1  # protobuf cannot parse one message past 2 GiB
MAX_TENSOR_ELEMENTS = 1 << 28  # one tensor of 1 GiB of float32 at most
MAX_DIM = 1 << 20  # any dimension of a value's declared shape
MAX_WINDOW = 1 << 16  # kernel_shape, strides, dilations, pads, group
MAX_ATTR_INT = 1 << 62
POSITIVE_ATTRS = ("kernel_shape", "strides", "dilations", "group")  # 0 would divide by zero
NON_NEGATIVE_ATTRS = ("pads", "output_padding")

_REFUSED_DTYPES = {"STRING": "strings", "COMPLEX64": "complex numbers", "COMPLEX128": "complex numbers"}


def read_model(path) -> tuple[object, Path]:
    """(the parsed ModelProto, the model's folder) of the ONNX file `path`: a regular file
    of at most MAX_MODEL_BYTES, read without blocking (FIFOs and devices refused by name)."""
    onnx = onnx_module()
    raw = read_limited(path, "ONNX model", MAX_MODEL_BYTES, ModelFileError)
    try:
        proto = onnx.load_model_from_string(raw)
    except Exception as exc:  # protobuf's DecodeError and friends: not a model at all
        raise ModelFileError(
            f"{path}: not an ONNX model ({type(exc).__name__}: {str(exc)[:80] or 'cannot parse'})"
        ) from None
    return proto, Path(os.path.realpath(os.path.dirname(os.path.abspath(path))))


def check_model(proto, path: str, folder: Path | None, opset: int) -> None:
    """Validate `proto` in place (ModelFileError naming file and node or tensor): external
    data resolved inside `folder` (None: a model built in memory, which may have none),
    then every tensor, value, node and attribute. `opset`: the default domain's version."""
    onnx = onnx_module()
    if not 1 <= proto.ir_version <= onnx.IR_VERSION:
        raise ModelFileError(f"{path}: ir_version {proto.ir_version} is not one ONNX defines (1..{onnx.IR_VERSION})")
    graph = proto.graph
    for init in graph.initializer:
        _tensor(init, f"initializer {init.name!r}", path, folder)
    if len(graph.sparse_initializer):
        raise ModelFileError(
            f"{path}: sparse initializer {graph.sparse_initializer[0].values.name!r}: sparse tensors are not supported"
        )
    for value in (*graph.input, *graph.output, *graph.value_info):
        _value_shape(value, path)
    defined = _graph_names(graph, path)
    for node in graph.node:
        label = f"node {node.name or '(unnamed)'!r} ({node.op_type})"
        where = f"{path}: {label}"
        _node_links(node, where, defined)
        _node_schema(node, where, opset)
        for attr in node.attribute:
            _attribute(attr, label, path, folder)
    _outputs(graph, path, defined)


# ---------------------------------------------------------------- tensors


def _tensor(tensor, what: str, path, folder) -> None:
    """A tensor's dtype, dims, data (external data loaded from `folder`) and values."""
    onnx = onnx_module()
    where = f"{path}: {what}"
    names = onnx.TensorProto.DataType
    if tensor.data_type not in names.values() or tensor.data_type == onnx.TensorProto.UNDEFINED:
        raise ModelFileError(f"{where}: data type {tensor.data_type} is not an ONNX numeric type")
    dtype_name = names.Name(tensor.data_type)
    try:
        np_dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:
        np_dtype = None
    if dtype_name in _REFUSED_DTYPES or np_dtype is None or np_dtype.kind not in "biuf":
        kind = _REFUSED_DTYPES.get(dtype_name, "an element type dsptrain does not compute in")
        raise ModelFileError(
            f"{where}: data type {dtype_name} ({kind}) is not supported; weights are float, int or bool"
        )
    elements = 1
    for dim in tensor.dims:
        if dim < 0:
            raise ModelFileError(f"{where}: dimension {dim} in dims {list(tensor.dims)} is negative")
        elements *= dim
        if elements > MAX_TENSOR_ELEMENTS:
            raise ModelFileError(f"{where}: dims {list(tensor.dims)} hold more than {MAX_TENSOR_ELEMENTS} elements")
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        _load_external(tensor, where, elements * np_dtype.itemsize, folder)
    elif tensor.external_data:
        raise ModelFileError(f"{where}: has external_data entries but data_location is not EXTERNAL")
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except Exception as exc:
        raise ModelFileError(
            f"{where}: its data does not fit dims {list(tensor.dims)} and type {dtype_name} ({type(exc).__name__})"
        ) from None
    if array.size != elements:
        raise ModelFileError(f"{where}: holds {array.size} values, dims {list(tensor.dims)} say {elements}")
    if array.dtype.kind == "f" and array.size:
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        if bad:
            raise ModelFileError(f"{where}: {bad} of {array.size} values are NaN or infinite")


def _load_external(tensor, where: str, nbytes: int, folder: Path | None) -> None:
    """Read an external tensor's bytes from inside `folder` into the proto itself."""
    onnx = onnx_module()
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    if folder is None:
        raise ModelFileError(
            f"{where}: keeps its data in external file {location!r}, and a model "
            f"given in memory has no folder to find it in; load it from its file"
        )
    if not location or "\0" in location:
        raise ModelFileError(f"{where}: external data has no valid location ({location!r})")
    if os.path.isabs(location) or ".." in Path(location).parts:
        raise ModelFileError(
            f"{where}: external data location {location!r} is outside the model's folder "
            f"{folder}; only files inside it are read"
        )
    target = os.path.realpath(folder / location)
    if os.path.commonpath([target, str(folder)]) != str(folder):
        raise ModelFileError(
            f"{where}: external data location {location!r} resolves to {target}, outside the "
            f"model's folder {folder} (a symlink); only files inside it are read"
        )
    try:
        offset = int(info.get("offset", "0"))
        length = int(info.get("length", str(nbytes)))
    except ValueError:
        raise ModelFileError(
            f"{where}: external data offset {info.get('offset')!r} or length "
            f"{info.get('length')!r} is not a whole number"
        ) from None
    if length != nbytes:
        raise ModelFileError(f"{where}: external data length {length} is not the {nbytes} bytes its dims and type need")
    data = read_slice(
        target,
        "external data",
        offset,
        length,
        lambda message: ModelFileError(f"{where}: external data {location!r}: {message}"),
    )
    tensor.raw_data = data
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


# ---------------------------------------------------------------- values, links, outputs


def _value_shape(value, path) -> None:
    dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else ()
    for dim in dims:
        if dim.HasField("dim_value") and not 0 <= dim.dim_value <= MAX_DIM:
            raise ModelFileError(f"{path}: value {value.name!r}: dimension {dim.dim_value} is outside 0..{MAX_DIM}")


def _graph_names(graph, path) -> set:
    """Names the graph defines before its first node (inputs, initializers); each once."""
    defined = set()
    for init in graph.initializer:
        if not init.name:
            raise ModelFileError(f"{path}: an initializer has no name")
        if init.name in defined:
            raise ModelFileError(f"{path}: initializer {init.name!r} is defined twice")
        defined.add(init.name)
    inputs = set()
    for value in graph.input:
        if not value.name or value.name in inputs:
            raise ModelFileError(f"{path}: graph input {value.name!r} is {'repeated' if value.name else 'unnamed'}")
        inputs.add(value.name)
    return defined | inputs


def _node_links(node, where: str, defined: set) -> None:
    """Every input defined by an earlier node, input or initializer; outputs new names."""
    for name in node.input:
        if name and name not in defined:
            raise ModelFileError(
                f"{where}: input {name!r} is not produced by any earlier node, graph input or initializer"
            )
    outputs = [name for name in node.output if name]
    if not outputs:
        raise ModelFileError(f"{where}: the node has no outputs")
    for name in outputs:
        if name in defined:
            raise ModelFileError(f"{where}: output {name!r} is already defined (a graph assigns each name once)")
        defined.add(name)


def _node_schema(node, where: str, opset: int) -> None:
    """Inputs, outputs and attributes against the op's schema at the model's opset; ops of
    other domains or without a schema are left to the importer, which refuses them."""
    if node.domain not in ("", "ai.onnx"):
        return
    defs = onnx_module().defs
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except Exception:
        return
    n_in, n_out = len(node.input), len(node.output)
    if not schema.min_input <= n_in <= schema.max_input:
        raise ModelFileError(f"{where}: has {n_in} inputs; {node.op_type} takes {schema.min_input}..{schema.max_input}")
    if not schema.min_output <= n_out <= schema.max_output:
        raise ModelFileError(
            f"{where}: has {n_out} outputs; {node.op_type} gives {schema.min_output}..{schema.max_output}"
        )
    given = [attr.name for attr in node.attribute]
    twice = sorted({name for name in given if given.count(name) > 1})
    if twice:
        raise ModelFileError(f"{where}: attribute {twice[0]!r} is given twice")
    for attr in node.attribute:
        spec = schema.attributes.get(attr.name)
        if spec is None:
            raise ModelFileError(
                f"{where}: attribute {attr.name!r} is not an attribute of {node.op_type} (opset {opset})"
            )
        if int(attr.type) != int(spec.type):
            got = _type_name(attr.type)
            raise ModelFileError(
                f"{where}: attribute {attr.name!r} is {got} ({_attr_text(attr)}); "
                f"{node.op_type} takes {_type_name(int(spec.type))}"
            )
    missing = [name for name, spec in schema.attributes.items() if spec.required and name not in given]
    if missing:
        raise ModelFileError(f"{where}: required attribute {missing[0]!r} is missing")


def _attribute(attr, label: str, path, folder) -> None:
    """Values: ints bounded (window sizes positive, pads non-negative), floats finite,
    tensors checked like initializers, no subgraph and no sparse tensor."""
    proto = onnx_module().AttributeProto
    where = f"{path}: {label}"
    kind = attr.type
    if kind in (proto.GRAPH, proto.GRAPHS):
        raise ModelFileError(f"{where}: attribute {attr.name!r} holds a subgraph; subgraphs are not supported")
    if kind in (proto.SPARSE_TENSOR, proto.SPARSE_TENSORS):
        raise ModelFileError(f"{where}: attribute {attr.name!r} holds a sparse tensor; not supported")
    if kind == proto.TENSOR:
        _tensor(attr.t, f"{label}: attribute {attr.name!r}", path, folder)
    elif kind == proto.TENSORS:
        for i, tensor in enumerate(attr.tensors):
            _tensor(tensor, f"{label}: attribute {attr.name!r}[{i}]", path, folder)
    elif kind in (proto.INT, proto.INTS):
        values = [attr.i] if kind == proto.INT else list(attr.ints)
        low, high = (
            (1, MAX_WINDOW)
            if attr.name in POSITIVE_ATTRS
            else (0, MAX_WINDOW)
            if attr.name in NON_NEGATIVE_ATTRS
            else (-MAX_ATTR_INT, MAX_ATTR_INT)
        )
        bad = [v for v in values if not low <= v <= high]
        if bad:
            raise ModelFileError(
                f"{where}: attribute {attr.name}={_attr_text(attr)}: {bad[0]} is outside {low}..{high}"
            )
    elif kind in (proto.FLOAT, proto.FLOATS):
        values = [attr.f] if kind == proto.FLOAT else list(attr.floats)
        if not all(math.isfinite(v) for v in values):
            raise ModelFileError(f"{where}: attribute {attr.name}={_attr_text(attr)} is not finite")
    elif kind not in (proto.STRING, proto.STRINGS):
        raise ModelFileError(f"{where}: attribute {attr.name!r} has no valid type ({kind})")


def _outputs(graph, path, defined: set) -> None:
    seen = set()
    for value in graph.output:
        if value.name in seen:
            raise ModelFileError(f"{path}: graph output {value.name!r} is listed twice")
        seen.add(value.name)
        if value.name not in defined:
            raise ModelFileError(f"{path}: graph output {value.name!r} is produced by no node")


def _type_name(kind: int) -> str:
    proto = onnx_module().AttributeProto
    try:
        return proto.AttributeType.Name(kind).lower()
    except ValueError:
        return f"type {kind}"


def _attr_text(attr) -> str:
    try:
        value = onnx_module().helper.get_attribute_value(attr)
    except Exception:
        return "?"
    text = repr(list(value) if isinstance(value, (list, tuple)) else value)
    return text if len(text) <= 60 else text[:57] + "..."
