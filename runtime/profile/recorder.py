"""What a profiled step records: one event per op call, with its clock, thread and DSP cost.

The executor holds one attribute, `Executor.profiler` (None: off, and the step runs as
it always does: the runners read the attribute once and call nothing). Set to a
`Recorder`, every op call the runners make reports here (`op_done`) with the backend it
ran on, when it started and how long it took, and the rows it ran when it ran on a
slice of the batch (micro-batches, batch splitting, the memory plan's slices). A backend
that keeps a cost log (the DSP's: packets, critical-path packets and arena bytes per
kernel run, `DspBackend.cost_log`) has the records the call added attached to it, so a
DSP op carries the packets QEMU counted for it and the transport calls it took.

Calls come from the calling thread and, under co-scheduling, from the DSP queue's worker
thread (execute/pipeline.py): appending to a list is atomic in CPython, and each thread
reads only its own backend's log, so no lock is taken.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OpEvent:
    """One call of one op."""

    step: int  # index of the profiled step (0 = the first one recorded)
    op: object  # graph.Op
    backend: str
    thread: str  # the thread's name ("MainThread", "dsptrain-dsp_0", ...)
    start_s: float  # time.perf_counter() at its start
    seconds: float
    rows: tuple[int, int] | None  # (rows run, rows in the batch) for a slice, None for the whole batch
    dsp_costs: tuple = ()  # (kernel, packets, critical packets, bytes) records it added to the cost log
    dsp_calls: int = 0  # transport calls (FastRPC round trips) it made


@dataclass
class StepSpan:
    """One profiled step: its clock and what the Step measured."""

    index: int
    start_s: float
    seconds: float = 0.0
    stats: object = None  # execute.StepStats


@dataclass
class Recorder:
    """Events of the steps between `begin_step` and `end_step`; calls outside a step are not kept."""

    events: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    recording: bool = False
    plan: object = None  # the plan.Plan the recorded ops belong to (the last one seen)
    _seen: dict = field(default_factory=dict)  # backend name -> (its cost log list, records seen, calls seen)

    def begin_step(self) -> None:
        self.steps.append(StepSpan(len(self.steps), time.perf_counter()))
        self.recording = True

    def end_step(self, stats=None) -> None:
        span = self.steps[-1]
        span.seconds = time.perf_counter() - span.start_s
        span.stats = stats
        self.recording = False

    def op_done(self, plan, op, backend, started: float, seconds: float, rows=None) -> None:
        """`op` of `plan` ran on `backend` (a Backend) from perf_counter() `started` for
        `seconds`, on `rows` = (rows run, rows in the batch) or the whole batch (None)."""
        costs, calls = self._new_costs(backend)
        if not self.recording:
            return
        self.plan = plan
        self.events.append(
            OpEvent(
                len(self.steps) - 1,
                op,
                backend.name,
                threading.current_thread().name,
                started,
                seconds,
                rows,
                costs,
                calls,
            )
        )

    def _new_costs(self, backend) -> tuple[tuple, int]:
        """The cost-log records and transport calls `backend` added since it last reported.
        The log is a fresh list after each `take_cost_log` (the Step takes it at every step's
        start), so a new list is read from its beginning."""
        log = getattr(backend, "cost_log", None)
        if log is None:
            return (), 0
        calls = getattr(backend, "calls", 0)
        held = self._seen.get(backend.name)
        start, calls_before = (held[1], held[2]) if held is not None and held[0] is log else (0, 0)
        if calls < calls_before:
            calls_before = 0
        self._seen[backend.name] = (log, len(log), calls)
        return tuple(log[start:]), calls - calls_before

    def step_events(self, index: int) -> list:
        return [e for e in self.events if e.step == index]


def record_steps(executor, step, batches, warmup: int = 0) -> Recorder:
    """Call `step(images, labels)` (a Trainer's `step`, returning execute.StepStats) on each
    of `batches`; the first `warmup` run unrecorded (plans built, scratch grown), the rest
    with `executor` (the one running the steps) reporting every op call. Returns the Recorder."""
    recorder = Recorder()
    for images, labels in batches[:warmup]:
        step(images, labels)
    executor.profiler = recorder
    try:
        for images, labels in batches[warmup:]:
            recorder.begin_step()
            stats = step(images, labels)
            recorder.end_step(stats)
    finally:
        executor.profiler = None
    return recorder
