"""Recomputation: drop activations the backward pass needs, rebuild them just before use.

A *candidate* is a forward tensor read after the forward pass (a ReLU output, a max-pool
argmax, a layer input read by the weight gradient). A plan keeps some candidates and
drops the rest after their last forward read; before the first backward op that needs a
dropped tensor, the schedule re-runs the forward ops that produce it, back to the
nearest kept tensor. The re-run uses the shifts the forward pass recorded
(StepContext.shifts) and the same random keys, so it rebuilds the tensor bit for bit.

Three ways to choose what to keep:
- `chen_sqrt_keep`: every ceil(sqrt(n))-th candidate, recomputing one segment at a
  time (Chen et al., "Training deep nets with sublinear memory cost", 2016);
- `evictions`: from keep-all, repeatedly drop the candidate, alive where the plan
  peaks, with the lowest recompute cost per byte and per step it sits idle -- DTR's
  score c / (m * s) (Kirisame et al., "Dynamic tensor rematerialization", ICLR 2021)
  applied ahead of time, as Melon does progressively under a budget (Wang et al.,
  MobiSys 2022). Each eviction is one more plan to choose from;
- keep nothing and rebuild only the tensor asked for (`materialize=False`): the least
  memory, at quadratic recompute cost (Chen et al.'s O(1)-memory end point).
"""

from __future__ import annotations

import math

from ..errors import DsptrainError
from ..graph import TrainGraph
from .planner import MemoryPlan, Step, plan_memory

# One op call in MAC-equivalents: 18-33 us per call measured on LeNet-5 steps of 8 rows
# (cpu backend, 2 cores), at the ~50-80 GMAC/s the cpu kernels reach on VGG-11/ResNet-18.
CALL_MACS = 1_000_000


class PlanError(DsptrainError):
    """The planner built a schedule that would read stale data (an internal bug)."""


def _forward(graph: TrainGraph):
    return [op for op in graph.ops if op.phase == "forward"]


def candidates(graph: TrainGraph) -> list[str]:
    """Forward tensors read by backward or update ops, in the order the forward writes them."""
    later = {t for op in graph.ops if op.phase in ("backward", "update") for t in op.inputs}
    return [t for op in _forward(graph) if not op.updates_state() for t in op.outputs if t in later]


def build_schedule(graph: TrainGraph, keep: set, materialize: bool = True) -> list[Step]:
    """Forward ops, then the rest with recompute steps inserted where a dropped tensor is read.

    `materialize`: a recompute keeps every candidate it rebuilds until its backward use
    (segment-wise, Chen); without it only the asked-for tensor is kept, and the
    intermediates of the chain die at once (least memory, more re-runs)."""
    fwd = _forward(graph)
    producer = {t: op for op in fwd for t in op.outputs}
    loss_reads = {t for op in graph.ops if op.phase == "loss" for t in op.inputs}
    cands = set(candidates(graph))
    # An op that updates state in place (batch norm's running statistics) must run once per
    # step: its outputs are always kept, so no rebuild chain reaches it.
    stateful = {t for op in fwd if op.updates_state() for t in op.outputs}
    always = (loss_reads & set(producer)) | stateful
    present = (set(keep) & cands) | always
    schedule = [Step(op) for op in fwd]
    updated: set[str] = set()

    def rebuild(t):
        op = producer[t]
        for u in op.inputs:
            if u in producer and u not in present:
                rebuild(u)
        stale = updated & set(op.inputs)
        if stale:
            raise PlanError(f"recomputing {op.name} would read {', '.join(sorted(stale))} after its update")
        schedule.append(Step(op, recompute=True))
        if materialize:
            present.update(x for x in op.outputs if x in cands)
        else:
            present.add(t)

    def drop_chain_intermediates():
        if not materialize:  # the next request rebuilds from a kept tensor again
            present.intersection_update((set(keep) & cands) | always | asked)

    asked: set[str] = set()
    for op in graph.ops:
        if op.phase == "forward":
            continue
        for t in op.inputs:
            if t in producer and t not in present:
                rebuild(t)
                asked.add(t)
                drop_chain_intermediates()
        schedule.append(Step(op))
        if op.phase == "update":
            updated.update(op.outputs)
    return schedule


def chen_sqrt_keep(graph: TrainGraph) -> set:
    cands = candidates(graph)
    k = max(1, math.ceil(math.sqrt(len(cands))))
    return {t for i, t in enumerate(cands) if (i + 1) % k == 0}


def chain_macs(graph: TrainGraph, t: str, keep: set) -> int:
    """MACs (plus call costs) to rebuild `t` from the kept tensors."""
    producer = {x: op for op in _forward(graph) for x in op.outputs}
    seen, total, stack = set(), 0, [t]
    while stack:
        op = producer[stack.pop()]
        if op.name in seen:
            continue
        seen.add(op.name)
        total += op.macs + CALL_MACS
        stack += [u for u in op.inputs if u in producer and u not in keep]
    return total


def _idle_steps(graph: TrainGraph) -> dict:
    """For each candidate: ops between its last forward read and its first later read."""
    ops = graph.ops
    out = {}
    for t in candidates(graph):
        reads = [i for i, op in enumerate(ops) if t in op.inputs]
        fwd_reads = [i for i in reads if ops[i].phase == "forward"] or [
            next(i for i, op in enumerate(ops) if t in op.outputs)
        ]
        later = [i for i in reads if ops[i].phase in ("backward", "update")]
        out[t] = max(min(later) - max(fwd_reads), 1)
    return out


def _live_at(plan: MemoryPlan, t: str, at: int) -> bool:
    for i, step in enumerate(plan.schedule):
        if not step.recompute and t in plan.writes[i]:
            buf = plan.writes[i][t]
            return buf.start <= at <= buf.end
    return False


def evictions(graph: TrainGraph, limit: int = 64):
    """Plans from keep-all down, one DTR-scored eviction at a time (see the module doc)."""
    keep = set(candidates(graph))
    plan = plan_memory(graph, build_schedule(graph, keep), "keep all", frozenset(keep))
    yield plan
    idle = _idle_steps(graph)
    size = {t: graph.tensors[t].nbytes for t in keep}
    for count in range(1, min(limit, len(keep)) + 1):
        at = max(range(len(plan.live)), key=plan.live.__getitem__)
        alive = [t for t in keep if _live_at(plan, t, at)]
        if not alive:
            return
        victim = min(alive, key=lambda t: chain_macs(graph, t, keep - {t}) / (size[t] * idle[t]))
        keep = keep - {victim}
        plan = plan_memory(graph, build_schedule(graph, keep), f"evict {count} (DTR score)", frozenset(keep))
        yield plan


def variants(graph: TrainGraph, mode: str = "auto") -> list[MemoryPlan]:
    """The memory plans the fitter chooses from, for recompute `mode`
    (none | sqrt | budget | all | auto = every one of them)."""
    plans = []
    if mode in ("auto", "none"):
        keep = set(candidates(graph))
        plans.append(plan_memory(graph, build_schedule(graph, keep), "keep all", frozenset(keep)))
    if mode in ("auto", "budget"):
        plans += list(evictions(graph))[1 if mode == "auto" else 0 :]
    if mode in ("auto", "sqrt"):
        keep = chen_sqrt_keep(graph)
        plans.append(plan_memory(graph, build_schedule(graph, keep), "sqrt(n) checkpoints (Chen)", frozenset(keep)))
    if mode in ("auto", "all"):
        plans.append(
            plan_memory(
                graph, build_schedule(graph, set(), materialize=False), "recompute all (keep none)", frozenset()
            )
        )
    return plans
