"""An op's modeled time on a processor, from the device profile's speeds (cost.py): which
measured rate a product takes (its rate key), what the op moves, and the per-op table
`dsptrain plan --ops` prints. Numbers are handed to cost.py, which reads no graph."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..backends import PROCESSOR
from ..graph import TrainGraph


def rate_key(graph: TrainGraph, op) -> str | None:
    """The rate key (cost.RATE_KEYS) of `op`'s int8 product, or None when it computes none:
    its product hook, with `.pointwise` for a 1x1 convolution; a composed product's (dilated,
    grouped) is that of the kernel it runs on (`composed_hook`)."""
    from ..cost import POINTWISE, rated_hook

    hook = next((h for h in (rated_hook(composed_hook(op, h)) for h in op.hooks) if h), None)
    if hook is not None and hook.startswith("conv2d") and kernel_of(graph, op) == (1, 1):
        return hook + POINTWISE
    return hook


def composed_hook(op, hook: str) -> str:
    """The product hook whose kernel runs `hook` where base.py / grouped_hooks.py compose it: a
    dilated conv's passes are GEMMs on gathered patches; a grouped conv's are the conv kernels'
    (undilated, per group) or the GEMM's (dilated, per group) or the depthwise kernels' (groups
    == channels, dilated or not). Other hooks are their own."""
    if hook.startswith("conv2d_dilated_"):
        return "gemm_s8"
    if hook.startswith("conv2d_grouped_"):
        plain = hook.replace("_grouped", "")
        if op.attrs.get("depthwise"):
            return "dw" + plain
        return "gemm_s8" if op.attrs.get("dilation", 1) > 1 else plain
    return hook


def kernel_calls(graph: TrainGraph, op, backend: str) -> int:
    """How many times a composed conv calls its kernel on `backend`, each a call's fixed cost
    (on the DSP a FastRPC round trip): a grouped conv once per group (grouped_hooks.py), but on
    the CPU once (cpu_ops/conv_grouped.cpp runs every group in one call); a dilated depthwise
    conv once per residue class modulo the dilation its positions meet (d / gcd(stride, d) a
    side; its backward data, a stride-1 conv of the spread err, all d * d). Other ops: once."""
    groups, dilation = op.attrs.get("groups", 1), op.attrs.get("dilation", 1)
    if groups == 1:
        return 1
    if not op.attrs.get("depthwise"):
        return 1 if backend == "cpu" else groups
    if dilation == 1 or kernel_of(graph, op) == (1, 1):
        return 1
    side = dilation if "in_hw" in op.attrs else dilation // math.gcd(op.attrs["stride"], dilation)
    return side * side


def gather_bytes(op) -> tuple[int, int]:
    """(bytes per row, bytes) a composed conv copies on the way to its kernel (a dilated conv's
    gathered patches, a grouped one's channel slices: its `workspace`), written once and read
    back once: traffic the roofline counts beside the op's tensors."""
    if op.attrs.get("dilation", 1) == 1 and op.attrs.get("groups", 1) == 1 or "workspace" not in op.attrs:
        return 0, 0
    per_row, whole = op.attrs["workspace"]
    return 2 * per_row, 2 * whole


def kernel_of(graph: TrainGraph, op) -> tuple[int, int] | None:
    """(KH, KW) of a convolution op: its `kernel` attribute (weight gradients), else its
    weight's shape (O, KH, KW, C)."""
    if "kernel" in op.attrs:
        return tuple(op.attrs["kernel"])
    for t in op.inputs:
        spec = graph.tensors.get(t)
        if spec is not None and spec.role == "weight" and len(spec.shape) == 4:
            return tuple(spec.shape[1:3])
    return None


def op_bytes(graph: TrainGraph, op) -> int:
    """Bytes `op` reads and writes at the graph's batch (a tensor updated in place: twice), its
    gathered copies included (gather_bytes), as Plan.op_bytes."""
    per_row, whole = gather_bytes(op)
    return sum(graph.tensors[t].nbytes for t in (*op.inputs, *op.outputs) if t in graph.tensors) + (
        per_row * graph.batch + whole
    )


@dataclass(frozen=True)
class OpTime:
    """One op's modeled time on the processor its backend runs on, and the rate it used."""

    op: str
    backend: str
    key: str | None  # rate key (None: no int8 product)
    macs: int
    nbytes: int
    seconds: float
    macs_per_s: float  # the MAC rate the model used
    source: str  # where the rate comes from: "measured <key>" or "macs_per_s" (the processor's)
    bytes_bound: bool  # the bytes over the bandwidth took longer than the MACs at the rate


def op_time(device, graph: TrainGraph, op, backend: str) -> OpTime:
    """`op` on `backend`'s processor under `device` (config.DeviceProfile): the roofline at the
    product's measured rate where the profile has one (cost.Speeds)."""
    from ..cost import speeds

    fast = speeds(device, PROCESSOR.get(backend, "cpu"))
    key, nbytes = rate_key(graph, op), op_bytes(graph, op)
    rate, source = fast.rate(key)
    return OpTime(
        op.name,
        backend,
        key,
        op.macs,
        nbytes,
        fast.seconds(op.macs, nbytes, key, kernel_calls(graph, op, backend)),
        rate,
        source,
        op.macs / rate < nbytes / fast.bytes_per_s,
    )


def faster_on_host(device, graph: TrainGraph, op) -> tuple[bool, str]:
    """(does the CPU run `op` in less modeled time than the DSP, why in numbers), for a
    product the profile measured on both (cost.measured_on_both); (False, "") otherwise."""
    from ..cost import measured_on_both

    key = rate_key(graph, op)
    if not measured_on_both(device, key):
        return False, ""
    dsp, cpu = op_time(device, graph, op, "dsp"), op_time(device, graph, op, "cpu")
    verdict = (
        f"profile {device.name}: {key} measured at {dsp.macs_per_s:.3g} MAC/s on the DSP, "
        f"{cpu.macs_per_s:.3g} on the CPU: {dsp.seconds * 1e3:.3g} ms vs {cpu.seconds * 1e3:.3g} ms"
    )
    return cpu.seconds < dsp.seconds, verdict


def op_times(plan) -> list[OpTime]:
    """Every op of `plan` on the backend it was placed on (needs plan.device)."""
    return [op_time(plan.device, plan.graph, op, plan.backend_of(op)) for op in plan.graph.ops if not op.is_alias()]


def modeled_totals(plan, rows: list[OpTime] | None = None) -> tuple[dict[str, float], int]:
    """({processor: modeled seconds of its ops}, how many ops took a measured rate)."""
    rows = op_times(plan) if rows is None else rows
    totals: dict[str, float] = {}
    for r in rows:
        where = PROCESSOR.get(r.backend, "cpu")
        totals[where] = totals.get(where, 0.0) + r.seconds
    return totals, sum(r.source.startswith("measured") for r in rows)


def describe_times(plan, limit: int | None = None) -> str:
    """The per-op table of modeled times (`dsptrain plan --ops`), longest first when `limit`
    keeps only that many, with each processor's total."""
    rows = op_times(plan)
    totals, _ = modeled_totals(plan, rows)
    shown = sorted(rows, key=lambda r: -r.seconds)[:limit] if limit else rows
    width = max((len(r.op) for r in shown), default=2)
    lines = [
        f"modeled time per op (profile {plan.device.name}; cost.py's roofline: call + max(MACs / rate, "
        f"bytes / bandwidth)){'' if not limit or limit >= len(rows) else f', the {limit} longest of {len(rows)}'}:",
        f"  {'op':<{width}}  where       ms       MACs      bytes  rate (MAC/s) from (bytes: DDR-bound)",
    ]
    for r in shown:
        rate = f"{r.macs_per_s:12.3g} {r.source}{' (bytes)' if r.bytes_bound else ''}" if r.macs else f"{'':12} bytes"
        lines.append(f"  {r.op:<{width}}  {r.backend:<4} {r.seconds * 1e3:9.4f} {r.macs:10.3g} {r.nbytes:10.3g} {rate}")
    lines.append(
        "  total: "
        + ", ".join(f"{where} {s * 1e3:.4g} ms" for where, s in sorted(totals.items()))
        + " (serial; co-scheduling overlaps them: micro-batches "
        f"{plan.micro_batches}, {plan.micro_batches_reason})"
    )
    return "\n".join(lines)
