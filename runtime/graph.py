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
