"""Running one step under a memory plan: arena slots, micro-batch slices, recompute steps.

Called by Executor.run when it is given an Option (memory_fit.py). The op functions
and backends are the same as in a plain step; what changes is where results go (their
arena slots), which rows an op sees (slices of the batch, with `StepContext.row_offset`
so random bits match the full batch) and which shift a product uses (the common shift
of all slices, or the one the forward pass recorded when an op is re-run).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .memory import is_alias, is_row_shaped, range_hook, row_local, takes_range
from .numerics import QTensor

REQUANT_HOOKS = ("requantize", "conv2d_requant_s8", "gemm_requant_s8", "conv2d_bwd_data_requant_s8")
# Range hooks that return (q, exponent): the shift they used is that exponent less the one
# their operands fix (algorithms/int_residual.py, ops_ref.py).
EXPONENT_HOOKS = {
    "add_align_s8": lambda a, ea, b, eb, *rest, **kw: max(ea, eb),
    "avgpool_global_s8": lambda x, e, *rest, **kw: e - ((x.shape[1] * x.shape[2]).bit_length() - 1),
}


class ShiftRecorder:
    """A backend seen through a proxy that notes the shift every requantizing hook returns."""

    def __init__(self, backend):
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "shifts", [])

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if name in EXPONENT_HOOKS:
            def recorded_exponent(*args, **kwargs):
                q, e = attr(*args, **kwargs)
                self.shifts.append(int(e - EXPONENT_HOOKS[name](*args, **kwargs)))
                return q, e
            return recorded_exponent
        if name not in REQUANT_HOOKS:
            return attr

        def recorded(*args, **kwargs):
            q, shift = attr(*args, **kwargs)
            self.shifts.append(int(shift))
            return q, shift
        return recorded

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)


def _rows(value, a: int, b: int):
    return QTensor(value.q[a:b], value.e) if isinstance(value, QTensor) else value[a:b]


def _array(value):
    return value.q if isinstance(value, QTensor) else np.asarray(value)


class _Recorded:
    """`wrap` for Executor.call: wraps the backend, remembers the proxy's shifts."""

    def __init__(self):
        self.shifts: list[int] = []

    def __call__(self, backend):
        proxy = ShiftRecorder(backend)
        object.__setattr__(proxy, "shifts", self.shifts)
        return proxy

    def one(self, op) -> int | None:
        if not self.shifts:
            return None
        if len(set(self.shifts)) != 1:
            raise RuntimeError(f"{op.name} requantized {len(self.shifts)} times with shifts {self.shifts}: "
                               f"micro-batching and recomputation need one shift per op")
        return self.shifts[0]


def run_planned(executor, plan, option, arena, env: dict, ctx, stats=None) -> dict:
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
        if step.recompute:   # rebuild bit for bit: the forward pass's shifts, the same random keys
            sctx = dataclasses.replace(ctx, shifts={**recorded, **(ctx.shifts or {})})
            if stats is not None:
                stats.recomputed_ops += 1
        if is_alias(op):
            outputs, _ = executor.call(plan, op, env, sctx, stats)
            env.update(outputs)
        elif m < batch and row_local(graph, op):
            shift = _sliced(executor, plan, memory, op, env, sctx, stats, arena, memory.writes[i], m)
            if shift is not None and not step.recompute:
                recorded[op.name] = shift
        else:
            wrap = _Recorded()
            outputs, _ = executor.call(plan, op, env, sctx, stats, wrap=wrap if takes_range(op) else None)
            for t, value in outputs.items():
                env[t] = arena.store(memory.writes[i][t], value, t)
            if takes_range(op) and not step.recompute:
                recorded[op.name] = wrap.one(op)
        for t in memory.frees[i]:
            env.pop(t, None)
    if stats is not None:   # products only, as a plain step records (adaptive rescaling reads them)
        exponent_ops = {op.name for op in graph.ops if range_hook(op)}
        stats.shifts.update({k: v for k, v in recorded.items() if v is not None and k not in exponent_ops})
        stats.arena_high_water_bytes = arena.high_water
        stats.spilled_bytes = sum(arena.spilled.values())
    return env


def run_rows(executor, plan, op, env, ctx, stats, a: int, b: int, shift: int | None = None):
    """Run `op` on rows a..b of its row-shaped inputs, drawing the full batch's random bits
    for those rows; `shift` forces the op's shift. Returns (outputs, the shift used or None)."""
    graph = plan.graph
    local = {t: _rows(env[t], a, b) if is_row_shaped(graph, t) else env[t] for t in op.inputs}
    sctx = dataclasses.replace(ctx, row_offset=ctx.row_offset + a)
    if shift is not None:
        sctx = dataclasses.replace(sctx, shifts={**(ctx.shifts or {}), op.name: shift})
    wrap = _Recorded() if takes_range(op) else None
    outputs, _ = executor.call(plan, op, local, sctx, stats, wrap=wrap, rows=(b - a, graph.batch))
    return outputs, (wrap.one(op) if wrap is not None else None)


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
            array = _array(value)
            if is_row_shaped(graph, t):
                if t not in dest:
                    slot = arena.view(slots[t], (batch, *array.shape[1:]), array.dtype)
                    if slot is None:
                        arena.spilled[t] = array.nbytes * batch // max(b - a, 1)
                        slot = np.empty((batch, *array.shape[1:]), array.dtype)
                    dest[t] = slot
                dest[t][a:b] = array
                if isinstance(value, QTensor):
                    exponent.setdefault(t, {})[a] = value.e
            elif a == 0 and shift is None:          # a weight gradient: first slice starts the sum
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
    if shifts:   # with a given shift too: a slice it would saturate used its own, larger one
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
