"""Fitting a budget: the cheapest (micro-batch, recompute plan) whose peak fits, by a cost model.

Micro-batching here runs every row-local op on slices of the batch, one op at a time
over all slices (not one slice through the whole network): NITI's shifts come from the
range of a whole tensor, so each op needs every slice before the next op may start.
A requantized product runs its slices with their own range estimate, takes the largest
shift (the range of the whole batch: the shift is monotone in max|acc|), and re-runs
only the slices whose own shift was smaller with that common shift -- the product is
recomputed, never stored. Weight gradients are summed over slices in int32 (int64
where the whole batch could overflow), then one update. Slices shrink what an op
allocates itself (accumulators, fresh results: `memory.op_workspace`) and the scratch
its backend keeps (`kept_scratch`); recomputation (recompute.py) shrinks the activations
the arena holds. Both are bit-identical to the
plain step for integer recipes.

Backend scratch (Backend.scratch_bytes: im2col matrices, packed panels, per-thread
accumulators of the cpu kernels) is kept: each buffer grows to its largest request and
stays allocated, so an option's peak adds, per buffer, its largest size over the step at
that micro-batch (`kept_scratch`), for the whole step. The kernels never shrink these
buffers: when the trainer adopts an option that keeps some buffer smaller than a plan
before it grew it, it asks the backends to release their scratch first (`must_release`; the Planner
calls Backend.release_scratch, plan.Planner.adopt_scratch), so a moving budget holds after it shrinks.

Cost model, in MAC-equivalents:
    sum over ops of MACs (x (1 + RERUN * (1 - 1/slices)) for a sliced op taking a range:
    the slices below the common shift re-run)
  + per op call (one per slice): CALL_MACS + WEIGHT_MACS_PER_BYTE per byte of the operands
    every slice touches whole (weights read and packed, weight gradients written and summed)
  + COPY_MACS_PER_BYTE per byte copied into the arena.
The per-byte constants were fitted to steps of VGG-11 (batch 128) and ResNet-18 (batch
20) on the cpu backend (2 cores) at micro-batches from the whole batch down to 1: one
row per slice costs 2.9x (ResNet-18) to 9.7x (VGG-11) the unsliced step, mostly in
the weights each slice streams again. RERUN is assumed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..graph import TrainGraph
from .budget import BudgetError, format_size
from .planner import MemoryPlan, plain_peak, value_bytes
from .recompute import CALL_MACS, variants

RERUN = 0.5  # share of range-taking ops whose slices' shifts differ (assumed)
COPY_MACS_PER_BYTE = 8  # a byte copied (~10 GB/s) vs. one int8 MAC (~80 GMAC/s)
WEIGHT_MACS_PER_BYTE = 32  # a weight or weight-gradient byte touched by one call (fitted, see above)


#: (op, rows) -> {buffer name: bytes} the backend running `op` keeps (Plan.scratch_bytes)
ScratchFn = Callable[[object, int], dict]


def kept_scratch(graph: TrainGraph, scratch: ScratchFn | None, micro_batch: int) -> dict[str, int]:
    """The backends' own scratch over one step at `micro_batch`, by buffer: a buffer grows
    to its largest request and is kept (backends/base.py scratch_bytes), so each counts
    with its largest size over all ops, for the whole step. Ops run again to recompute
    activations ask for the same sizes, so the graph's ops are enough."""
    kept: dict[str, int] = {}
    if scratch is None:
        return kept
    for op in graph.ops:
        if op.is_alias():
            continue
        rows = micro_batch if graph.row_local(op) else graph.batch
        for name, nbytes in scratch(op, rows).items():
            kept[name] = max(kept.get(name, 0), int(nbytes))
    return kept


@dataclass(frozen=True)
class Option:
    """One way to run the step: a memory plan (schedule + arena) at a micro-batch size.
    `peak` is the memory plan's peak plus `scratch`, the backends' kept scratch."""

    memory: MemoryPlan
    micro_batch: int
    peak: int
    cost: float
    scratch: int = 0
    scratch_buffers: tuple = ()  # (buffer, bytes) pairs summing to `scratch`

    @property
    def label(self) -> str:
        return f"micro-batch {self.micro_batch}, {self.memory.label}"

    @property
    def workspace(self) -> int:
        """The largest op workspace (planner.op_workspace) at this micro-batch: what the step
        allocates beside its arena and kept scratch at any one op, the array pool's size (pool.py)."""
        return self.peak - self.scratch - self.memory.arena_bytes


def whole_operand_bytes(graph: TrainGraph, op) -> int:
    """Bytes every call of `op` touches whatever its slice: operands without a row per
    sample (weights), and outputs without one (weight gradients: written, then summed)."""
    read = sum(graph.tensors[t].nbytes for t in op.inputs if not graph.is_row_shaped(t))
    written = sum(value_bytes(graph, op, t) for t in op.outputs if not graph.is_row_shaped(t))
    return read + 2 * written


