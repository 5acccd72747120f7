"""CPU-DSP co-scheduling (Mandheling): micro-batches pipelined across the two processors.

The batch is cut into `plan.micro_batches` slices of rows. Each slice runs the step's
row-local ops (forward, loss, backward) in graph order; an op placed on the DSP goes to
the DSP queue -- one worker thread that owns the DSP backend (it is not thread-safe) and
runs its calls in submission order -- and a CPU op runs on the calling thread. So while
the DSP works on slice i+1's forward, the CPU computes slice i's loss gradient; while
the DSP runs the backward of earlier layers, the CPU sums weight gradients and runs the
updates (plan.py places them on the CPU under co-scheduling) of the layers whose
gradients are complete.

Numerics. NITI requantizes by the range of the whole batch's product, which no slice
knows alone. An op with a *given* shift (self-adaptive rescaling, rescale.py, supplies
them between its checks) runs on every slice with it, and `requantize`'s rule
(backends/base.py) makes the result the same as the full batch's with that given shift:
a slice whose accumulators need a larger shift uses it and says so. If any slice did,
the slices disagree: every slice is given that larger shift and runs again from that
op (a *rewind*; gradients and updates that depended on it are redone), which ends at
what the unpipelined step uses, max(given, estimate of the whole batch). An op whose
range check is due (no given shift) is a *sync point*: every slice runs up to it, then
runs it with the largest estimate of the slices before it as a given shift (max(given,
own estimate) is used); the largest is the full batch's shift (the shift is monotone
in max |acc|, and the batch's max |acc| is the largest slice's), and slices that used
less run it again with that; after it the slices go on pipelined. The controller
staggers its checks across ops (rescale.py) so that few steps have any. Random bits
follow rows (`StepContext.row_offset`), weight gradients are summed exactly in int64
and stored in the full batch's dtype. So the pipelined step equals the same step run
serially, slice by slice (`threaded=False`), and the unsplit step, bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, wait

import numpy as np

from ..backends import ACCELERATOR
from ..memory.planner import value_dtype
from ..numerics import QTensor
from .slices import as_array, row_slice
from .split import run_op


def slices(batch: int, parts: int) -> list[tuple[int, int]]:
    """`parts` near-equal row ranges covering `batch` rows."""
    parts = max(1, min(parts, batch))
    edges = [batch * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def needs_shift(op) -> bool:
    return op.is_requant() and not op.is_alias()


def run_pipelined(executor, plan, env: dict, ctx, stats=None, threaded: bool = True) -> bool:
    """Run the step pipelined, updating `env`; False (env untouched) when the graph has an
    op that couples rows outside the update."""
    split = plan.pipeline_ops()
    if split is None:
        if stats is not None:
            stats.pipeline = "serial: an op couples rows outside the update"
        return False
    _Pipeline(executor, plan, env, ctx, stats, threaded, *split).run()
    return True


class _Pipeline:
    """One co-scheduled step: slices' positions in the op list, the DSP queue's futures,
    weight-gradient sums, and the shifts the slices used."""

    def __init__(self, executor, plan, env, ctx, stats, threaded, per_row, once):
        graph = self.graph = plan.graph
        self.executor, self.plan, self.env, self.ctx, self.stats = executor, plan, env, ctx, stats
        self.per_row, self.once = per_row, once
        self.index = {op.name: k for k, op in enumerate(per_row)}
        self.given = dict(ctx.shifts or {})  # grows when a stale given shift is replaced
        self.syncs = {op.name for op in per_row if needs_shift(op) and op.name not in self.given}
        self.bounds = slices(graph.batch, plan.micro_batches)
        self.m = len(self.bounds)
        self.envs = [
            {t: row_slice(v, a, b) if t in graph.tensors and graph.is_row_shaped(t) else v for t, v in env.items()}
            for a, b in self.bounds
        ]
        self.ctxs = [dataclasses.replace(ctx, row_offset=ctx.row_offset + a, shifts=self.given) for a, _ in self.bounds]
        self.producer = {t: op for op in per_row for t in op.outputs}
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}
        self.used: dict[str, set] = {}
        self.stale: list[tuple[int, str]] = []
        self.updated: dict = {}
        self.done_once: list = []
        self.pos = [0] * self.m
        self.pending: dict = {}
        self.waiting = list(once)
        self.overlap = 0.0  # CPU seconds spent while the DSP had work
        self.rewinds = 0
        self.dsp = executor.dsp_queue() if threaded and ACCELERATOR in executor.backends else None

    # ------------------------------------------------------------ running ops
    def on_dsp(self, op) -> bool:
        return self.dsp is not None and self.plan.backend_of(op) == ACCELERATOR

    def on_cpu(self, fn, *args):
        """Run `fn` on this thread, counting its time as overlap when the DSP is busy."""
        busy = bool(self.pending)
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            if busy:
                self.overlap += time.perf_counter() - started

    def run_slice(self, i, op, ctx=None):
        """`op` on slice i, now (waiting for the DSP queue when it is a DSP op)."""
        args = (self.executor, self.plan, op, self.envs[i], ctx or self.ctxs[i], self.stats)
        return self.dsp.submit(run_op, *args).result() if self.on_dsp(op) else run_op(*args)

    def finish(self, i, op, outputs, shift):
        if shift is not None:
            self.used.setdefault(op.name, set()).add(shift)
            given = self.given.get(op.name)
            if given is not None and shift != given:
                self.stale.append((self.index[op.name], op.name))
        for t, value in outputs.items():
            if self.graph.is_row_shaped(t):
                self.envs[i][t] = value
            else:  # a weight gradient: summed over slices
                if t not in self.sums:
                    self.sums[t] = np.zeros(np.shape(as_array(value)), np.int64)
                self.sums[t] += as_array(value)
                self.counts[t] = self.counts.get(t, 0) + 1
        self.pos[i] += 1

    def ready(self, op) -> bool:
        return all(self.counts.get(t, 0) == self.m for t in op.inputs if t in self.producer)

    def run_once(self, op):
        graph, sums = self.graph, self.sums
        local = {
            t: (sums[t].astype(value_dtype(graph, self.producer[t], t)) if t in sums else self.env[t])
            for t in op.inputs
        }
        call = lambda: self.executor.call(self.plan, op, local, self.ctx, self.stats)[0]  # noqa: E731
        self.updated.update(self.dsp.submit(call).result() if self.on_dsp(op) else self.on_cpu(call))
        self.done_once.append(op)

    def sync(self, op):
        """A due range check, every slice at `op`: the full batch's shift is the largest slice
        estimate. Each slice after the first is given the largest so far (requantize uses
        max(given, its own estimate)), so only slices before the largest run twice."""
        results, common = [], None
        for i in range(self.m):
            forced = (
                None if common is None else dataclasses.replace(self.ctxs[i], shifts={**self.given, op.name: common})
            )
            results.append(self.run_slice(i, op, forced))
            if results[-1][1] is not None:
                common = results[-1][1] if common is None else max(common, results[-1][1])
        for i, (_, shift) in enumerate(results):
            if shift is not None and shift < common:
                results[i] = self.run_slice(
                    i, op, dataclasses.replace(self.ctxs[i], shifts={**self.given, op.name: common})
                )
                if self.stats is not None:
                    self.stats.rerun_slices += 1
        for i, (outputs, _) in enumerate(results):
            self.finish(i, op, outputs, common)

    def rewind(self):
        """A slice needed a larger shift than the given one at op k: give every slice that
        shift and run again from op k (slices still before it just go on). Gradients and
        updates that depended on ops from k on are dropped and redone."""
        for i, future in list(self.pending.items()):  # let the DSP queue finish first
            del self.pending[i]
            self.finish(i, self.per_row[self.pos[i]], *future.result())
        k, name = min(self.stale)
        self.given[name] = max(self.used[name])
        later = {op.name for op in self.per_row[k:]}
        for op_name in later:
            self.used.pop(op_name, None)
        for t in [t for t in self.sums if self.producer[t].name in later]:
            del self.sums[t], self.counts[t]
        for op in [
            op for op in self.done_once if any(t in self.producer and self.producer[t].name in later for t in op.inputs)
        ]:
            self.done_once.remove(op)
            self.waiting.append(op)
            for t in op.outputs:
                self.updated.pop(t, None)
        self.pos = [min(p, k) for p in self.pos]
        self.stale.clear()
        self.rewinds += 1

    # ------------------------------------------------------------ the schedule
    def run(self):
        per_row, m = self.per_row, self.m
        try:
            while True:
                progressed = False
                for i, future in list(self.pending.items()):
                    if future.done():
                        del self.pending[i]
                        self.finish(i, per_row[self.pos[i]], *future.result())
                        progressed = True
                if self.stale:
                    self.rewind()
                    continue
                for i in range(m):
                    if i in self.pending or self.pos[i] >= len(per_row) or per_row[self.pos[i]].name in self.syncs:
                        continue
                    op = per_row[self.pos[i]]
                    args = (self.executor, self.plan, op, self.envs[i], self.ctxs[i], self.stats)
                    if self.on_dsp(op):
                        self.pending[i] = self.dsp.submit(run_op, *args)
                    else:
                        self.finish(i, op, *self.on_cpu(run_op, *args))
                    progressed = True
                    break  # look at the DSP queue again first
                if self.stale:
                    continue
                for op in [op for op in self.waiting if self.ready(op)]:
                    self.waiting.remove(op)
                    self.run_once(op)
                    progressed = True
                at = self.pos[0]
                if (
                    not self.pending
                    and len(set(self.pos)) == 1
                    and at < len(per_row)
                    and per_row[at].name in self.syncs
                ):
                    self.sync(per_row[at])  # every slice is at the due check
                    progressed = True
                if not self.pending and not self.waiting and all(p >= len(per_row) for p in self.pos):
                    break
                if not progressed and self.pending:
                    wait(list(self.pending.values()), return_when=FIRST_COMPLETED)
        finally:
            for future in self.pending.values():  # never leave the DSP worker mid-task
                future.exception()
        self.write_back()

    def write_back(self):
        env, graph, stats = self.env, self.graph, self.stats
        for t, total in self.sums.items():
            env[t] = total.astype(value_dtype(graph, self.producer[t], t))
        parts = [e[graph.logits] for e in self.envs]
        env[graph.logits] = (
            QTensor(np.concatenate([p.q for p in parts]), parts[0].e)
            if isinstance(parts[0], QTensor)
            else np.concatenate(parts)
        )
        env.update(self.updated)
        if stats is None:
            return
        stats.pipeline = f"{self.m} micro-batches" + (" (DSP queue on its own thread)" if self.dsp else " (serial)")
        if self.syncs:
            stats.pipeline += f", {len(self.syncs)} sync point(s) at due range checks"
        if self.rewinds:
            stats.pipeline += f", {self.rewinds} rewind(s) to a stale shift"
        stats.pipeline_syncs, stats.pipeline_ops = len(self.syncs), len(self.per_row) - len(self.syncs)
        stats.overlap_s = self.overlap
        for name, shifts in self.used.items():
            stats.shifts[name] = max(shifts)
