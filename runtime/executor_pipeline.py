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
knows alone. The pipeline therefore runs only when every requantized op has a *given*
shift (self-adaptive rescaling, rescale.py, supplies them between its checks); every
slice uses it, and `requantize`'s rule (backends/base.py) makes the result the same as
the full batch's with that given shift: a slice whose accumulators need a larger shift
uses it and says so. If any slice did, the slices disagree; the pipelined attempt is
dropped (nothing was written to the caller's env) and the step runs unpipelined, where
the full batch uses max(given, estimate) -- exactly what slices would agree on. Random
bits follow rows (`StepContext.row_offset`), weight gradients are summed exactly in
int64 and stored in the full batch's dtype. So the pipelined step equals the same step
run serially, slice by slice (`threaded=False`), and the unsplit step, bit for bit.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import FIRST_COMPLETED, wait

import numpy as np

from .memory import is_alias, is_requant, is_row_shaped, value_dtype
from .memory_run import _array, _rows
from .numerics import QTensor
from .split import run_op


def slices(batch: int, parts: int) -> list[tuple[int, int]]:
    """`parts` near-equal row ranges covering `batch` rows."""
    parts = max(1, min(parts, batch))
    edges = [batch * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def needs_shift(op) -> bool:
    return is_requant(op) and not is_alias(op)


def run_pipelined(executor, plan, env: dict, ctx, stats=None, threaded: bool = True) -> bool:
    """Run the step pipelined, updating `env`; False (env untouched) when it cannot be."""
    split = plan.pipeline_ops()
    why = None
    if split is None:
        why = "an op couples rows outside the update"
    else:
        per_row, once = split
        missing = [op.name for op in per_row if needs_shift(op) and ctx.given_shift(op) is None]
        if missing:
            why = f"no given shift for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
    if why is not None:
        if stats is not None:
            stats.pipeline = f"serial: {why}"
        return False
    graph = plan.graph
    bounds = slices(graph.batch, plan.micro_batches)
    m = len(bounds)
    envs = [{t: _rows(v, a, b) if t in graph.tensors and is_row_shaped(graph, t) else v for t, v in env.items()}
            for a, b in bounds]
    ctxs = [dataclasses.replace(ctx, row_offset=ctx.row_offset + a) for a, _ in bounds]
    producer = {t: op for op in per_row for t in op.outputs}
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    used: dict[str, set] = {}
    stale: list[str] = []
    updated: dict = {}
    pos = [0] * m
    pending: dict = {}
    waiting = list(once)
    dsp = executor.dsp_queue() if threaded and "dsp" in executor.backends else None

    def on_dsp(op) -> bool:
        return dsp is not None and plan.backend_of(op) == "dsp"

    def finish(i, op, outputs, shift):
        if shift is not None:
            used.setdefault(op.name, set()).add(shift)
            if shift != ctx.given_shift(op):
                stale.append(op.name)
        for t, value in outputs.items():
            if is_row_shaped(graph, t):
                envs[i][t] = value
            else:                                   # a weight gradient: summed over slices
                if t not in sums:
                    sums[t] = np.zeros(np.shape(_array(value)), np.int64)
                sums[t] += _array(value)
                counts[t] = counts.get(t, 0) + 1
        pos[i] += 1

    def ready(op) -> bool:
        return all(counts.get(t, 0) == m for t in op.inputs if t in producer)

    def run_once(op):
        local = {t: (sums[t].astype(value_dtype(graph, producer[t], t)) if t in sums else env[t]) for t in op.inputs}
        call = lambda: executor.call(plan, op, local, ctx, stats)[0]   # noqa: E731
        outputs = dsp.submit(call).result() if on_dsp(op) else call()
        updated.update(outputs)

    try:
        while True:
            progressed = False
            for i, future in list(pending.items()):
                if future.done():
                    del pending[i]
                    finish(i, per_row[pos[i]], *future.result())
                    progressed = True
            if stale:                                 # slices disagree: drop the attempt
                break
            for i in range(m):
                if i in pending or pos[i] >= len(per_row):
                    continue
                op = per_row[pos[i]]
                if on_dsp(op):
                    pending[i] = dsp.submit(run_op, executor, plan, op, envs[i], ctxs[i], stats)
                else:
                    finish(i, op, *run_op(executor, plan, op, envs[i], ctxs[i], stats))
                progressed = True
                break                                 # look at the DSP queue again first
            if stale:
                break
            for op in [op for op in waiting if ready(op)]:
                waiting.remove(op)
                run_once(op)
                progressed = True
            if not pending and not waiting and all(p >= len(per_row) for p in pos):
                break
            if not progressed and pending:
                wait(list(pending.values()), return_when=FIRST_COMPLETED)
    finally:
        for future in pending.values():             # never leave the DSP worker mid-task
            future.exception()
    if stale:
        if stats is not None:
            stats.pipeline = f"serial: a given shift would saturate ({', '.join(sorted(set(stale))[:3])}); re-run whole"
        return False
    for t, total in sums.items():
        env[t] = total.astype(value_dtype(graph, producer[t], t))
    logits = graph.logits
    parts = [e[logits] for e in envs]
    env[logits] = QTensor(np.concatenate([p.q for p in parts]), parts[0].e) if isinstance(parts[0], QTensor) \
        else np.concatenate(parts)
    env.update(updated)
    if stats is not None:
        stats.pipeline = f"{m} micro-batches" + (" (DSP queue on its own thread)" if dsp is not None else " (serial)")
        for name, shifts in used.items():
            stats.shifts[name] = shifts.pop()
    return True