def step_cost(memory: MemoryPlan, micro_batch: int) -> float:
    graph, batch = memory.graph, memory.graph.batch
    total = 0.0
    for step in memory.schedule:
        op = step.op
        sliced = graph.row_local(op) and micro_batch < batch and not op.is_alias()
        calls = math.ceil(batch / micro_batch) if sliced else 1
        # a slice re-runs when its own shift is below the common one: never with one slice
        rerun = RERUN * (1 - 1 / calls) if sliced and op.takes_range() and not step.recompute else 0.0
        per_call = CALL_MACS + (WEIGHT_MACS_PER_BYTE * whole_operand_bytes(graph, op) if sliced else 0)
        total += op.macs * (1 + rerun) + calls * (1 + rerun) * per_call
        if not op.is_alias():
            total += COPY_MACS_PER_BYTE * sum(graph.tensors[t].nbytes for t in op.outputs)
    return total


def frontier(options: list[Option]) -> list[Option]:
    """Of `options` in cost order, those that beat every cheaper one on peak: the ones a
    budget can make the choice (the others are never chosen)."""
    out, lowest = [], None
    for option in options:
        if lowest is None or option.peak < lowest:
            out.append(option)
            lowest = option.peak
    return out


def micro_batches(batch: int) -> list[int]:
    """batch, batch/2, batch/4, ... 1 (rounded up): each halves the op workspace."""
    sizes, m = [], batch
    while True:
        sizes.append(m)
        if m == 1:
            return sizes
        m = math.ceil(m / 2)


class Fitter:
    """Every option for one graph, evaluated once; `choose(budget)` is then a lookup, so a
    budget that moves between steps changes the plan without planning again."""

    def __init__(
        self,
        graph: TrainGraph,
        micro_batch: int | None = None,
        recompute: str = "auto",
        scratch: ScratchFn | None = None,
    ):
        """`scratch`: (op, rows) -> the scratch its backend keeps, by buffer (Plan.scratch_bytes);
        None counts none (no backends known, e.g. `dsptrain plan`)."""
        self.graph, self.forced_micro_batch, self.recompute = graph, micro_batch, recompute
        self.scratch = scratch
        self._options: list[Option] | None = None

    @property
    def options(self) -> list[Option]:
        if self._options is None:
            batch = self.graph.batch
            sizes = [min(self.forced_micro_batch, batch)] if self.forced_micro_batch else micro_batches(batch)
            kept = {m: kept_scratch(self.graph, self.scratch, m) for m in sizes}
            found = []
            for memory in variants(self.graph, self.recompute):
                for m in sizes:
                    total = sum(kept[m].values())
                    found.append(
                        Option(
                            memory,
                            m,
                            memory.peak(m) + total,
                            step_cost(memory, m),
                            total,
                            tuple(sorted(kept[m].items())),
                        )
                    )
            self._options = sorted(found, key=lambda o: (o.cost, o.peak))
        return self._options

    def plain_peak(self) -> int:
        """The peak without this layer (memory.plain_peak), plus the backends' kept scratch
        at the whole batch."""
        return plain_peak(self.graph) + sum(kept_scratch(self.graph, self.scratch, self.graph.batch).values())

    def smallest(self) -> Option:
        return min(self.options, key=lambda o: (o.peak, o.cost))

    def choose(self, budget: int | None) -> Option:
        """The cheapest option whose peak fits `budget` (None: the cheapest of all)."""
        for option in self.options:
            if budget is None or option.peak <= budget:
                return option
        least = self.smallest()
        raise BudgetError(
            f"memory budget {format_size(budget)} ({budget} bytes) is too small for batch {self.graph.batch} "
            f"of this model with {self.graph.recipe}: the smallest feasible budget is {format_size(least.peak)} "
            f"({least.peak} bytes, {least.label}); lower the batch size or raise the budget"
        )


def must_release(held: dict[str, int], option: Option) -> bool:
    """Before a step runs `option`: `held` is what the backends' kept buffers may hold (the
    largest size each was planned at since the last release). Does `option` keep one of
    them smaller (then every backend releases its scratch first, so the buffers regrow only
    to this option's sizes: plan.Planner.adopt_scratch)?"""
    planned = dict(option.scratch_buffers)
    return any(nbytes > planned.get(name, 0) for name, nbytes in held.items())


def held_after(held: dict[str, int], option: Option) -> dict[str, int]:
    """What the kept buffers may hold after a step of `option` that started from `held`."""
    planned = dict(option.scratch_buffers)
    return {name: max(held.get(name, 0), planned.get(name, 0)) for name in {*held, *planned}}
