"""The Plan of one graph: which backend runs each op and why, batch splitting, co-scheduling.

`build(graph, backends, device, scheduler)` makes the frozen Plan; a `Planner` holds the
backends of one choice, builds their plans with it and runs them. Both the Trainer's step
and `dsptrain plan` go through a Planner (the step's plans are also prepared on their
backends; `dsptrain plan` only reads them). Placement:

Backends are walked in priority order (dsp, cpu, ref); an op goes to the first one
that supports it and does not decline it. The DSP declines, when the CPU is there:
- under `scheduler.placement: profile` (the default), ops with a hook the device profile
  lists under `dsp.bad_at` (configs/devices/*.yaml: max-pool's data-dependent argmax and
  scatter, measured at 40-120x a GEMM's packets per byte on the emulated v66). This is
  Mandheling's split of work (Xu et al., MobiCom 2022): products on the DSP, the ops it
  is bad at on the CPU, where co-scheduling overlaps them with the DSP's next micro-batch;
- under co-scheduling, the updates (below);
- ops matching DSPTRAIN_CPU_ONLY_OPS=<regex> (by name or kind).
`scheduler.placement: first` keeps the plain first-that-supports order. Every decision
keeps its reason: DSPTRAIN_DEBUG=1 prints them, `Plan.describe()` lists them.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field

from .backends import ACCELERATOR, HOST, PROCESSOR, select
from .graph import TrainGraph, lower


@dataclass(frozen=True)
class Placement:
    backend: str
    reason: str
    declined: tuple[tuple[str, str], ...] = ()   # (backend, why not) for those tried first


@dataclass(frozen=True, eq=False)
class Plan:
    """How one graph runs. Frozen: a change (another device, co-scheduling) is a new Plan
    (`replace`); `stats` only caches what the plan implies (op bytes, fitters, splits)."""

    graph: TrainGraph
    placement: dict[str, Placement]
    order: tuple[str, ...]                        # backend names, priority order
    stats: dict = field(default_factory=dict)
    device: object = None                         # config.DeviceProfile: batch splitting reads it
    batch_split: bool = False
    micro_batches: int = 1                        # co-scheduling: micro-batches in flight (1: off)
    micro_batches_reason: str = "co-scheduling is off"
    backends: dict = field(default_factory=dict, repr=False)   # name -> Backend (place() sets it)

    def replace(self, **changes) -> "Plan":
        """A copy with `changes`, and caches of its own."""
        return dataclasses.replace(self, stats={}, **changes)

    def backend_of(self, op) -> str:
        return self.placement[op.name].backend

    def fallbacks(self, op, failed: str) -> list[str]:
        """Backends after `failed` in priority order, for re-running `op`."""
        return [name for name in self.order[self.order.index(failed) + 1:]]

    def op_bytes(self, op, rows: tuple[int, int] | None = None) -> int:
        """Bytes `op` reads and writes at the planned batch (for the energy estimate); with
        `rows` = (rows run, rows in the batch), those of a slice: its share of the tensors
        with a row per sample, and the others (weights, weight gradients) whole, as every
        slice streams them again."""
        cached = self.stats.setdefault("op_bytes", {})
        if op.name not in cached:
            graph, per_row, whole = self.graph, 0, 0
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
        from .memory.fit import Fitter, micro_batches

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
        kept = {f"recipe:{buf}": per_row * rows for buf, (per_row, most) in op.attrs.get("keeps", {}).items()
                if rows <= most}
        if backend is None:
            return kept
        return {**kept, **{f"{name}:{buf}": n for buf, n in backend.scratch_bytes(self.graph, op, rows).items()}}

    # ------------------------------------------------------------ batch splitting
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
            cached[key] = self._split_rows(op, rows)
        return cached[key][0]

    def split_reason(self, op, rows: int) -> str:
        self.split_rows(op, rows)
        return self.stats.get("split", {}).get((op.name, rows), (None, "batch splitting is off"))[1]

    def _split_rows(self, op, rows: int) -> tuple[int | None, str]:
        from .cost import split_net_seconds

        if not splittable(self.graph, op) or op.is_alias() or not self.graph.row_local(op):
            return None, "not a row-local int8 product"
        fixed, per_row = working_set(self.graph, op)
        backend = self.backend_of(op)
        results = self.graph.tensors[op.outputs[0]].nbytes * rows // self.graph.batch
        if getattr(self.backends.get(backend), "blocks_for_cache", False):
            # Its kernels tile operands for the cache themselves; what still streams through
            # memory, whatever the tiles, is a requantized product's int32 accumulators.
            if not op.is_requant():
                return None, f"{backend} kernels block for the cache; no row-sized scratch to bound"
            per_row = 4 * self.graph.tensors[op.outputs[0]].nbytes // self.graph.batch
        levels = (("dsp.vtcm", "VTCM"), ("dsp.l2", "DSP L2")) if PROCESSOR.get(backend) == "dsp" else \
            (("cpu.l2", "CPU L2"),)   # the device profile's memories of the processor it runs on
        best, why = (None, 0.0), []
        for key, label in levels:
            capacity = self.device.size(key)
            if fixed + per_row * rows <= capacity:
                return None, f"{rows} rows fit {label} ({fixed + per_row * rows} <= {capacity} bytes)"
            fit = (capacity - fixed) // per_row
            if fit < 1:
                why.append(f"one row misses {label}")
                continue
            chunks = -(-rows // fit)
            net = split_net_seconds(self.device, PROCESSOR.get(backend, "cpu"), per_row * rows, fixed, results,
                                    chunks, op.macs * rows // self.graph.batch)
            why.append(f"{chunks} chunks for {label}: {net * 1e6:+.0f} us")
            if net > best[1]:
                best = (-(-rows // chunks), net)
        verdict = "; ".join(why) + " (cost model)"
        return (best[0], f"split: {verdict}") if best[0] else (None, f"not split: {verdict}")

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
        from .cost import PipelineWork, grads_of, grad_elements

        split = self.pipeline_ops()
        if split is None:
            return None
        per_row, once = split
        ops = tuple((self.backend_of(op), op.macs, self.op_bytes(op), op.phase != "update") for op in (*per_row, *once))
        return PipelineWork(ops, grad_elements(self.graph, grads_of(self.graph, per_row)))

    def describe(self) -> str:
        width = max(len(op.name) for op in self.graph.ops) if self.graph.ops else 10
        lines = [f"placement of {len(self.graph.ops)} ops ({self.graph.recipe}, batch {self.graph.batch}):"]
        for op in self.graph.ops:
            p = self.placement[op.name]
            declined = "; ".join(f"not {b}: {why}" for b, why in p.declined)
            lines.append(f"  {op.name:<{width}}  -> {p.backend:<4} {p.reason}" + (f" ({declined})" if declined else ""))
        return "\n".join(lines)


class ScratchTable:
    """Plan.scratch_bytes of every op at each of `sizes` rows (the whole batch for an op that
    couples rows), asked once: what a memory fitter reads as its `scratch`
    (memory.fit.ScratchFn), numbers only, so the memory layer holds no backend."""

    def __init__(self, plan: Plan, sizes):
        graph = plan.graph
        self.table = {(op.name, rows): plan.scratch_bytes(op, rows)
                      for op in graph.ops if not op.is_alias()
                      for rows in (sizes if graph.row_local(op) else (graph.batch,))}

    def __call__(self, op, rows: int) -> dict:
        return self.table[(op.name, rows)]


def choose_micro_batches(plan: Plan, scheduler, sliceable: bool) -> Plan:
    """`plan` with its micro-batch count (and why) for co-scheduling: `scheduler.micro_batches`
    when it is a number, else the device profile's cost model (cost.py). Only a `sliceable`
    step (training, a recipe whose requantizing ops take a given shift, so slices can share
    one: `graph.takes_given_shift`) is."""
    from .cost import micro_batch_count

    batch = plan.graph.batch
    if not (scheduler.co_schedule and sliceable and batch >= 2):
        m, why = 1, "co-scheduling is off or does not apply"
    elif plan.pipeline_ops() is None:
        m, why = 1, "an op couples rows outside the update"
    elif scheduler.micro_batches != "auto":
        m, why = min(int(scheduler.micro_batches), batch), f"scheduler.micro_batches: {scheduler.micro_batches}"
    else:
        m, why = micro_batch_count(plan.pipeline_work(), plan.device, batch)
    return plan.replace(micro_batches=m, micro_batches_reason=why)


def cpu_only_pattern() -> re.Pattern | None:
    text = os.environ.get("DSPTRAIN_CPU_ONLY_OPS")
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        from .errors import ConfigError

        raise ConfigError("DSPTRAIN_CPU_ONLY_OPS", None, f"{text!r} is not a regular expression: {exc}") from None


def splittable(graph: TrainGraph, op) -> bool:
    """An integer product (conv / GEMM hooks): the ops whose working set batch splitting sizes."""
    return any(h in op.hooks for h in PRODUCT_HOOKS) and graph.tensors[op.outputs[0]].dtype in ("int8", "int32", "int64")


PRODUCT_HOOKS = ("conv2d_s8", "gemm_s8", "conv2d_bwd_data_s8", "conv2d_bwd_weight_s8")


def working_set(graph: TrainGraph, op) -> tuple[int, int]:
    """(bytes that do not scale with rows: weights, weight gradients; bytes per row: row-shaped
    operands and results, plus the int32 accumulators of a requantized result)."""
    fixed, per_row = 0, 0
    for t in dict.fromkeys((*op.inputs, *op.outputs)):
        spec = graph.tensors[t]
        if graph.is_row_shaped(t):
            per_row += spec.nbytes // graph.batch
        else:
            fixed += spec.nbytes
    if op.is_requant():
        per_row += 4 * graph.tensors[op.outputs[0]].nbytes // graph.batch
    return fixed, per_row


PLACEMENTS = ("profile", "first")   # scheduler.placement (config.SchedulerConfig)


def place(graph: TrainGraph, backends: dict, ops=None, co_schedule: bool = False,
          device=None, placement: str = "first") -> Plan:
    """Place every op of `graph` (or `ops`) on the first backend of `backends` that takes it.

    With `placement` "profile" and a `device` profile (config.DeviceProfile), ops with a hook
    in its `dsp.bad_at` skip the DSP when the CPU backend is there. With `co_schedule` and a
    DSP, the updates go to the CPU: element-wise passes over the weights with nothing to
    reuse, they are what the CPU does while the DSP works on the backward of earlier layers
    (execute/pipeline.py)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    forced_off_dsp = cpu_only_pattern()
    bad_at = device.dsp.bad_at if placement == "profile" and device is not None else {}
    placement_of = {}
    for op in ops if ops is not None else graph.ops:
        declined = []
        for name, backend in backends.items():
            if name == ACCELERATOR and forced_off_dsp and (forced_off_dsp.search(op.name)
                                                           or forced_off_dsp.search(op.kind)):
                declined.append((name, "forced off the DSP by DSPTRAIN_CPU_ONLY_OPS"))
                continue
            if name == ACCELERATOR and co_schedule and op.phase == "update" and HOST in backends:
                declined.append((name, "co-scheduling: the update runs on the CPU, beside the DSP's backward"))
                continue
            bad = [h for h in op.hooks if h in bad_at]
            if name == ACCELERATOR and bad and HOST in backends:
                declined.append((name, "; ".join(f"profile {device.name}: the DSP is bad at {h} ({bad_at[h]})"
                                                 for h in bad)))
                continue
            ok, why = backend.supports(op)
            if ok:
                placement_of[op.name] = Placement(name, why, tuple(declined))
                break
            declined.append((name, why))
        else:
            raise RuntimeError(f"no backend can run {op.name} ({op.kind}): " +
                               "; ".join(f"{b}: {why}" for b, why in declined))
    plan = Plan(graph, placement_of, tuple(backends), backends=dict(backends), device=device)
    if os.environ.get("DSPTRAIN_DEBUG"):
        print(plan.describe(), file=sys.stderr)
    return plan


