"""Running one op, split by rows when the plan says its working set misses fast memory.

Batch splitting (Mandheling): an int8 product over many rows streams its accumulators
and operands through DDR; run on chunks of rows that fit the DSP's VTCM (else its L2),
or the CPU's L2, it works out of fast memory. The chunk size comes from the device
profile, the op's shapes and the cost model (`plan.split_rows`, cost.py); here the
chunks run and are joined.

Numerics are the memory-planned runner's (planned.py, slices.py): every chunk of a requantized product
runs with the op's given shift, or the larger one an earlier chunk had to use, and the
largest shift used by any chunk is the op's shift; chunks that used a smaller one (the
given shift would have saturated a later chunk) run again with it, so the result is the
unsplit op's bit for bit
(`requantize` with a given shift uses max(given, estimate), which over chunks peaks at
max(given, estimate of all rows)). A product without a given shift runs whole.
Weight gradients are summed over chunks in int64, then stored in the dtype the unsplit
op has (memory/planner.py: value_dtype). Returns (outputs, the shift used or None).
"""

from __future__ import annotations

import numpy as np

from ..memory.planner import value_dtype
from ..numerics import QTensor
from .bound import run_bound
from .slices import as_array, run_rows


def op_rows(graph, op, env) -> int | None:
    """Rows of `op`'s row-shaped inputs as they are in `env` (a micro-batch may hold fewer)."""
    for t in op.inputs:
        if graph.is_row_shaped(t) and t in env:
            value = env[t]
            array = value.q if isinstance(value, QTensor) else np.asarray(value)
            if array.ndim:
                return int(array.shape[0])
    return None


def run_serial(executor, plan, env: dict, ctx, stats=None, ops=None, release: bool = False) -> dict:
    """The serial runner: `ops` (default: the whole graph) one after another, each split by
    rows where the plan says so; updates and returns `env`. The graph's own op lists at
    the plan's batch run bound once per plan (bound.py), which with `release` drops each
    tensor after its last op (bound.run_bound)."""
    graph = plan.graph
    whole = graph.ops if ops is None else ops
    if (
        whole
        and (whole is graph.ops or whole is graph.eval_ops)
        and op_rows(graph, whole[0], env) in (None, graph.batch)
    ):
        return run_bound(executor, plan, env, ctx, stats, whole, run_op, release)
    for op in ops if ops is not None else plan.graph.ops:
        outputs, shift = run_op(executor, plan, op, env, ctx, stats)
        env.update(outputs)
        if shift is not None and stats is not None:
            stats.shifts[op.name] = shift
    return env


def run_op(executor, plan, op, env, ctx, stats=None) -> tuple[dict, int | None]:
    graph = plan.graph
    n = op_rows(graph, op, env)
    requant = op.is_requant() and not op.is_alias()
    # A product whose shift is estimated this step runs whole: in chunks it would need the
    # range of all of them first, i.e. run most chunks twice, which costs more than the
    # cache saves. With adaptive rescaling that is only on its check steps.
    chunk = plan.split_rows(op, n) if n and not (requant and ctx.given_shift(op) is None) else None
    share = (n, graph.batch) if n and n != graph.batch else None
    if not chunk or chunk >= n:
        outputs, _ = executor.call(plan, op, env, ctx, stats, rows=share)
        return outputs, (ctx.take_shift(op) if requant else ctx.drop_shift(op))
    if stats is not None:
        stats.split_ops += 1
    parts: dict[int, dict] = {}
    shifts: dict[int, int] = {}

    def run_chunk(a, shift=None):
        outputs, used = run_rows(executor, plan, op, env, ctx, stats, a, min(a + chunk, n), shift)
        if used is not None:
            shifts[a] = used
        parts[a] = outputs
        if stats is not None:
            stats.split_calls += 1

    starts = range(0, n, chunk)
    given = ctx.given_shift(op) if requant else None
    for a in starts:
        # once a chunk's range has pushed the shift past the given one, the chunks after it
        # take the raised shift at once: they would be run again with it anyway (MobileNetV2
        # on the DSP: a fallback in its first chunk re-ran the product of every other chunk)
        raised = max(shifts.values(), default=None)
        run_chunk(a, raised if given is not None and raised is not None and raised > given else None)
    common = max(shifts.values()) if shifts else None
    for a in starts:
        if common is not None and shifts[a] < common:
            run_chunk(a, common)
            if stats is not None:
                stats.rerun_slices += 1
    return join(graph, op, [parts[a] for a in starts]), common


def join(graph, op, parts: list[dict]) -> dict:
    """Outputs of row slices, in row order, as one op's outputs: rows concatenated
    (one exponent), weight gradients summed exactly."""
    out = {}
    for t in parts[0]:
        values = [p[t] for p in parts]
        if graph.is_row_shaped(t):
            if isinstance(values[0], QTensor):
                es = {v.e for v in values}
                if len(es) != 1:
                    raise RuntimeError(f"{op.name}: slices of {t} ended with exponents {sorted(es)}")
                out[t] = QTensor(np.concatenate([v.q for v in values]), es.pop())
            else:
                out[t] = np.concatenate([np.asarray(v) for v in values])
        else:
            total = np.zeros(np.shape(as_array(values[0])), np.int64)
            for v in values:
                total += as_array(v)
            out[t] = total.astype(value_dtype(graph, op, t))
    return out
