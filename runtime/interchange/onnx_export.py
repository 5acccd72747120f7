"""A trained checkpoint as an ONNX file: float (dequantized weights) or QDQ (int8 weights
with power-of-two scales behind DequantizeLinear), for ONNX Runtime and other engines.

The file takes what dsptrain's recipes take, in PyTorch's layout: float32 input
(N, C, H, W) holding (pixel - 128) / 128, and gives (N, classes) logits. Engine layouts
map back: OHWI conv weights to OIHW, a linear layer after a flatten gets its input
columns from the engine's (H, W, C) order to ONNX's (C, H, W). Dropout is left out
(inference). In QDQ form every conv and linear weight is int8 with scale 2**e and zero
point 0: NITI's own int8 weights and exponents as they are, other recipes' weights on an
int8 power-of-two grid (weights.pow2_grid). A conv or linear bias is Conv's / Gemm's
float third input. Activations are float, except in the export of a NITI checkpoint (both
forms): NITI rounds every activation to int8 on a step taken from the batch's range, and
without that rounding a float graph's top-1 answers differed from dsptrain's on 0.3-0.9 %
of test images, so its graph writes the rounding out in float operators (onnx_niti.py)
and gives dsptrain's logits, fed the same batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..checkpoint import atomic_write
from ..nn import (
    INPUT,
    Add,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Flatten,
    GlobalAvgPool,
    Linear,
    MaxPool2d,
    ReLU,
    has_bias,
)
from ..numerics import QTensor
from . import onnx_export_branches as branches
from .weights import float_weights, pow2_grid

OPSET = 17
INPUT_NOTE = "float32 (N, C, H, W) = (pixel - 128) / 128"


class _Graph:
    def __init__(self, onnx, qdq):
        self.onnx, self.helper, self.qdq = onnx, onnx.helper, qdq
        self.nodes, self.initializers = [], []

    def const(self, name, array):
        self.initializers.append(
            self.onnx.numpy_helper.from_array(np.array(array, order="C"), name)
        )  # keeps 0-d scalars
        return name

    def node(self, op, inputs, output, name, **attrs):
        self.nodes.append(self.helper.make_node(op, list(inputs), [output], name=name, **attrs))
        return output

    def weight(self, name, value: np.ndarray, int8: QTensor | None):
        """A float weight, or in QDQ form int8 + DequantizeLinear (scale 2**e, zero point 0)."""
        if not self.qdq:
            return self.const(name, value.astype(np.float32))
        q = int8 if int8 is not None else pow2_grid(value, 8)
        self.const(f"{name}_q", q.q.astype(np.int8))
        self.const(f"{name}_scale", np.array(2.0**q.e, np.float32))
        self.const(f"{name}_zero", np.array(0, np.int8))
        return self.node("DequantizeLinear", (f"{name}_q", f"{name}_scale", f"{name}_zero"), name, f"{name}_dq")

    def grid_weight(self, name, q: np.ndarray, step: float):
        """A weight a recipe's grid gives as int8 integers times `step`: their float32 values, or
        in QDQ form the integers behind DequantizeLinear (scale `step`, zero point 0)."""
        if not self.qdq:
            return self.const(name, (q.astype(np.float64) * step).astype(np.float32))
        self.const(f"{name}_q", q.astype(np.int8))
        self.const(f"{name}_scale", np.array(step, np.float32))
        self.const(f"{name}_zero", np.array(0, np.int8))
        return self.node("DequantizeLinear", (f"{name}_q", f"{name}_scale", f"{name}_zero"), name, f"{name}_dq")


def _int8_of(value, transform) -> QTensor | None:
    """NITI's int8 weight in ONNX layout, as stored (None for other recipes' weights)."""
    if isinstance(value, QTensor) and value.q.dtype == np.int8:
        return QTensor(transform(value.q), value.e)
    return None


def _bias(g, layer, floats, rounding=None) -> tuple[str, ...]:
    """(the layer's float bias,) when it has one: Conv's and Gemm's third input (float in QDQ too).
    Under NITI's rounding the bias is added after the exact sums instead (_rounded_product)."""
    if not has_bias(layer) or rounding is not None:
        return ()
    return (g.const(f"{layer.name}.bias", floats[f"{layer.name}.b"]),)


def _plus_bias(g, walk, layer, y: str, out: str, bias_shape) -> str:
    """`y` plus the layer's float bias (a float32 add, as the recipe's bias_add_f32), if it has one."""
    if not has_bias(layer):
        return y
    bias = g.const(f"{layer.name}.bias", walk.floats[f"{layer.name}.b"].reshape(bias_shape))
    return g.node("Add", (y, bias), out, f"{layer.name}.bias_add")


def _rounded_product(g, walk, layer, y: str, reads: str, bias_shape) -> str:
    """A NITI product's output: rounded to int8 on its step, or (a product with a bias, whose
    output NITI keeps in float) its exact sums plus the bias, one float32 rounding as the engine's."""
    if not walk.rounding:
        return y
    if layer.name in walk.rounding.writes_int8:
        return walk.rounding.product(layer, y, reads)
    if not has_bias(layer):
        return y
    bias = g.const(f"{layer.name}.bias", walk.floats[f"{layer.name}.b"].reshape(bias_shape))
    return g.node("Add", (y, bias), f"{layer.name}.biased", f"{layer.name}.bias_add")


def build_onnx(trained, qdq: bool = False, niti: bool | None = None):
    """The ONNX model of a checkpoint: float weights, or int8 QDQ weights (`qdq`); with
    NITI's activation rounding written out (onnx_niti.py) when `niti`, which defaults to
    whether the checkpoint is NITI's (`niti=True` refuses any other)."""
    import onnx

    from . import onnx_emulated, onnx_niti

    model, state = trained.model, trained.state
    g = _Graph(onnx, qdq)
    walk = _Walk(float_weights(state), state, None, {INPUT: "input"}, {INPUT: tuple(model.input_shape)})
    niti = onnx_niti.is_niti(trained) if niti is None else niti
    if niti:
        onnx_niti.check(trained)
        walk.rounding = onnx_niti.Rounding(g, state, model)
        walk.out_of[INPUT] = walk.rounding.input("input")
    elif onnx_emulated.covers(trained):
        walk.grids = onnx_emulated.Grids(g, trained)
    previous = INPUT
    for layer, shape in zip(model.layers, model.shapes()):
        reads = getattr(layer, "source", None) or previous
        out = _export_layer(g, walk, layer, reads)
        walk.out_of[layer.name], walk.shape_of[layer.name], previous = out, shape, layer.name
    g.nodes.append(g.helper.make_node("Identity", [walk.out_of[previous]], ["logits"], name="logits"))
    used = {name for node in g.nodes for name in node.input}  # e.g. NITI's input step when a float layer reads it
    g.initializers = [t for t in g.initializers if t.name in used]
    proto = _model_proto(g, trained, qdq, niti, walk.grids is not None)
    onnx.checker.check_model(proto)
    return proto


@dataclass
class _Walk:
    """What the walk over the layers keeps: the float (and stored) weights, NITI's rounding
    writer (None for float activations), each layer's output name and shape, for a
    flattened output (and what passes it on) the (H, W, C) shape it was flattened from, and
    an emulated recipe's grids (onnx_emulated.Grids; None for others)."""

    floats: dict
    state: dict
    rounding: object | None
    out_of: dict
    shape_of: dict
    flat_from: dict = field(default_factory=dict)
    grids: object | None = None


def _export_layer(g: _Graph, walk: _Walk, layer, reads: str) -> str:
    """Writes one layer's nodes reading layer `reads`' output (EXPORTERS, by the layer's
    kind); returns the name of its own."""
    x = walk.out_of[reads]
    if walk.rounding:  # a float input of an int8 layer rounded on its range first (mixed precision)
        x, reads = walk.rounding.enter(layer, x, reads)
    exporter = EXPORTERS.get(type(layer))
    if exporter is None:
        raise TypeError(f"{layer.name}: no ONNX exporter for a {type(layer).__name__} layer")
    out = exporter(g, walk, layer, x, reads)
    if walk.rounding and not isinstance(layer, (Conv2d, Linear, GlobalAvgPool, AvgPool2d, Add)):
        walk.rounding.keep(layer, reads)  # its output keeps its input's int8 step (the others set their own)
    return out


# ---------------------------------------------------------------- one exporter per layer kind
# Each takes (graph, walk, layer, its input's name, the layer it reads) and returns the name
# of the layer's output.


def _conv(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    name, out = layer.name, f"{layer.name}.out"
    to_oihw = lambda a: a.transpose(0, 3, 1, 2)
    p = layer.padding
    if walk.grids and walk.grids.scale == "mls":  # exact integer sums, scaled once
        out = _plus_bias(g, walk, layer, _mls_product(g, walk, layer, x, None), out, (1, -1, 1, 1))
    elif walk.grids and walk.grids.chunked(layer):
        x, _ = _product_operands(g, walk, layer, x, to_oihw)  # FP8's FP16 chunked sums
        sums = walk.grids.chunks.conv(layer, x, walk.grids.weight(name, walk.floats[f"{name}.w"])[0])
        out = _plus_bias(g, walk, layer, sums, out, (1, -1, 1, 1))
    else:
        x, w = _product_operands(g, walk, layer, x, to_oihw)
        g.node(
            "Conv",
            (x, w, *_bias(g, layer, walk.floats, walk.rounding)),
            out,
            name,
            kernel_shape=[layer.kernel] * 2,
            strides=[layer.stride] * 2,
            pads=[p] * 4,
            group=layer.groups,
            dilations=[layer.dilation] * 2,
        )
    out = _rounded_product(g, walk, layer, out, reads, (1, -1, 1, 1))
    if walk.grids:
        out = walk.grids.compensation(layer, out, conv=True)
    return out


def _linear(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    name, out = layer.name, f"{layer.name}.out"
    source_shape = walk.flat_from.get(reads)

    def to_onnx(a, s=source_shape):
        if s is None:
            return a
        h, w_, c = s  # engine columns (H, W, C) -> ONNX's (C, H, W)
        return a.reshape(a.shape[0], h, w_, c).transpose(0, 3, 1, 2).reshape(a.shape[0], -1)

    if walk.grids and walk.grids.scale == "mls":  # exact integer sums, scaled once
        columns = _engine_columns(to_onnx, walk.floats[f"{name}.w"].shape[1])
        out = _plus_bias(g, walk, layer, _mls_product(g, walk, layer, x, columns), out, (1, -1))
    elif walk.grids and walk.grids.chunked(layer):
        x, _ = _product_operands(g, walk, layer, x, to_onnx)  # FP8's FP16 chunked sums, in dsptrain's column order
        wq = walk.grids.weight(name, walk.floats[f"{name}.w"])[0]
        columns = _engine_columns(to_onnx, wq.shape[1])
        out = _plus_bias(g, walk, layer, walk.grids.chunks.linear(layer, x, wq, columns), out, (1, -1))
    else:
        x, w = _product_operands(g, walk, layer, x, to_onnx)
        g.node("Gemm", (x, w, *_bias(g, layer, walk.floats, walk.rounding)), out, name, transB=1)
    out = _rounded_product(g, walk, layer, out, reads, (1, -1))
    if walk.grids:
        out = walk.grids.compensation(layer, out, conv=False)
    return out


def _relu(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    out = g.node("Relu", (x,), f"{layer.name}.out", layer.name)
    if reads in walk.flat_from:
        walk.flat_from[layer.name] = walk.flat_from[reads]
    return out


def _pool_node(g: _Graph, op: str, layer, x: str, **attrs) -> str:
    """A square window's pooling node: the layer's kernel, stride and padding on both axes."""
    window = dict(kernel_shape=[layer.kernel] * 2, strides=[layer.stride] * 2, pads=[layer.padding] * 4)
    return g.node(op, (x,), f"{layer.name}.out", layer.name, **window, **attrs)


def _maxpool(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    return _pool_node(g, "MaxPool", layer, x, ceil_mode=int(layer.ceil_mode))


def _avgpool(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    out = _pool_node(g, "AveragePool", layer, x, count_include_pad=int(layer.count_include_pad))
    if walk.rounding and walk.rounding.is_int8(reads):  # NITI's windows: stride = kernel, a power of two
        out = walk.rounding.average(layer, out, reads, layer.kernel**2)
    return out


def _flatten(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    if len(walk.shape_of[reads]) != 3:
        return x
    walk.flat_from[layer.name] = walk.shape_of[reads]
    return g.node("Flatten", (x,), f"{layer.name}.out", layer.name, axis=1)


def _dropout(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    if reads in walk.flat_from:
        walk.flat_from[layer.name] = walk.flat_from[reads]
    return x  # inference: no node


def _batch_norm(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    if walk.grids:
        return walk.grids.batch_norm(layer, x, walk.floats)
    name = layer.name
    inputs = [g.const(f"{name}.{k}", walk.floats[f"{name}.{k}"]) for k in ("gamma", "beta", "mean", "var")]
    return g.node(
        "BatchNormalization", (x, *inputs), f"{name}.out", name, epsilon=layer.eps, momentum=1.0 - layer.momentum
    )


def _global_avg_pool(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    name, out = layer.name, f"{layer.name}.out"
    if layer.keep_dims:
        return g.node("GlobalAveragePool", (x,), out, name)
    pooled = g.node("GlobalAveragePool", (x,), f"{name}.pooled", name)
    g.node("Flatten", (pooled,), out, f"{name}.flatten", axis=1)
    if walk.rounding and walk.rounding.is_int8(reads):
        h, w_, _ = walk.shape_of[reads]
        out = walk.rounding.average(layer, out, reads, h * w_)
    return out


def _add(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    if walk.rounding and walk.rounding.is_int8(reads) and walk.rounding.is_int8(layer.skip_from):
        return walk.rounding.add(layer, x, reads, walk.out_of[layer.skip_from], layer.skip_from)
    return g.node("Add", (x, walk.out_of[layer.skip_from]), f"{layer.name}.out", layer.name)


def _branch_layer(g: _Graph, walk: _Walk, layer, x: str, reads: str) -> str:
    """The mobile CNNs' activations, Mul, Concat, Slice and channel shuffle (onnx_export_branches.py)."""
    x = walk.out_of[layer.inputs[0]] if hasattr(layer, "inputs") else x
    out = f"{layer.name}.out"
    branches.export(g, layer, x, walk.out_of, walk.shape_of[reads], out)
    return out


EXPORTERS = {
    Conv2d: _conv,
    Linear: _linear,
    ReLU: _relu,
    MaxPool2d: _maxpool,
    AvgPool2d: _avgpool,
    Flatten: _flatten,
    Dropout: _dropout,
    BatchNorm2d: _batch_norm,
    GlobalAvgPool: _global_avg_pool,
    Add: _add,
    **dict.fromkeys(branches.LAYERS, _branch_layer),
}


def _product_operands(g: _Graph, walk: _Walk, layer, x: str, to_onnx) -> tuple[str, str]:
    """A conv's or linear layer's (input, weight) in the graph: as they are, or on an emulated
    recipe's grids (the input rounded on its batch's range, the weight as the recipe quantizes it)."""
    name = layer.name
    if walk.grids:
        w = walk.floats[f"{name}.w"]
        q, step = walk.grids.weight(name, w)
        weight = (
            g.const(f"{name}.weight", to_onnx(q).astype(np.float32))
            if step is None  # FP8's small floats, MLS's group-scaled values: float32 in either form
            else g.grid_weight(f"{name}.weight", to_onnx(q), step)
        )
        return walk.grids.activation(name, x), weight
    return x, g.weight(f"{name}.weight", to_onnx(walk.floats[f"{name}.w"]), _int8_of(walk.state[f"{name}.w"], to_onnx))


def _mls_product(g: _Graph, walk: _Walk, layer, x: str, columns) -> str:
    """MLS's layer product (onnx_mls.py): its input on the recipe's grid, summed exactly."""
    from . import onnx_mls

    w = walk.floats[f"{layer.name}.w"]
    conv = isinstance(layer, Conv2d)
    channels = w.shape[-1] * layer.groups if conv else w.shape[1]
    aligned, scale = onnx_mls.activation(g, layer.name, x, channels, columns)
    return onnx_mls.product(g, layer, aligned, scale, w, conv)


def _engine_columns(to_onnx, k: int) -> np.ndarray | None:
    """For each of dsptrain's K columns of a linear layer's input, the ONNX column holding it
    (None when the orders agree)."""
    onnx_to_engine = to_onnx(np.arange(k)[None])[0]
    return None if np.array_equal(onnx_to_engine, np.arange(k)) else np.argsort(onnx_to_engine)


def _model_proto(g: _Graph, trained, qdq: bool, niti: bool, grids: bool = False):
    """The graph's nodes and initializers as a model: the input and logits, opset and the
    properties that say what the file holds."""
    onnx, model = g.onnx, trained.model
    h, w, c = model.input_shape
    graph = g.helper.make_graph(
        g.nodes,
        model.name,
        [g.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", c, h, w])],
        [g.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", model.num_classes])],
        g.initializers,
    )
    proto = g.helper.make_model(
        graph,
        opset_imports=[g.helper.make_opsetid("", OPSET)],
        producer_name="dsptrain",
        doc_string=f"input: {INPUT_NOTE}",
    )
    proto.ir_version = 8  # readable by ONNX Runtime releases from 1.14 on
    props = {
        "dsptrain.input": INPUT_NOTE,
        "dsptrain.recipe": trained.recipe,
        "dsptrain.weights": (
            f"int8 QDQ, {trained.recipe}'s scales"
            if qdq and grids
            else "int8 QDQ, power-of-two scales"
            if qdq
            else f"float32 on {trained.recipe}'s {'FP8/FP16' if trained.recipe == 'fp8' else 'int8'} grid"
            if grids
            else "float32"
        ),
        "dsptrain.activations": (
            "NITI int8, per-batch power-of-two step"
            if niti
            else "FP8 1-5-2 at each product (FP16 first and last)"
            if grids and trained.recipe == "fp8"
            else f"{trained.recipe} int8 at each product, per-batch step"
            if grids
            else "float32"
        ),
    }
    if trained.meta.get("classes"):  # an image folder's class names, label by label
        props["dsptrain.classes"] = json.dumps(trained.meta["classes"])
    g.helper.set_model_props(proto, props)
    return proto


def write_onnx(trained, out, qdq: bool = False, niti: bool | None = None) -> str:
    from .onnx_niti import is_niti

    niti = is_niti(trained) if niti is None else niti
    proto = build_onnx(trained, qdq, niti)
    data = proto.SerializeToString()
    atomic_write(Path(out), lambda f: f.write(data))
    form = ("QDQ " if qdq else "") + ("NITI-rounding " if niti else "")
    return (
        f"wrote {out}: {trained.model.name} ({trained.recipe}) as {form}ONNX, opset {OPSET}, "
        f"{len(proto.graph.node)} nodes, {len(data)} bytes; input {INPUT_NOTE}"
    )
