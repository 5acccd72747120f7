"""Op records and `lower()`: a model plus a recipe becomes a TrainGraph.

A TrainGraph is a flat list of ops in execution order (forward, loss, backward,
update). Each op names the tensors it reads and writes, the backend hooks it needs
(so placement can ask `supports`), and an `id` that keys its random bits. What an op
*does* lives with its recipe in `algorithms/<recipe>.py`, looked up by `op.kind`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("forward", "loss", "backward", "update")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of the graph: its shape for the planned batch, dtype and role."""

    name: str
    shape: tuple[int, ...]
    dtype: str          # numpy dtype name: int8, int32, float32, ...
    role: str           # input | label | weight | state | activation | saved | error | grad | accum

    @property
    def nbytes(self) -> int:
        import numpy as np

        n = 1
        for d in self.shape:
            n *= d
        return n * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Op:
    """One step of the training graph."""

    id: int                       # stable within a graph; keys the op's random bits
    name: str                     # e.g. "conv1.fwd", "fc3.bwd_weight", "loss.grad"
    kind: str                     # e.g. "niti.conv_fwd": the function that runs it
    layer: str                    # the model layer it belongs to ("loss" for the loss)
    phase: str                    # one of PHASES
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    hooks: tuple[str, ...]        # backend hooks it calls
    attrs: dict = field(default_factory=dict, compare=False, hash=False)
    macs: int = 0                 # multiply-accumulates per step at the planned batch

    def __repr__(self) -> str:
        return f"Op({self.name}: {self.kind})"


@dataclass
class TrainGraph:
    """Everything one training step runs, in order, and every tensor it touches."""

    recipe: str
    batch: int
    ops: list[Op]
    tensors: dict[str, TensorSpec]
    params: list[str]             # names of the weight tensors, in layer order
    logits: str                   # the tensor holding the model output
    eval_ops: list[Op] = field(default_factory=list)  # forward-only ops for evaluation

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)


class GraphBuilder:
    """Collects ops and tensors while a recipe lowers a model."""

    def __init__(self, recipe, batch: int):
        self.recipe, self.batch = recipe, batch
        self.ops: list[Op] = []
        self.tensors: dict[str, TensorSpec] = {}
        self.params: list[str] = []
        self.layer_io: dict[str, tuple[str, str]] = {}   # layer -> (input tensor, output tensor)

    def tensor(self, name, shape, dtype, role) -> str:
        self.tensors[name] = TensorSpec(name, tuple(int(d) for d in shape), str(dtype), role)
        return name

    def param(self, name, shape, dtype) -> str:
        self.params.append(name)
        return self.tensor(name, shape, dtype, "weight")

    def find(self, name: str) -> Op:
        return next(op for op in self.ops if op.name == name)

    def op(self, name, kind, layer, phase, inputs, outputs, hooks=(), macs=0, **attrs) -> Op:
        op = Op(len(self.ops), name, kind, layer, phase, tuple(inputs), tuple(outputs),
                tuple(hooks), attrs, int(macs))
        self.ops.append(op)
        return op


def lower(model, recipe, batch: int, training: bool = True) -> TrainGraph:
    """Lower `model` under `recipe` for `batch` samples: forward, loss, backward, update.

    The walk is shared; the recipe module supplies `forward(b, layer, x, shape)`,
    `loss(b, logits, labels)` and `backward(b, layer, err, needs_input_error)`.
    With `training=False` only the forward ops are emitted (evaluation).
    """
    from .algorithms import algorithm_module

    algorithm = algorithm_module(recipe.module)
    algorithm.check_model(model, recipe)
    b = GraphBuilder(recipe, batch)
    x = b.tensor("input", (batch, *model.input_shape), algorithm.ACTIVATION_DTYPE, "input")
    for layer, shape in zip(model.layers, model.shapes()):
        out = algorithm.forward(b, layer, x, (batch, *shape))
        b.layer_io[layer.name] = (x, out)
        x = out
    logits = x
    forward_ops = list(b.ops)
    if training:
        labels = b.tensor("labels", (batch,), "int64", "label")
        err = algorithm.loss(b, logits, labels)
        parametric = [i for i, layer in enumerate(model.layers) if hasattr(layer, "weight_shape")]
        first = parametric[0] if parametric else len(model.layers)
        for index in range(len(model.layers) - 1, -1, -1):
            if index < first:
                break
            err = algorithm.backward(b, model.layers[index], err, needs_input_error=index > first)
    graph = TrainGraph(recipe.name, batch, b.ops if training else forward_ops, b.tensors,
                       b.params, logits, eval_ops=forward_ops)
    return graph
