"""The serial runner's ops bound once per plan: each op's function, backend and counted
work looked up the first time a plan runs an op list, not on every step.

A LeNet-5 step is 34 ops of 5-800 us each. Finding each op's rows, its split, its
backend, its function and its byte count on every call cost about 15 us an op, half a
millisecond a step (an eighth of the step at one thread). Bound, a step walks a list of
tuples. An op the plan may split by rows, an op whose backend already failed in this step,
and an environment whose batch is not the plan's go through split.run_op as before; the
outputs and the StepStats are the same either way.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from ..errors import BackendError, NoSupport
from .slices import Recorded


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
    general: bool         # split by rows at the plan's batch: run by split.run_op
    macs: int
    bytes_moved: int


def bound_ops(executor, plan, ops) -> list[BoundOp]:
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
        bound.append(BoundOp(op, fn, kernel_hook(fn), plan.backend_of(op),
                             op.is_requant() and not op.is_alias(), bool(chunk and chunk < batch),
                             op.macs, plan.op_bytes(op)))
    cache[key] = (ops, bound)
    return bound


def run_bound(executor, plan, env: dict, ctx, stats, ops, run_op) -> dict:
    """The serial runner over `ops` bound once (bound_ops); `run_op` (split.py) runs the
    ops that need the general path. Updates and returns `env`."""
    backends, faulted = executor.backends, executor._faulted
    integer = ctx.recipe.integer
    clock = time.perf_counter
    for b in bound_ops(executor, plan, ops):
        op = b.op
        if b.general or b.backend in faulted:
            outputs, shift = run_op(executor, plan, op, env, ctx, stats)
        else:
            backend = backends[b.backend]
            wrap = Recorded() if b.records_shift else None
            name = b.backend
            started = clock()
            backend.current_op = op
            try:
                outputs = invoke(b.fn, b.hook, wrap(backend) if wrap is not None else backend, op, env, ctx)
            except BackendError as exc:
                backend.current_op = None
                executor.count_time(stats, backend.name, clock() - started)
                # the fallback down the priority order, as Executor.call does it
                name = executor.fall_back(plan, op, name, exc, stats)
                wrap = Recorded() if b.records_shift else None
                outputs, name = executor.call(plan, op, env, ctx, stats, wrap=wrap, backend=name)
            else:
                backend.current_op = None
                if stats is not None:
                    spent = clock() - started
                    times = stats.backend_time_s
                    times[backend.name] = times.get(backend.name, 0.0) + spent
                    stats.ops_on[name] = stats.ops_on.get(name, 0) + 1
                    if integer:
                        stats.int8_macs[name] = stats.int8_macs.get(name, 0) + b.macs
                    else:
                        stats.fp32_flops += 2 * b.macs
                    stats.bytes_moved += b.bytes_moved
            shift = wrap.one(op) if wrap is not None else None
        env.update(outputs)
        if shift is not None and stats is not None:
            stats.shifts[op.name] = shift
    return env
