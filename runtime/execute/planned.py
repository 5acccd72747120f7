"""Running one step under a memory plan: arena slots, micro-batch slices, recompute steps.

Called by Executor.run when it is given an Option (memory/fit.py). The op functions
and backends are the same as in a plain step; what changes is where results go (their
arena slots), which rows an op sees (slices of the batch, with `StepContext.row_offset`
so random bits match the full batch) and which shift a product uses (the common shift
of all slices, or the one the forward pass recorded when an op is re-run).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..numerics import QTensor
from .slices import as_array, run_rows


def run_planned(executor, plan, env: dict, ctx, stats, option, arena) -> dict:
    """The memory-planned runner: the step under `option`'s memory plan, in `arena`."""
    memory = option.memory
    graph, batch, m = memory.graph, memory.graph.batch, option.micro_batch
    arena.begin_step()
    for name, buf in memory.initial.items():
        if name in env:
            env[name] = arena.store(buf, env[name], name)
    recorded: dict[str, int] = {}
    for i, step in enumerate(memory.schedule):
        op = step.op
        sctx = ctx
        if step.recompute:  # rebuild bit for bit: the forward pass's shifts, the same random keys
            sctx = dataclasses.replace(ctx, shifts={**recorded, **(ctx.shifts or {})})
            if stats is not None:
                stats.recomputed_ops += 1
        if op.is_alias():
            outputs, _ = executor.call(plan, op, env, sctx, stats)
            env.update(outputs)
        elif m < batch and graph.row_local(op):
            shift = _sliced(executor, plan, memory, op, env, sctx, stats, arena, memory.writes[i], m)
            if shift is not None and not step.recompute:
                recorded[op.name] = shift
        else:
            outputs, _ = executor.call(plan, op, env, sctx, stats)
            shift = sctx.take_shift(op)
            for t, value in outputs.items():
                if t in memory.writes[i]:  # else no step reads it (planner: unread values)
                    env[t] = arena.store(memory.writes[i][t], value, t)
            # the fresh results go now, not while the next op runs (op_workspace counts one op's)
            outputs = value = None
            if op.takes_range() and not step.recompute:
                recorded[op.name] = shift
        for t in memory.frees[i]:
            env.pop(t, None)
    if stats is not None:  # products only, as a plain step records (adaptive rescaling reads them)
        exponent_ops = {op.name for op in graph.ops if op.range_hook()}
        stats.shifts.update({k: v for k, v in recorded.items() if v is not None and k not in exponent_ops})
        stats.arena_high_water_bytes = arena.high_water
        stats.spilled_bytes = sum(arena.spilled.values())
    return env


def _sliced(executor, plan, memory, op, env, ctx, stats, arena, slots, m) -> int | None:
    """Run `op` on slices of m rows; returns the common shift of a requantized product."""
    graph, batch = memory.graph, memory.graph.batch
    dest: dict[str, np.ndarray] = {}
    exponent: dict[str, dict[int, int]] = {}
    shifts: dict[int, int] = {}

    def run_slice(a, shift=None):
        b = min(a + m, batch)
        outputs, used = run_rows(executor, plan, op, env, ctx, stats, a, b, shift)
        if used is not None:
            shifts[a] = used
        for t, value in outputs.items():
            if t not in slots:  # no step reads it (planner: unread values)
                continue
            array = as_array(value)
            if graph.is_row_shaped(t):
                if t not in dest:
                    slot = arena.view(slots[t], (batch, *array.shape[1:]), array.dtype)
                    if slot is None:
                        arena.spilled[t] = array.nbytes * batch // max(b - a, 1)
                        slot = np.empty((batch, *array.shape[1:]), array.dtype)
                    dest[t] = slot
                dest[t][a:b] = array
                if isinstance(value, QTensor):
                    exponent.setdefault(t, {})[a] = value.e
            elif a == 0 and shift is None:  # a weight gradient: first slice starts the sum
                slot = arena.view(slots[t], array.shape, memory.dtypes[t])
                if slot is None:
                    arena.spilled[t] = array.nbytes
                    slot = np.empty(array.shape, memory.dtypes[t])
                slot[...] = array
                dest[t] = slot
            else:
                np.add(dest[t], array, out=dest[t], casting="unsafe")

    starts = range(0, batch, m)
    for a in starts:
        run_slice(a)
    common = None
    if shifts:  # with a given shift too: a slice it would saturate used its own, larger one
        common = max(shifts.values())
        for a in starts:
            if shifts[a] < common:
                run_slice(a, common)
                if stats is not None:
                    stats.rerun_slices += 1
    for t, array in dest.items():
        if t in exponent:
            es = set(exponent[t].values())
            if len(es) != 1:
                raise RuntimeError(f"{op.name}: slices of {t} ended with exponents {sorted(es)}")
            env[t] = QTensor(array, es.pop())
        else:
            env[t] = array
    return common