def build(graph: TrainGraph, backends: dict, device=None, scheduler=None) -> Plan:
    """The Plan of `graph` on `backends` (name -> Backend, priority order) for `device` (a
    config.DeviceProfile) under `scheduler` (config.SchedulerConfig; None: place each op
    on the first backend that takes it, no splitting, no co-scheduling).

    Co-scheduling needs the accelerator among the backends (a second processor to overlap);
    batch splitting and micro-batches need slices that can share a shift
    (`graph.takes_given_shift`), micro-batches a training graph."""
    if scheduler is None:
        return place(graph, backends, device=device)
    co_schedule = scheduler.co_schedule and ACCELERATOR in backends
    plan = place(graph, backends, co_schedule=co_schedule, device=device, placement=scheduler.placement)
    plan = plan.replace(device=device, batch_split=scheduler.batch_split and graph.takes_given_shift)
    # Co-scheduling's micro-batch count: the device profile's cost model (cost.py); 1
    # (serial) without the accelerator, where there is no second processor to overlap.
    return choose_micro_batches(plan, scheduler, graph.training and graph.takes_given_shift)


class PlanCache:
    """Plans by (batch, training): a partial last batch or an evaluation gets its own,
    and a plan is prepared on its backends once, then reused every step."""

    def __init__(self, build):
        self._build = build
        self._plans: dict = {}
        self.builds = 0

    def get(self, batch: int, training: bool) -> Plan:
        key = (batch, training)
        if key not in self._plans:
            self._plans[key] = self._build(batch, training)
            self.builds += 1
        return self._plans[key]

    def clear(self) -> None:
        self._plans.clear()


