"""Slicing a step by rows, shared by the split, pipelined and memory-planned runners.

`row_slice` and `as_array` cut and unwrap values (QTensor or array); `Recorded` wraps a backend so
the shift every requantizing hook used is noted (one shift per op is what lets slices be
joined bit for bit); `run_rows` runs one op on a row range of the batch with the full
batch's random bits for those rows.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..numerics import QTensor

REQUANT_HOOKS = ("requantize", "conv2d_requant_s8", "gemm_requant_s8", "conv2d_bwd_data_requant_s8",
                 "dwconv2d_requant_s8", "dwconv2d_bwd_data_requant_s8")
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


class Recorded:
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


def run_rows(executor, plan, op, env, ctx, stats, a: int, b: int, shift: int | None = None):
    """Run `op` on rows a..b of its row-shaped inputs, drawing the full batch's random bits
    for those rows; `shift` forces the op's shift. Returns (outputs, the shift used or None)."""
    graph = plan.graph
    local = {t: row_slice(env[t], a, b) if graph.is_row_shaped(t) else env[t] for t in op.inputs}
    sctx = dataclasses.replace(ctx, row_offset=ctx.row_offset + a)
    if shift is not None:
        sctx = dataclasses.replace(sctx, shifts={**(ctx.shifts or {}), op.name: shift})
    wrap = Recorded() if op.takes_range() else None
    outputs, _ = executor.call(plan, op, local, sctx, stats, wrap=wrap, rows=(b - a, graph.batch))
    return outputs, (wrap.one(op) if wrap is not None else None)
