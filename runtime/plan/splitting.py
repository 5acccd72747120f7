"""Batch splitting (Mandheling): which int8 products run in chunks of rows, and how many
rows a chunk, so their working set stays in the DSP's VTCM or L2, or the CPU's L2. The
chunks run in execute/split.py."""

from __future__ import annotations

from ..backends import PROCESSOR
from ..graph import TrainGraph
from .rates import rate_key

# the products whose working set splitting sizes: dense, pointwise and depthwise convolutions, GEMMs
PRODUCT_HOOKS = (
    "conv2d_s8",
    "gemm_s8",
    "conv2d_bwd_data_s8",
    "conv2d_bwd_weight_s8",
    "dwconv2d_s8",
    "dwconv2d_bwd_data_s8",
    "dwconv2d_bwd_weight_s8",
)


def splittable(graph: TrainGraph, op) -> bool:
    """An integer product (conv / GEMM hooks): the ops whose working set batch splitting sizes."""
    return any(h in op.hooks for h in PRODUCT_HOOKS) and graph.tensors[op.outputs[0]].dtype in (
        "int8",
        "int32",
        "int64",
    )


def working_set(graph: TrainGraph, op) -> tuple[int, int]:
    """(bytes that do not scale with rows: weights, weight gradients; bytes per row: row-shaped
    operands and results, plus the int32 accumulators of a requantized result)."""
    fixed, per_row = 0, 0
    for t in dict.fromkeys((*op.inputs, *op.outputs)):
        spec = graph.tensors[t]
        if graph.is_row_shaped(t):
            per_row += spec.nbytes // graph.batch
        else:
            fixed += spec.nbytes
    if op.is_requant():
        per_row += 4 * graph.tensors[op.outputs[0]].nbytes // graph.batch
    return fixed, per_row


def split_decision(plan, op, rows: int) -> tuple[int | None, str]:
    """(rows per chunk or None, why) for `op` of `plan` on `rows` rows: chunks whose working
    set fits a fast memory of the backend it runs on, when the cost model says the bytes
    kept out of DDR outweigh the extra calls and the join (Plan.split_rows caches it)."""
    from ..cost import split_net_seconds

    if not splittable(plan.graph, op) or op.is_alias() or not plan.graph.row_local(op):
        return None, "not a row-local int8 product"
    fixed, per_row = working_set(plan.graph, op)
    backend = plan.backend_of(op)
    results = plan.graph.tensors[op.outputs[0]].nbytes * rows // plan.graph.batch
    if getattr(plan.backends.get(backend), "blocks_for_cache", False):
        # Its kernels tile operands for the cache themselves; what still streams through
        # memory, whatever the tiles, is a requantized product's int32 accumulators.
        if not op.is_requant():
            return None, f"{backend} kernels block for the cache; no row-sized scratch to bound"
        per_row = 4 * plan.graph.tensors[op.outputs[0]].nbytes // plan.graph.batch
    levels = (
        (("dsp.vtcm", "VTCM"), ("dsp.l2", "DSP L2")) if PROCESSOR.get(backend) == "dsp" else (("cpu.l2", "CPU L2"),)
    )  # the device profile's memories of the processor it runs on
    best, why = (None, 0.0), []
    for key, label in levels:
        capacity = plan.device.size(key)
        if fixed + per_row * rows <= capacity:
            return None, f"{rows} rows fit {label} ({fixed + per_row * rows} <= {capacity} bytes)"
        fit = (capacity - fixed) // per_row
        if fit < 1:
            why.append(f"one row misses {label}")
            continue
        chunks = -(-rows // fit)
        net = split_net_seconds(
            plan.device,
            PROCESSOR.get(backend, "cpu"),
            per_row * rows,
            fixed,
            results,
            chunks,
            op.macs * rows // plan.graph.batch,
            rate_key(plan.graph, op),
        )
        why.append(f"{chunks} chunks for {label}: {net * 1e6:+.0f} us")
        if net > best[1]:
            best = (-(-rows // chunks), net)
    verdict = "; ".join(why) + " (cost model)"
    return (best[0], f"split: {verdict}") if best[0] else (None, f"not split: {verdict}")