class Planner:
    """The backends of one run's choice and the plans built on them; it runs the plans.

    Made from the choice (one of backends.CHOICES): the backend instances (backends.select),
    then for each model lowered at a batch size its Plan (`plan_model`), with every backend
    prepared for the ops it got; the executor that runs plans is its own. The command line
    hands its choice here directly (cli/train.py, cli/plan.py) and gives the Planner to
    an execute.Step, which asks it for plans and runs them through `run` while answering
    the Trainer's requests; so the choice travels CLI -> here -> backends -> execute/ ->
    the backend's kernel, never through train/ (scripts/check_layout.py traces it). The
    Python API's Trainer makes its own Step and Planner from the run's `backend:`
    (train/step.py)."""

    def __init__(self, choice: str, algorithm, device=None, scheduler=None):
        from .execute import Executor

        self.backends = select(choice)
        self.device, self.scheduler = device, scheduler
        self.executor = Executor(self.backends, algorithm)

    def build(self, graph: TrainGraph) -> Plan:
        """The Plan of `graph` on these backends, nothing prepared: what `dsptrain plan`
        reports (it runs nothing, so the DSP is not started); `plan` runs the same build."""
        return build(graph, self.backends, self.device, self.scheduler)

    def plan_model(self, model, recipe, batch: int, training: bool = True, frozen=frozenset(),
                   prepare: bool = True) -> Plan:
        """The Plan of `model` lowered by `recipe` (graph.lower) at `batch`; `frozen` layers get
        no gradient or update. `prepare`: its backends prepared (`plan`, a training step's),
        else only built (`build`, what `dsptrain plan` reports). The one place a run's model
        is lowered for planning, so the plan `dsptrain plan` prints is the step's."""
        graph = lower(model, recipe, batch, training, frozen)
        return self.plan(graph) if prepare else self.build(graph)

    def plans_for(self, model, recipe, frozen=frozenset(), lowered: TrainGraph | None = None) -> PlanCache:
        """The plans of `model` lowered by `recipe` by (batch, training), each built and
        prepared on first use (plan_model): a training run's (execute.Step). `lowered`: a
        graph of the model lowered already (train/assembly.py), planned as it is at its
        batch rather than lowered again."""
        def plan_at(batch: int, training: bool) -> Plan:
            if lowered is not None and (lowered.batch, lowered.training) == (batch, training):
                return self.plan(lowered)
            return self.plan_model(model, recipe, batch, training, frozen)
        return PlanCache(plan_at)

    def plan(self, graph: TrainGraph) -> Plan:
        """The Plan of `graph`, its backends prepared for the ops placed on them."""
        plan = self.build(graph)
        accelerator = self.backends.get(ACCELERATOR)
        if self.device is not None and hasattr(accelerator, "hvx_threads"):   # the profile's HVX contexts
            accelerator.hvx_threads = self.device.dsp.hvx_threads
        for name, backend in self.backends.items():
            backend.prepare(graph, [op for op in graph.ops if plan.backend_of(op) == name])
        return plan

    def run(self, plan: Plan, env: dict, ctx, **options) -> dict:
        """Run `plan` on `env` (execute.Executor.run and its options)."""
        return self.executor.run(plan, env, ctx, **options)

    def start_accelerator_clock(self) -> None:
        """Forget the accelerator's cost log so far (an evaluation's is not the next step's)."""
        take = getattr(self.backends.get(ACCELERATOR), "take_cost_log", None)
        if take is not None:
            take()

    def accelerator_seconds(self) -> float | None:
        """The accelerator's modeled time since start_accelerator_clock (cost.dsp_model_time);
        None without one that keeps a cost log."""
        from .cost import dsp_model_time

        take = getattr(self.backends.get(ACCELERATOR), "take_cost_log", None)
        return dsp_model_time(self.device, *take()).seconds if take is not None else None

    def adopt_scratch(self, held: dict, option) -> dict:
        """Before a step of memory plan `option`, with the kept buffers at `held`: release
        every backend's scratch when `option` keeps some buffer smaller (memory.fit.must_release);
        returns what is held after the step. The release is made here, so the memory layer is
        handed sizes, never a backend."""
        from .memory.fit import held_after, must_release

        if must_release(held, option):
            self.release_scratch()
            held = {}
        return held_after(held, option)

    def release_scratch(self) -> None:
        for backend in self.backends.values():
            backend.release_scratch()

    def close(self) -> None:
        self.executor.close()
        for backend in self.backends.values():
            backend.close()
