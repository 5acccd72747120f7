"""The serial runner's ops bound once per plan: each op's function, backend and counted
work looked up the first time a plan runs an op list, not on every step.

A LeNet-5 step is 34 ops of 3-400 us each. Finding each op's rows, its split, its
backend, its function and its byte count on every call cost about 15 us an op, half a
millisecond a step (an eighth of the step at one thread). Bound, a step walks a list of
tuples. An op the plan may split by rows, an op whose backend already failed in this step,
and an environment whose batch is not the plan's go through split.run_op as before; the
outputs and the StepStats are the same either way.

What the bound ops count (ops per backend, int8 MACs, bytes moved) is summed once per
list and added once per step, and when the whole list runs on one backend the step's
time there is one clock pair around the walk rather than one per op. A requantized
product's shift is the one its op function noted (StepContext.note_shift), read here
without a proxy in front of the backend.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from ..errors import BackendError, NoSupport


def call_op(fn, backend, op, env: dict, ctx) -> dict:
    """`op`'s function `fn` (algorithms/<recipe>.OPS[op.kind]) on `backend`: its outputs. A
    hook the backend lacks (NotImplementedError, backends/base.py) is a NoSupport: the op
    goes to the next backend, as placement would have sent it had it known the operands.
    (run_bound makes the same call inline: one Python frame less an op.)"""
    try:
        return fn(backend, op, env, ctx)
    except NotImplementedError as exc:
        raise lacking(backend, exc) from None


def lacking(backend, exc: NotImplementedError) -> NoSupport:
    """The NoSupport of a hook `backend` lacks."""
    return NoSupport(backend.name, str(exc))


class BoundOp(NamedTuple):
    op: object
    fn: object  # algorithms/<recipe>.OPS[op.kind]
    backend: str  # where the plan placed it
    records_shift: bool  # a requantized product: its shift goes into StepStats.shifts
    notes_shift: bool  # its function notes a shift (a product or a range hook): taken after it
    general: bool  # split by rows at the plan's batch: run by split.run_op
    macs: int
    bytes_moved: int


class BoundList(NamedTuple):
    ops: list  # BoundOp, in order
    backend: str | None  # the one backend every op runs on, else None
    counts: dict  # backend -> ops the list runs there (general ops left out)
    macs: dict  # backend -> their MACs
    bytes_moved: int  # their bytes
    last_uses: list  # per op: the tensors no later op of the list reads or writes


def last_uses(ops) -> list[tuple[str, ...]]:
    """Per op of `ops`, the tensors it is the last op to read or write."""
    last = {}
    for i, op in enumerate(ops):
        for t in (*op.inputs, *op.outputs):
            last[t] = i
    out: list[list[str]] = [[] for _ in ops]
    for t, i in last.items():
        out[i].append(t)
    return [tuple(ts) for ts in out]


def bound_ops(executor, plan, ops) -> BoundList:
    """`ops` (a list the plan's graph holds: its ops or eval_ops) bound for `executor`, cached on the plan."""
    cache = plan.stats.setdefault("bound_ops", {})
    key = (id(ops), id(executor.algorithm))
    held = cache.get(key)
    if held is not None and held[0] is ops:
        return held[1]
    batch = plan.graph.batch
    bound = []
    for op in ops:
        chunk = plan.split_rows(op, batch)
        records = op.is_requant() and not op.is_alias()
        bound.append(
            BoundOp(
                op,
                executor.algorithm.OPS[op.kind],
                plan.backend_of(op),
                records,
                records or op.takes_range(),
                bool(chunk and chunk < batch),
                op.macs,
                plan.op_bytes(op),
            )
        )
    counts, macs = {}, {}
    for b in bound:
        if not b.general:
            counts[b.backend] = counts.get(b.backend, 0) + 1
            macs[b.backend] = macs.get(b.backend, 0) + b.macs
    names = {b.backend for b in bound}
    held = BoundList(
        bound,
        names.pop() if len(names) == 1 else None,
        counts,
        macs,
        sum(b.bytes_moved for b in bound if not b.general),
        last_uses(ops),
    )
    cache[key] = (ops, held)
    return held


def _uncount(stats, b: BoundOp, integer: bool) -> None:
    """Take a bound op's share out of the list's totals: it was counted where it ran instead."""
    stats.ops_on[b.backend] -= 1
    if not stats.ops_on[b.backend]:
        del stats.ops_on[b.backend]
    if integer:
        stats.int8_macs[b.backend] -= b.macs
        if not stats.ops_on.get(b.backend):
            del stats.int8_macs[b.backend]
    else:
        stats.fp32_flops -= 2 * b.macs
    stats.bytes_moved -= b.bytes_moved


def _count_list(stats, bound: BoundList, integer: bool) -> None:
    """Add the bound list's work to `stats` once for the step."""
    for name, count in bound.counts.items():
        stats.ops_on[name] = stats.ops_on.get(name, 0) + count
        if integer:
            stats.int8_macs[name] = stats.int8_macs.get(name, 0) + bound.macs[name]
        else:
            stats.fp32_flops += 2 * bound.macs[name]
    stats.bytes_moved += bound.bytes_moved


def run_bound(executor, plan, env: dict, ctx, stats, ops, run_op, release: bool = False) -> dict:
    """The serial runner over `ops` bound once (bound_ops); `run_op` (split.py) runs the
    ops that need the general path. Updates and returns `env`. With `release`, a tensor
    leaves `env` after its last op, so its memory goes back as the step runs (the step's
    peak is then its live tensors', not all of them): what `env` held before the walk (the
    weights and state, the input) and the logits stay."""
    backends, faulted = executor.backends, executor._faulted
    integer = ctx.recipe.integer
    clock = time.perf_counter
    bound = bound_ops(executor, plan, ops)
    one = bound.backend  # every op on one backend: its time is taken around the whole walk
    profiler = executor.profiler  # `dsptrain profile`: each op's clock reported (None: off)
    if stats is not None:
        _count_list(stats, bound, integer)
    elsewhere = 0.0  # seconds of the walk that ops run by run_op or a fallback counted themselves
    keep = frozenset((*env, plan.graph.logits)) if release else frozenset()
    walk_started = clock()
    for b, done in zip(bound.ops, bound.last_uses):
        op = b.op
        shift = None
        if b.general or b.backend in faulted:
            started = clock()
            if not b.general and stats is not None:
                _uncount(stats, b, integer)
            outputs, shift = run_op(executor, plan, op, env, ctx, stats)
            elsewhere += clock() - started
        else:
            backend = backends[b.backend]
            started = clock()
            backend.current_op = op
            try:
                try:
                    outputs = b.fn(backend, op, env, ctx)  # call_op, inline
                except NotImplementedError as lacked:
                    raise lacking(backend, lacked) from None
            except BackendError as exc:
                backend.current_op = None
                spent = clock() - started
                executor.count_time(stats, backend.name, spent)
                if stats is not None:
                    _uncount(stats, b, integer)
                # the fallback down the priority order, as Executor.call does it
                name = executor.fall_back(plan, op, b.backend, exc, stats)
                outputs, name = executor.call(plan, op, env, ctx, stats, backend=name)
                elsewhere += clock() - started
            else:
                backend.current_op = None
                if one is None and stats is not None:
                    times = stats.backend_time_s
                    times[backend.name] = times.get(backend.name, 0.0) + clock() - started
                if profiler is not None:
                    profiler.op_done(plan, op, backend, started, clock() - started)
            if b.notes_shift:
                shift = ctx.take_shift(op) if b.records_shift else ctx.drop_shift(op)
        env.update(outputs)
        if shift is not None and stats is not None:
            stats.shifts[op.name] = shift
        if release:
            for t in done:
                if t not in keep:
                    env.pop(t, None)
    if one is not None and stats is not None:
        name = backends[one].name
        times = stats.backend_time_s
        times[name] = times.get(name, 0.0) + clock() - walk_started - elsewhere
    return env
