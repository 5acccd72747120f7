"""Runs a plan: each op on its backend, with the CPU as the fallback when a device fails.

Ops read their inputs from an environment (tensor name -> value) and write their
outputs back only when they succeed, so an op that fails on the DSP can run again
on the next backend with the same inputs: no training state is lost.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

from .errors import BackendError, NoSupport
from .numerics import RngKey


@dataclass
class StepContext:
    """What an op may know about the step it runs in."""

    recipe: object
    graph: object
    seed: int
    step: int
    epoch: int
    batch_total: int            # rows in the full batch (micro-batches see a slice)
    row_offset: int = 0         # first row of this micro-batch in the full batch
    shifts: dict | None = None  # op name -> a shift to use instead of estimating it

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


@dataclass
class StepStats:
    """What one training step cost and where it ran."""

    step: int
    epoch: int
    batch: int
    time_s: float = 0.0
    loss: float = float("nan")
    correct: int = 0
    backend_time_s: dict = field(default_factory=dict)
    int8_macs: dict = field(default_factory=dict)     # backend -> int8 multiply-accumulates run there
    fp32_flops: int = 0                               # float operations (an FMA counts two)
    bytes_moved: int = 0                              # bytes the ops read and wrote
    ops_on: dict = field(default_factory=dict)        # backend -> op count
    fallbacks: list = field(default_factory=list)     # "op: backend -> backend (why)"
    energy_j: float | None = None
    energy_meter: str | None = None
    peak_rss_bytes: int | None = None

    @property
    def accuracy(self) -> float:
        return self.correct / self.batch if self.batch else 0.0


class Executor:
    def __init__(self, backends: dict, algorithm):
        self.backends = backends        # name -> Backend, priority order
        self.algorithm = algorithm

    def run(self, plan, env: dict, ctx: StepContext, ops=None, stats: StepStats | None = None) -> dict:
        """Run `ops` (default: the whole plan) updating `env` in place; returns `env`."""
        faulted: set[str] = set()
        for op in ops if ops is not None else plan.graph.ops:
            name = plan.backend_of(op)
            if name in faulted:
                name = self._next_supporting(plan, op, name, faulted)
            while True:
                backend = self.backends[name]
                started = time.perf_counter()
                backend.current_op = op
                try:
                    outputs = self.algorithm.OPS[op.kind](backend, op, env, ctx)
                except BackendError as exc:
                    nxt = self._next_supporting(plan, op, name, faulted | {name})
                    if not isinstance(exc, NoSupport):
                        faulted.add(name)
                        warnings.warn(f"{op.name} failed on {name} ({exc}); finishing the step on {nxt}",
                                      RuntimeWarning, stacklevel=2)
                    if stats is not None:
                        stats.fallbacks.append(f"{op.name}: {name} -> {nxt} ({exc})")
                    name = nxt
                    continue
                finally:
                    backend.current_op = None
                    if stats is not None:
                        spent = time.perf_counter() - started
                        stats.backend_time_s[backend.name] = stats.backend_time_s.get(backend.name, 0.0) + spent
                break
            env.update(outputs)
            if stats is not None:
                stats.ops_on[name] = stats.ops_on.get(name, 0) + 1
                if ctx.recipe.integer:
                    stats.int8_macs[name] = stats.int8_macs.get(name, 0) + op.macs
                else:
                    stats.fp32_flops += 2 * op.macs
                stats.bytes_moved += plan.op_bytes(op)
        return env

    def _next_supporting(self, plan, op, failed: str, exclude: set) -> str:
        for name in plan.fallbacks(op, failed):
            if name not in exclude and self.backends[name].supports(op)[0]:
                return name
        raise BackendError(failed, f"{op.name} failed and no other backend can run it")
