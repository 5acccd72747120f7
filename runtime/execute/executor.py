"""Runs a plan: each op on its backend, with the CPU as the fallback when a device fails.

The Executor dispatches a step to one of the runners of this package (serial / split,
pipelined, memory-planned) and runs single ops for them (`call`).

Ops read their inputs from an environment (tensor name -> value) and write their
outputs back only when they succeed, so an op that fails on the DSP can run again
on the next backend with the same inputs: no training state is lost.
"""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import BackendError, NoSupport
from ..numerics import RngKey
from .bound import call_op
from .pipeline import run_pipelined
from .planned import run_planned
from .split import run_serial


@dataclass
class StepContext:
    """What an op may know about the step it runs in."""

    recipe: object
    graph: object
    seed: int
    step: int
    epoch: int
    batch_total: int  # rows in the full batch (micro-batches see a slice)
    row_offset: int = 0  # first row of this micro-batch in the full batch
    shifts: dict | None = None  # op name -> a shift to use instead of estimating it
    lr_scale: float = 1.0  # the run's per-step learning-rate factor (train/schedule.py)
    # op name -> the shifts its requantizing hooks used, as the op function noted them
    # (note_shift) until the executor takes them; each copy of a context has its own
    noted: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def lr_factor(self) -> float:
        """The learning rate's factor at this step: the recipe's per-epoch `schedule.lr_factor`
        times the run's per-step `lr_scale`."""
        return self.recipe.schedule.at("lr_factor", self.epoch, 1.0) * self.lr_scale

    def rng(self, op) -> RngKey:
        """The random bits of `op`'s first output: rows of a micro-batch get the full batch's bits."""
        offset = 0
        if op.phase != "update" and self.row_offset:
            spec = self.graph.tensors[op.outputs[0]]
            per_row = 1
            for d in spec.shape[1:]:
                per_row *= d
            offset = self.row_offset * per_row
        return RngKey(self.seed, self.step, op.id, offset)

    def given_shift(self, op):
        return self.shifts.get(op.name) if self.shifts else None

    def note_shift(self, op, shift) -> None:
        """An op function's word that a requantizing hook of `op` used `shift` (a product's
        (q, shift), or a range hook's exponent less its operands'): StepStats.shifts,
        adaptive rescaling and the runners that slice a batch read it (take_shift)."""
        self.noted.setdefault(op.name, []).append(int(shift))

    def take_shift(self, op) -> int | None:
        """The one shift `op` noted since it was last taken (None: none). Slices of a batch
        and recomputed ops are joined bit for bit only with one shift per op."""
        shifts = self.noted.pop(op.name, None)
        if not shifts:
            return None
        if len(shifts) > 1 and len(set(shifts)) != 1:
            raise RuntimeError(
                f"{op.name} requantized {len(shifts)} times with shifts {shifts}: "
                f"micro-batching and recomputation need one shift per op"
            )
        return shifts[0]

    def drop_shift(self, op) -> None:
        """Forget what `op` noted (a runner that does not need its shift)."""
        self.noted.pop(op.name, None)


@dataclass
class StepStats:
    """What one training step cost and where it ran."""

    step: int
    epoch: int
    batch: int
    time_s: float = 0.0
    dsp_model_s: float | None = None  # the DSP's modeled time (cost.dsp_model_time)
    loss: float = float("nan")
    correct: int = 0
    backend_time_s: dict = field(default_factory=dict)
    int8_macs: dict = field(default_factory=dict)  # backend -> int8 multiply-accumulates run there
    fp32_flops: int = 0  # float operations (an FMA counts two)
    bytes_moved: int = 0  # bytes the ops read and wrote
    ops_on: dict = field(default_factory=dict)  # backend -> op count
    fallbacks: list = field(default_factory=list)  # "op: backend -> backend (why)"
    energy_j: float | None = None
    energy_meter: str | None = None
    peak_rss_bytes: int | None = None  # the process's peak RSS so far (memory/rss.py)
    rss_bytes: int | None = None  # its resident set after the step
    rss_growth_bytes: int | None = None  # how far the RSS rose above its start during the step
    step_peak_rss_bytes: int | None = None  # the RSS's high-water mark during the step (VmHWM)
    budget_bytes: int | None = None  # the memory budget this step ran under
    planned_peak_bytes: int | None = None  # the plan's peak: arena + largest op workspace
    arena_bytes: int | None = None  # the arena the plan placed tensors in
    arena_high_water_bytes: int | None = None  # highest arena byte actually written
    spilled_bytes: int = 0  # results that missed their arena slot
    micro_batch: int | None = None  # rows per slice (None: no memory plan)
    recomputed_ops: int = 0  # forward ops re-run to rebuild activations
    rerun_slices: int = 0  # product slices re-run with the common shift
    memory_plan: str | None = None  # what the planner chose
    shifts: dict = field(default_factory=dict)  # op name -> the shift its requantization used
    given_shifts: int = 0  # ops that ran with a given shift (adaptive rescaling)
    pipeline: str | None = None  # co-scheduling: how the step ran, or why serial
    pipeline_ops: int = 0  # ... ops each micro-batch ran without waiting
    pipeline_syncs: int = 0  # ... ops where the micro-batches synchronised
    overlap_s: float = 0.0  # ... CPU seconds run while the DSP queue was busy
    split_ops: int = 0  # batch splitting: ops run in chunks
    split_calls: int = 0  # ... and the chunks they ran as

    @property
    def accuracy(self) -> float:
        return self.correct / self.batch if self.batch else 0.0


