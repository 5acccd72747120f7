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
time there is one clock pair around the walk rather than one per op: together with
reading a requantizing hook's shift from its result instead of through a recording proxy
(slices.Recorded), that took the walk's own Python time from 179 to 146 us a LeNet-5 step
(one thread, every native call replaced by its recorded result).
"""
from __future__ import annotations

import time
from typing import NamedTuple

from ..errors import BackendError, NoSupport
from .slices import REQUANT_HOOKS, Recorded


def kernel_hook(run):
    """The backend hook of an op that is one (an algorithms/_kernel.Kernel), None for one the
    recipe runs without a backend, True for a Program (the executor makes its hook calls),
    False for an op function that calls its hooks itself."""
    return getattr(run, "hook", False)


def invoke(run, hook, backend, op, env: dict, ctx) -> dict:
    """Run op function, Kernel or Program `run` (its kernel_hook `hook`) on `backend`: a
    Kernel's or a Program's hooks are called from here, so the recipe never holds the backend."""
    if hook is False:    # an op function that calls its backend's hooks itself
        return run(backend, op, env, ctx)
    if hook is True:     # a Program: the recipe's generator yields the hook calls, made here
        return run_program(backend, run.steps(op, env, ctx))
    if hook:             # the recipe maps the tensors; the backend's kernel is called from here
        return run.result(op, env, ctx, getattr(backend, hook)(*run.args(op, env, ctx)))
    return run.result(op, env, ctx, None)   # an op the recipe runs without a backend (a reshape)


def run_program(backend, steps) -> dict:
    """Make each hook call `(hook, *args)` the generator `steps` yields on `backend`, sending
    back its result; returns what the generator returns (the op's outputs). A hook the
    backend lacks (NotImplementedError, backends/base.py) is a NoSupport: the op goes to
    the next backend, as placement would have sent it had it known the operands."""
    try:
        call = next(steps)
        while True:
            call = steps.send(getattr(backend, call[0])(*call[1:]))
    except StopIteration as done:
        return done.value
    except NotImplementedError as exc:
        raise NoSupport(backend.name, str(exc)) from None


class BoundOp(NamedTuple):
    op: object
    fn: object            # algorithms/<recipe>.OPS[op.kind]
    hook: object          # kernel_hook(fn)
    backend: str          # where the plan placed it
    records_shift: bool   # a requantized product: its shift goes into StepStats.shifts
    shift_in_result: bool # ... returned by its hook as (q, shift): read there, no proxy
    general: bool         # split by rows at the plan's batch: run by split.run_op
    macs: int
    bytes_moved: int


class BoundList(NamedTuple):
    ops: list                # BoundOp, in order
    backend: str | None      # the one backend every op runs on, else None
    counts: dict             # backend -> ops the list runs there (general ops left out)
    macs: dict               # backend -> their MACs
    bytes_moved: int         # their bytes


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
        fn = executor.algorithm.OPS[op.kind]
        hook = kernel_hook(fn)
        records = op.is_requant() and not op.is_alias()
        bound.append(BoundOp(op, fn, hook, plan.backend_of(op), records, records and hook in REQUANT_HOOKS,
                             bool(chunk and chunk < batch), op.macs, plan.op_bytes(op)))
    counts, macs = {}, {}
    for b in bound:
        if not b.general:
            counts[b.backend] = counts.get(b.backend, 0) + 1
            macs[b.backend] = macs.get(b.backend, 0) + b.macs
    names = {b.backend for b in bound}
    held = BoundList(bound, names.pop() if len(names) == 1 else None, counts, macs,
                     sum(b.bytes_moved for b in bound if not b.general))
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


def run_bound(executor, plan, env: dict, ctx, stats, ops, run_op) -> dict:
    """The serial runner over `ops` bound once (bound_ops); `run_op` (split.py) runs the
    ops that need the general path. Updates and returns `env`."""
    backends, faulted = executor.backends, executor._faulted
    integer = ctx.recipe.integer
    clock = time.perf_counter
    bound = bound_ops(executor, plan, ops)
    one = bound.backend   # every op on one backend: its time is taken around the whole walk
    profiler = executor.profiler   # `dsptrain profile`: each op's clock reported (None: off)
    if stats is not None:
        for name, count in bound.counts.items():
            stats.ops_on[name] = stats.ops_on.get(name, 0) + count
            if integer:
                stats.int8_macs[name] = stats.int8_macs.get(name, 0) + bound.macs[name]
            else:
                stats.fp32_flops += 2 * bound.macs[name]
        stats.bytes_moved += bound.bytes_moved
    elsewhere = 0.0   # seconds of the walk that ops run by run_op or a fallback counted themselves
    walk_started = clock()
    for b in bound.ops:
        op = b.op
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
            shift = wrap = None
            try:
                if b.shift_in_result:   # (q, shift) from the hook itself
                    fn = b.fn
                    out = getattr(backend, b.hook)(*fn.args(op, env, ctx))
                    shift = int(out[1])
                    outputs = fn.result(op, env, ctx, out)
                else:
                    wrap = Recorded() if b.records_shift else None
                    outputs = invoke(b.fn, b.hook, wrap(backend) if wrap is not None else backend, op, env, ctx)
            except BackendError as exc:
                backend.current_op = None
                spent = clock() - started
                executor.count_time(stats, backend.name, spent)
                if stats is not None:
                    _uncount(stats, b, integer)
                # the fallback down the priority order, as Executor.call does it
                name = executor.fall_back(plan, op, b.backend, exc, stats)
                wrap = Recorded() if b.records_shift else None
                outputs, name = executor.call(plan, op, env, ctx, stats, wrap=wrap, backend=name)
                elsewhere += clock() - started
            else:
                backend.current_op = None
                if one is None and stats is not None:
                    times = stats.backend_time_s
                    times[backend.name] = times.get(backend.name, 0.0) + clock() - started
                if profiler is not None:
                    profiler.op_done(plan, op, backend, started, clock() - started)
            if wrap is not None:
                shift = wrap.one(op)
        env.update(outputs)
        if shift is not None and stats is not None:
            stats.shifts[op.name] = shift
    if one is not None and stats is not None:
        name = backends[one].name
        times = stats.backend_time_s
        times[name] = times.get(name, 0.0) + clock() - walk_started - elsewhere
    return env
