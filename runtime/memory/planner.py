"""Static memory planning: every tensor's size and lifetime, and its offset in one arena.

Input is a TrainGraph and a *schedule*: the ops one step runs, in order, where an op may
appear twice when the recompute planner (recompute.py) re-runs it to rebuild a dropped
activation. A tensor written twice is two *values* with separate lifetimes.

- Lifetime of a value: from the step that writes it to the last step that reads it before
  it is written again. Weights and optimizer state live the whole step (position -1 to n);
  the input and labels are written before the first op; the logits live to the end
  because the trainer reads them after the step.
- Buffers: values that share memory. A reshape's output aliases its input (a view); an
  element-wise op without a range estimate (ReLU, dropout, their backward) writes over an
  input of the same size that dies at that op. The executor copies results into the arena
  after the op has read its inputs, so both are safe, micro-batched or not. (An op that
  takes a range never does: its slices may re-run with the common shift, re-reading
  rows an in-place write would have overwritten.)
- Offsets: greedy by size (Pisarchyk & Lee, "Efficient memory management for deep neural
  net inference", 2020; the planner TFLite uses): take buffers largest first and put each
  in the lowest gap, among the already placed buffers whose lifetimes overlap it, that
  holds it. The arena size is the largest end offset; `live_peak` (the most bytes alive
  at once) is the lower bound any offset assignment can reach.
- Op workspace: what an op allocates itself, outside the arena. The int32 accumulators
  of a product live inside the backend hook (conv2d_requant_s8 and friends), and every
  hook returns a fresh array that the executor then copies into its arena slot. Both are
  counted from shapes per op (and per micro-batch: see `op_workspace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import numerics
from ..graph import Op, TrainGraph

ALIGN = 128  # HVX vector width: every arena offset is a multiple of it
PERSISTENT_ROLES = ("weight", "state")
BEFORE_STEP_ROLES = ("input", "label", "weight", "state")
# Workspace of the RANGE_HOOKS ops (graph.py): they run in NumPy (ops_ref: no native
# kernel), whose int64 temporaries in numerics.shift_round are their workspace. Bytes per
# element, measured with tracemalloc (add: 59 round, 67 sto, 75 psto per output element;
# pool: 4.1 per input element), rounded up: (which tensor's elements, bytes per element).
RANGE_HOOK_WORKSPACE = {"add_align_s8": ("output", 80), "avgpool_global_s8": ("input", 5)}

# The prepared input (Step.train: algorithm.prepare_input) is a fresh array copied into its
# arena slot when the step starts, and its preparation makes temporaries: at their peak the
# prepared element plus 4 bytes (tracemalloc: 5 bytes an element for NITI's int8 through
# int16 steps, 8 for the float recipes' float32). Counted like an op's workspace, before
# the first op.
INPUT_PREPARE_EXTRA_BYTES = 4

CATEGORIES = {
    "weight": "weights",
    "state": "optimizer state",
    "input": "inputs and labels",
    "label": "inputs and labels",
    "activation": "activations",
    "saved": "activations",
    "quantized_weight": "weights",
    "error": "errors",
    "grad": "weight gradients",
    "accum": "weight gradients",
}


@dataclass(frozen=True)
class Step:
    """One op of a schedule; `recompute` marks a re-run that rebuilds dropped activations."""

    op: Op
    recompute: bool = False


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def reduction_depth(graph: TrainGraph, op: Op, name: str) -> int:
    """Terms summed into each element of `name`: the op's MACs over the element count."""
    elements = int(np.prod(graph.tensors[name].shape))
    return max(op.macs // max(elements, 1), 1)


def value_dtype(graph: TrainGraph, op: Op | None, name: str) -> np.dtype:
    """The dtype a tensor really has: an integer weight gradient is int32, or int64 when
    its reduction over the batch could overflow int32 (numerics.acc_dtype)."""
    spec = graph.tensors[name]
    dtype = np.dtype(spec.dtype)
    if op is not None and spec.role in ("grad", "accum") and dtype.kind == "i":
        return numerics.acc_dtype(reduction_depth(graph, op, name))
    return dtype


def value_bytes(graph: TrainGraph, op: Op | None, name: str) -> int:
    return int(np.prod(graph.tensors[name].shape)) * value_dtype(graph, op, name).itemsize


def op_workspace(graph: TrainGraph, op: Op, rows: int) -> int:
    """Bytes `op` allocates outside the arena when it runs on `rows` rows of the batch:
    the fresh results the backend returns (copied into the arena afterwards) and, for a
    requantized product, its int32/int64 accumulator; for a graph.RANGE_HOOKS op, its NumPy
    temporaries. A reshape allocates nothing."""
    if op.is_alias():
        return 0
    batch = graph.batch
    rows = rows if graph.row_local(op) else batch
    total = 0
    for name in op.outputs:
        spec = graph.tensors[name]
        if graph.is_row_shaped(name):
            total += graph.tensors[name].nbytes * rows // batch
        elif spec.role in ("grad", "accum") and np.dtype(spec.dtype).kind == "i":
            depth = reduction_depth(graph, op, name) * rows // batch
            total += int(np.prod(spec.shape)) * numerics.acc_dtype(max(depth, 1)).itemsize
        else:
            total += value_bytes(graph, op, name)
    if op.is_requant():
        out = op.outputs[0]
        elements = int(np.prod(graph.tensors[out].shape)) * rows // batch
        total += elements * numerics.acc_dtype(reduction_depth(graph, op, out)).itemsize
    elif op.range_hook() is not None:
        which, per_element = RANGE_HOOK_WORKSPACE[op.range_hook()]
        name = op.outputs[0] if which == "output" else op.inputs[0]
        total += int(np.prod(graph.tensors[name].shape)) * rows // batch * per_element
    if "workspace" in op.attrs:  # what the recipe's op allocates besides (algorithms/_products.product_workspace)
        per_row, fixed = op.attrs["workspace"]
        total += per_row * rows + fixed
    return total


def input_workspace(graph: TrainGraph) -> int:
    """Bytes the step's input preparation allocates beside the arena (its result before the
    copy into its slot, and its temporaries): the whole batch, before any op runs."""
    spec = graph.tensors.get("input")
    if spec is None:
        return 0
    return int(np.prod(spec.shape)) * (np.dtype(spec.dtype).itemsize + INPUT_PREPARE_EXTRA_BYTES)


@dataclass
class Buffer:
    """Memory shared by one or more values whose lifetimes do not overlap."""

    index: int
    nbytes: int
    start: int
    end: int
    values: list = field(default_factory=list)  # (tensor, version), in write order
    offset: int = -1

    def overlaps(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan:
    """Where every value of one step lives, and how much memory the step needs."""

    graph: TrainGraph
    schedule: list[Step]
    buffers: list[Buffer]
    initial: dict  # tensor -> Buffer, filled before the first op
    writes: list[dict]  # per step: tensor -> Buffer its output goes to
    frees: list[list[str]]  # per step: tensors whose value dies after it
    dtypes: dict  # tensor -> planned dtype (weight gradients: int32 or int64)
    arena_bytes: int
    live: list[int]  # per step: bytes of buffers alive
    label: str = "keep all"  # how activations were kept (recompute.py sets it)
    kept: frozenset = frozenset()

    @property
    def live_peak(self) -> int:
        return max(self.live, default=0)

    @property
    def recomputed_ops(self) -> int:
        return sum(step.recompute for step in self.schedule)

    def workspace(self, rows: int) -> list[int]:
        return [op_workspace(self.graph, step.op, rows) for step in self.schedule]

    def peak(self, rows: int) -> int:
        """The step's peak at micro-batch `rows`: the arena plus the largest op workspace (or
        the input's preparation, input_workspace, when that is larger)."""
        return self.arena_bytes + max(*self.workspace(rows), input_workspace(self.graph), 0)

    def breakdown(self, rows: int) -> dict:
        """Bytes by kind at the step where arena-live bytes plus workspace is largest;
        what the arena holds beyond the live bytes is its offset slack."""
        work = self.workspace(rows)
        at = max(range(len(work)), key=lambda i: self.live[i] + work[i]) if work else 0
        parts: dict[str, int] = {}
        for buf in self.buffers:
            if buf.start <= at <= buf.end:
                name = next((t for t, v in reversed(buf.values) if self._start[(t, v)] <= at), buf.values[0][0])
                kind = CATEGORIES.get(self.graph.tensors[name].role, "other")
                parts[kind] = parts.get(kind, 0) + buf.nbytes
        parts["op workspace (accumulators, NumPy temporaries, results before the copy)"] = work[at] if work else 0
        parts["arena slack (offsets above the live bytes)"] = self.arena_bytes - (self.live[at] if work else 0)
        parts["at op"] = self.schedule[at].op.name if work else ""
        return parts

    _start: dict = field(default_factory=dict, repr=False)


def plan_memory(
    graph: TrainGraph, schedule: list[Step], label: str = "keep all", kept: frozenset = frozenset()
) -> MemoryPlan:
    """Lifetimes, buffers and arena offsets for running `schedule` on `graph`."""
    n = len(schedule)
    life = _lifetimes(graph, schedule)
    start, end = life.start, life.end
    # A value no later step reads (an output a re-run op makes besides the one asked for:
    # Octo's product_comp rebuilt for its raw product) takes no slot: the runner drops it
    # after the op, and op_workspace already counts it as a fresh result.
    unread = {
        v
        for v in start
        if start[v] >= 0
        and end[v] == start[v]
        and v[0] != graph.logits
        and graph.tensors[v[0]].role not in PERSISTENT_ROLES
    }
    buffers, owner = _share_buffers(graph, schedule, life, unread)
    _assign_offsets(buffers)
    arena = max((b.offset + b.nbytes for b in buffers), default=0)
    live = [sum(b.nbytes for b in buffers if b.start <= i <= b.end) for i in range(n)]
    writes = [{v[0]: owner[v] for v in written if v in owner} for written in life.writes]
    frees = [[] for _ in range(n)]
    for value, last in end.items():
        if 0 <= last < n and graph.tensors[value[0]].role not in PERSISTENT_ROLES:
            frees[last].append(value[0])
    initial = {v[0]: owner[v] for v in start if start[v] == -1}
    plan = MemoryPlan(graph, list(schedule), buffers, initial, writes, frees, life.dtypes, arena, live, label, kept)
    plan._start = dict(start)
    return plan


@dataclass
class _Lifetimes:
    """The values (tensor, version) of a schedule: the step that writes each (start; -1 for
    what exists before the step) and the last that reads it (end; past the schedule for
    weights and the logits), each tensor's last version and dtype, and what each step writes."""

    start: dict = field(default_factory=dict)
    end: dict = field(default_factory=dict)
    version: dict = field(default_factory=dict)
    dtypes: dict = field(default_factory=dict)
    writes: list = field(default_factory=list)


def _lifetimes(graph: TrainGraph, schedule: list[Step]) -> _Lifetimes:
    life = _Lifetimes()
    start, end, version, dtypes = life.start, life.end, life.version, life.dtypes
    for name, spec in graph.tensors.items():
        if spec.role in BEFORE_STEP_ROLES:
            version[name] = 0
            start[(name, 0)] = end[(name, 0)] = -1
            dtypes[name] = np.dtype(spec.dtype)
    for i, step in enumerate(schedule):
        op = step.op
        for t in op.inputs:
            end[(t, version[t])] = i
        written = []
        for t in op.outputs:
            if graph.tensors[t].role in PERSISTENT_ROLES:
                written.append((t, 0))  # an update writes the weight in place
                continue
            version[t] = version.get(t, -1) + 1
            value = (t, version[t])
            start[value] = end[value] = i
            dtypes.setdefault(t, value_dtype(graph, op, t))
            written.append(value)
        life.writes.append(written)
    for value in start:
        name = value[0]
        if graph.tensors[name].role in PERSISTENT_ROLES or name == graph.logits:
            end[value] = len(schedule) if value[1] == version[name] else end[value]
    return life


def _share_buffers(graph: TrainGraph, schedule: list[Step], life: _Lifetimes, unread: set) -> tuple[list[Buffer], dict]:
    """Buffers: a new one per value, except aliases and in-place element-wise results (which
    join their input's buffer when it dies at that step). Returns them and each value's."""
    start, end = life.start, life.end
    buffers: list[Buffer] = []
    owner: dict = {}

    def new_buffer(value, nbytes):
        buf = Buffer(len(buffers), nbytes, start[value], end[value], [value])
        buffers.append(buf)
        owner[value] = buf

    def join(buf, value):
        buf.values.append(value)
        buf.start, buf.end = min(buf.start, start[value]), max(buf.end, end[value])
        owner[value] = buf

    for value in [v for v in start if start[v] == -1]:
        new_buffer(value, graph.tensors[value[0]].nbytes)
    current = {t: (t, 0) for t in life.version if (t, 0) in owner}
    for i, step in enumerate(schedule):
        op = step.op
        inputs = [current[t] for t in op.inputs]
        claimed = set()
        for value in life.writes[i]:
            t = value[0]
            if value in owner or value in unread:  # a weight updated in place; a value dropped
                continue
            nbytes = value_bytes(graph, op, t)
            host = None
            if op.is_alias():
                host = owner[inputs[0]]
            elif not op.takes_range() and graph.row_local(op) and graph.is_row_shaped(t):
                for v in inputs:
                    buf = owner[v]
                    if (
                        buf.index not in claimed
                        and buf.end == i
                        and buf.nbytes == nbytes
                        and graph.tensors[v[0]].role not in BEFORE_STEP_ROLES
                        and graph.tensors[v[0]].shape[0] == graph.tensors[t].shape[0]
                    ):
                        host = buf
                        break
            if host is None:
                new_buffer(value, nbytes)
            else:
                claimed.add(host.index)
                join(host, value)
            current[t] = value
    return buffers, owner


def _assign_offsets(buffers: list[Buffer]) -> None:
    """Greedy by size (Pisarchyk & Lee 2020): largest first, each into the lowest gap
    left by the placed buffers that are alive at the same time."""
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.start, b.index)):
        size = _align(buf.nbytes)
        best, cursor = None, 0
        for other in sorted((p for p in placed if p.overlaps(buf)), key=lambda p: p.offset):
            if other.offset - cursor >= size:
                best = cursor
                break
            cursor = max(cursor, other.offset + _align(other.nbytes))
        buf.offset = cursor if best is None else best
        placed.append(buf)


def plain_peak(graph: TrainGraph) -> int:
    """The step's peak were every tensor kept to the end of the step (as the executor's
    environment did before a step dropped each tensor after its last op, execute/bound.py),
    the trainer still holding the old weights and state, each product with its full-batch
    accumulator: the bound the memory layer's plans are measured against."""
    total = sum(value_bytes(graph, None, t) for t in graph.tensors)
    for op in graph.ops:
        for t in op.outputs:
            if graph.tensors[t].role in ("grad", "accum"):
                total += value_bytes(graph, op, t) - graph.tensors[t].nbytes
    total += sum(spec.nbytes for spec in graph.tensors.values() if spec.role in PERSISTENT_ROLES)
    accumulators = [
        op_workspace(graph, op, graph.batch) - sum(value_bytes(graph, op, t) for t in op.outputs)
        for op in graph.ops
        if op.takes_range() or "workspace" in op.attrs
    ]
    return total + max(accumulators, default=0)