class Executor:
    def __init__(self, backends: dict, algorithm):
        self.backends = backends  # name -> Backend, priority order
        self.algorithm = algorithm
        self._faulted: set[str] = set()  # backends that failed during the current run
        self._stats_lock = threading.Lock()
        self._dsp_queue: ThreadPoolExecutor | None = None
        # profile.Recorder while `dsptrain profile` runs: every op call reports to it
        # (`op_done`); None otherwise, and the runners check it once per op, nothing more
        self.profiler = None

    def dsp_queue(self) -> ThreadPoolExecutor:
        """The DSP's queue: one worker thread that makes every call to the DSP backend
        during a co-scheduled step (the backend is not thread-safe), in submission order."""
        if self._dsp_queue is None:
            self._dsp_queue = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsptrain-dsp")
        return self._dsp_queue

    def close(self) -> None:
        if self._dsp_queue is not None:
            self._dsp_queue.shutdown(wait=True)
            self._dsp_queue = None

    def run(
        self,
        plan,
        env: dict,
        ctx: StepContext,
        ops=None,
        stats: StepStats | None = None,
        memory=None,
        arena=None,
        threaded: bool = True,
        release: bool = False,
    ) -> dict:
        """Run `ops` (default: the whole plan) updating `env` in place; returns `env`.

        One of four runners (execute/), each `run_*(executor, plan, env, ctx, stats, ...)`
        updating `env`: with `memory` (a memory.fit.Option) and its `arena`, the memory-planned
        runner (planned.py: tensors in arena slots, ops on micro-batch slices, dropped
        activations recomputed); with `plan.micro_batches > 1`, the co-scheduled one
        (pipeline.py; `threaded=False`: the same slices one after another), synchronising the
        slices at requantized ops without a given shift; else the serial one, op by op, where
        ops the plan splits by rows run in chunks (split.py). The results are the same bit
        for bit in every case. `release`: the serial runner drops each tensor from `env` after
        its last op (the weights, state, input and logits stay), so the step's memory is its
        live tensors' (execute/bound.py)."""
        self._faulted = set()
        if memory is not None and ops is None:
            if stats is not None and plan.micro_batches > 1:
                stats.pipeline = "serial: the memory plan runs op by op"
            return run_planned(self, plan, env, ctx, stats, memory, arena)
        if ops is None and plan.micro_batches > 1:
            if run_pipelined(self, plan, env, ctx, stats, threaded):
                return env
        return run_serial(self, plan, env, ctx, stats, ops, release)

    def call(
        self,
        plan,
        op,
        env: dict,
        ctx: StepContext,
        stats: StepStats | None = None,
        rows: tuple[int, int] | None = None,
        backend: str | None = None,
    ) -> tuple[dict, str]:
        """Run one op on its backend, falling back down the priority order when a device
        fails; returns (outputs, backend name); the shift a requantizing op used is then
        `ctx.take_shift(op)`. `rows` = (rows run, rows in the batch) scales the counted work;
        `backend` starts there instead of at the op's placement (a fallback already chosen)."""
        faulted = self._faulted
        name = backend or plan.backend_of(op)
        if name in faulted:
            name = self._next_supporting(plan, op, name, faulted)
        while True:
            backend = self.backends[name]
            started = time.perf_counter()
            backend.current_op = op
            ctx.drop_shift(op)  # what an earlier, failed attempt noted
            try:
                outputs = call_op(self.algorithm.OPS[op.kind], backend, op, env, ctx)
            except BackendError as exc:
                name = self.fall_back(plan, op, name, exc, stats)
                continue
            finally:
                backend.current_op = None
                spent = time.perf_counter() - started
                self.count_time(stats, backend.name, spent)
                if self.profiler is not None:
                    self.profiler.op_done(plan, op, backend, started, spent, rows)
            break
        if stats is not None:
            share, whole = rows or (1, 1)
            with self._stats_lock:  # a co-scheduled step counts from two threads
                stats.ops_on[name] = stats.ops_on.get(name, 0) + 1
                if ctx.recipe.integer:
                    stats.int8_macs[name] = stats.int8_macs.get(name, 0) + op.macs * share // whole
                else:
                    stats.fp32_flops += 2 * op.macs * share // whole
                stats.bytes_moved += plan.op_bytes(op, rows)
        return outputs, name

    def fall_back(self, plan, op, name: str, exc: BackendError, stats: StepStats | None) -> str:
        """The backend to run `op` on after it raised `exc` on `name`: a device failure
        (not a NoSupport) marks `name` failed for the rest of the step and warns."""
        nxt = self._next_supporting(plan, op, name, self._faulted | {name})
        if not isinstance(exc, NoSupport):
            self._faulted.add(name)
            warnings.warn(
                f"{op.name} failed on {name} ({exc}); finishing the step on {nxt}", RuntimeWarning, stacklevel=4
            )
        if stats is not None:
            stats.fallbacks.append(f"{op.name}: {name} -> {nxt} ({exc})")
        return nxt

    def count_time(self, stats: StepStats | None, backend: str, seconds: float) -> None:
        if stats is not None:
            with self._stats_lock:
                stats.backend_time_s[backend] = stats.backend_time_s.get(backend, 0.0) + seconds

    def _next_supporting(self, plan, op, failed: str, exclude: set) -> str:
        for name in plan.fallbacks(op, failed):
            if name not in exclude and self.backends[name].supports(op)[0]:
                return name
        raise BackendError(failed, f"{op.name} failed and no other backend can run it")
