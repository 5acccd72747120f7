"""Slicing a step by rows, shared by the split, pipelined and memory-planned runners.

`row_slice` and `as_array` cut and unwrap values (QTensor or array); `run_rows` runs one op
on a row range of the batch with the full batch's random bits for those rows, and returns
the shift its op function noted (one shift per op is what lets slices be joined bit for bit).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..numerics import QTensor


def row_slice(value, a: int, b: int):
    """Rows a..b of a value (a QTensor keeps its exponent, an emulated recipe's Scaled its
    one scale: algorithms/_quant.py)."""
    if isinstance(value, QTensor):
        return QTensor(value.q[a:b], value.e)
    if dataclasses.is_dataclass(value) and isinstance(getattr(value, "q", None), np.ndarray):
        return dataclasses.replace(value, q=value.q[a:b])
    return value[a:b]


def as_array(value):
    """The integer or float array of a value."""
    return value.q if isinstance(value, QTensor) else np.asarray(value)


def run_rows(executor, plan, op, env, ctx, stats, a: int, b: int, shift: int | None = None):
    """Run `op` on rows a..b of its row-shaped inputs, drawing the full batch's random bits
    for those rows; `shift` forces the op's shift. Returns (outputs, the shift used or None)."""
    graph = plan.graph
    local = {t: row_slice(env[t], a, b) if graph.is_row_shaped(t) else env[t] for t in op.inputs}
    sctx = dataclasses.replace(ctx, row_offset=ctx.row_offset + a)
    if shift is not None:
        sctx = dataclasses.replace(sctx, shifts={**(ctx.shifts or {}), op.name: shift})
    outputs, _ = executor.call(plan, op, local, sctx, stats, rows=(b - a, graph.batch))
    return outputs, (sctx.take_shift(op) if op.takes_range() else None)
