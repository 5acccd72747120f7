"""The scratch table a memory fitter reads: numbers only, so the memory layer holds no backend."""

from __future__ import annotations


class ScratchTable:
    """Plan.scratch_bytes of every op at each of `sizes` rows (the whole batch for an op that
    couples rows), asked once: what a memory fitter reads as its `scratch`
    (memory.fit.ScratchFn), numbers only, so the memory layer holds no backend."""

    def __init__(self, plan, sizes):
        graph = plan.graph
        self.table = {
            (op.name, rows): plan.scratch_bytes(op, rows)
            for op in graph.ops
            if not op.is_alias()
            for rows in (sizes if graph.row_local(op) else (graph.batch,))
        }

    def __call__(self, op, rows: int) -> dict:
        return self.table[(op.name, rows)]
