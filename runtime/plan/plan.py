"""The Plan of one graph: which backend runs each op and why (Placement), what that costs
in bytes and scratch, batch splitting's chunks (splitting.py decides them) and
co-scheduling's op lists. Frozen: a change is a new Plan (`replace`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..graph import TrainGraph
from .rates import gather_bytes, kernel_calls, rate_key
from .scratch import ScratchTable
from .splitting import split_decision


@dataclass(frozen=True)
class Placement:
    backend: str
    reason: str
    declined: tuple[tuple[str, str], ...] = ()  # (backend, why not) for those tried first


@dataclass(frozen=True, eq=False)
class Plan:
    """How one graph runs. Frozen: a change (another device, co-scheduling) is a new Plan
    (`replace`); `stats` only caches what the plan implies (op bytes, fitters, splits)."""

    graph: TrainGraph
    placement: dict[str, Placement]
    order: tuple[str, ...]  # backend names, priority order
    stats: dict = field(default_factory=dict)
    device: object = None  # config.DeviceProfile: batch splitting reads it
    batch_split: bool = False
    micro_batches: int = 1  # co-scheduling: micro-batches in flight (1: off)
    micro_batches_reason: str = "co-scheduling is off"
    backends: dict = field(default_factory=dict, repr=False)  # name -> Backend (place() sets it)

    def replace(self, **changes) -> Plan:
        """A copy with `changes`, and caches of its own."""
        return dataclasses.replace(self, stats={}, **changes)

    def backend_of(self, op) -> str:
        return self.placement[op.name].backend

    def fallbacks(self, op, failed: str) -> list[str]:
        """Backends after `failed` in priority order, for re-running `op`."""
        return [name for name in self.order[self.order.index(failed) + 1 :]]

    def op_bytes(self, op, rows: tuple[int, int] | None = None) -> int:
        """Bytes `op` reads and writes at the planned batch (for the energy estimate), a composed
        conv's gathered copies included; with
        `rows` = (rows run, rows in the batch), those of a slice: its share of the tensors
        with a row per sample, and the others (weights, weight gradients) whole, as every
        slice streams them again."""
        cached = self.stats.setdefault("op_bytes", {})
        if op.name not in cached:
            graph = self.graph
            per_row, whole = gather_bytes(op)  # a composed conv's copies (rates.py)
            per_row *= graph.batch
            for t in (*op.inputs, *op.outputs):
                if t in graph.tensors:
                    if graph.is_row_shaped(t):
                        per_row += graph.tensors[t].nbytes
                    else:
                        whole += graph.tensors[t].nbytes
            cached[op.name] = (per_row, whole)
        per_row, whole = cached[op.name]
        share, total = rows or (1, 1)
        return per_row * share // total + whole

    def fitter(self, micro_batch: int | None = None, recompute: str = "auto"):
        """The memory fitter of this plan's graph (memory.fit.Fitter), built once per setting:
        a budget that changes between steps picks another of its options, from this cache."""
        from ..memory.fit import Fitter, micro_batches

        fitters = self.stats.setdefault("fitters", {})
        key = (micro_batch, recompute)
        if key not in fitters:
            batch = self.graph.batch
            sizes = {batch, *([min(micro_batch, batch)] if micro_batch else micro_batches(batch))}
            fitters[key] = Fitter(self.graph, micro_batch, recompute, scratch=ScratchTable(self, sizes))
        return fitters[key]

    def scratch_bytes(self, op, rows: int) -> dict:
        """The scratch the backend running `op` keeps for it, by "<backend>:<buffer>", and
        what the recipe keeps from it past the op (`op.attrs["keeps"]`: {buffer: (bytes per
        row, most rows kept)}, MLS's patch cache), by "recipe:<buffer>"."""
        name = self.backend_of(op)
        backend = self.backends.get(name)
        kept = {
            f"recipe:{buf}": per_row * rows
            for buf, (per_row, most) in op.attrs.get("keeps", {}).items()
            if rows <= most
        }
        if backend is None:
            return kept
        return {**kept, **{f"{name}:{buf}": n for buf, n in backend.scratch_bytes(self.graph, op, rows).items()}}

    # ------------------------------------------------------------ batch splitting (splitting.py)
    def split_rows(self, op, rows: int) -> int | None:
        """Rows per chunk for `op` on `rows` rows, or None to run it whole: chunks whose
        working set (operands, int32 accumulators, results) fits a fast memory of the
        backend it runs on -- the DSP's VTCM or its L2; the CPU's L2 -- when the cost model
        (cost.py) says the bytes kept out of DDR outweigh the extra calls and the join."""
        if not self.batch_split or self.device is None:
            return None
        key = (op.name, rows)
        cached = self.stats.setdefault("split", {})
        if key not in cached:
            cached[key] = split_decision(self, op, rows)
        return cached[key][0]

    def split_reason(self, op, rows: int) -> str:
        self.split_rows(op, rows)
        return self.stats.get("split", {}).get((op.name, rows), (None, "batch splitting is off"))[1]

    # ------------------------------------------------------------ co-scheduling
    def pipeline_ops(self) -> tuple[list, list] | None:
        """(ops each micro-batch runs, ops run once after them: the updates), or None when the
        graph has an op that couples rows outside the update (it cannot be pipelined)."""
        if "pipeline_ops" not in self.stats:
            per_row, once = [], []
            for op in self.graph.ops:
                if op.phase == "update":
                    once.append(op)
                elif self.graph.row_local(op):
                    per_row.append(op)
                else:
                    self.stats["pipeline_ops"] = None
                    break
            else:
                self.stats["pipeline_ops"] = (per_row, once)
        return self.stats["pipeline_ops"]

    def pipeline_work(self):
        """cost.PipelineWork of pipeline_ops (None when it is None): the numbers the cost
        model weighs micro-batches by, so it is handed numbers, not the plan and its backends."""
        from ..cost import PipelineWork, grad_elements, grads_of

        split = self.pipeline_ops()
        if split is None:
            return None
        per_row, once = split
        ops = tuple(
            (
                self.backend_of(op),
                op.macs,
                self.op_bytes(op),
                op.phase != "update",
                rate_key(self.graph, op),
                kernel_calls(self.graph, op, self.backend_of(op)),
            )
            for op in (*per_row, *once)
        )
        return PipelineWork(ops, grad_elements(self.graph, grads_of(self.graph, per_row)))

    def describe(self) -> str:
        width = max(len(op.name) for op in self.graph.ops) if self.graph.ops else 10
        lines = [f"placement of {len(self.graph.ops)} ops ({self.graph.recipe}, batch {self.graph.batch}):"]
        for op in self.graph.ops:
            p = self.placement[op.name]
            declined = "; ".join(f"not {b}: {why}" for b, why in p.declined)
            lines.append(f"  {op.name:<{width}}  -> {p.backend:<4} {p.reason}" + (f" ({declined})" if declined else ""))
        return "\n".join(lines)
