"""The scheduler's cost model: what an op costs on the DSP or the CPU, from the device profile.

One op on one processor takes  call_s + max(macs / macs_per_s, bytes / bytes_per_s):
a roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model", CACM 2009) plus a fixed cost per call (a FastRPC round trip on a
phone, the pipe to the emulator here, Python's dispatch on the CPU). The speeds are the
profile's `dsp.*` and `cpu.*` keys (configs/devices/*.yaml). An int8 product's MAC rate
is its kernel's own where the profile measured it (`hook_speeds`, `dsptrain calibrate`:
a depthwise convolution runs at a fraction of a dense one's rate), by its rate key
(`RATE_KEYS`: the product hook, `.pointwise` for a 1x1 convolution); else the
processor's `macs_per_s`. Three decisions read it:

- placement (plan/placement.py): a product measured on both processors runs where its
  modeled time is shorter;

- co-scheduling's micro-batch count (`micro_batch_count`): a two-stage pipeline, the
  DSP's ops and the CPU's, over m micro-batches takes max(D, C) + min(D, C) / m; each
  extra micro-batch repeats every per-slice op's call and adds one int64 pass over the
  weight gradients (their sum over slices). m = 1 (serial) unless a larger m wins.
- batch splitting's check (`split_net_seconds`): a chunk whose working set fits a fast
  memory keeps the bytes that would stream through DDR about twice (the product writes
  its accumulators, the epilogue reads them back) in that memory, taken as free, which
  saves time only as far as the op was memory-bound (the roofline); the
  chunks cost a call each, re-read the fixed operands (weights), and their results are
  copied once more when joined on the host. Split only when the saving is larger.

These are estimates for choosing, not measurements: `bench/bench_ablation.py` measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .backends import PROCESSOR

MAX_MICRO_BATCHES = 8  # the search's bound; the model, not this, picks the count

# The int8 products whose MAC rate a profile may measure per kernel (hook_speeds): the
# product hooks a recipe's op names (op.hooks; a fused `*_requant_s8` is its product's).
# Each hook is one pass (forward, backward data, weight gradient); a convolution's hooks
# have a `.pointwise` key too, for 1x1 kernels (the GEMM on the pixels, no patches).
RATED_HOOKS = (
    "conv2d_s8",
    "conv2d_bwd_data_s8",
    "conv2d_bwd_weight_s8",
    "dwconv2d_s8",
    "dwconv2d_bwd_data_s8",
    "dwconv2d_bwd_weight_s8",
    "gemm_s8",
)
POINTWISE = ".pointwise"
RATE_KEYS = RATED_HOOKS + tuple(h + POINTWISE for h in RATED_HOOKS if h.startswith("conv2d"))


def rated_hook(hook: str) -> str | None:
    """The RATED_HOOKS product `hook` computes (a fused `*_requant_s8` is its product's), or None."""
    base = hook.replace("_requant_s8", "_s8")
    return base if base in RATED_HOOKS else None


@dataclass(frozen=True)
class Speeds:
    """One processor's speeds: the roofline's rates, the call cost, and the measured MAC
    rate of each product by rate key (hook_macs_per_s, from the profile's hook_speeds)."""

    macs_per_s: float
    bytes_per_s: float
    call_s: float
    hook_macs_per_s: dict = field(default_factory=dict)

    def rate(self, key: str | None) -> tuple[float, str]:
        """(MACs per second, where it comes from) of a product with rate key `key`: its own
        measured rate, a pointwise key falling back to its hook's, else the processor's."""
        for k in (key, key.removesuffix(POINTWISE)) if key else ():
            if k in self.hook_macs_per_s:
                return self.hook_macs_per_s[k], f"measured {k}"
        return self.macs_per_s, "macs_per_s"

    def seconds(self, macs: int, nbytes: int, key: str | None = None, calls: int = 1) -> float:
        """The roofline plus `calls` fixed costs (a composed op calls its kernel once per part:
        rates.kernel_calls)."""
        return calls * self.call_s + max(macs / self.rate(key)[0], nbytes / self.bytes_per_s)


def speeds(profile, processor: str) -> Speeds:
    """The profile's speeds of `processor` (a profile part, backends.PROCESSOR: "dsp";
    anything else runs on the CPU). The DSP's measured rates are MACs per cycle on the
    critical path (QEMU's packets), made per second at the profile's dsp.clock_hz."""
    if processor == "dsp":
        part, measured = profile.dsp, profile.hook_speeds.dsp
        hooks = {k: v * part.clock_hz for k, v in measured.items()}
    else:
        part, hooks = profile.cpu, dict(profile.hook_speeds.cpu)
    return Speeds(part.macs_per_s, part.bytes_per_s, part.call_s, hooks)


def measured_on_both(profile, key: str | None) -> bool:
    """Has the profile measured the product of rate key `key` on the DSP and on the CPU?
    Placement compares the processors only then: the generic rates are estimates of
    different machines, measured on neither (profiles without hook_speeds keep today's order)."""
    if key is None:
        return False
    hs = profile.hook_speeds
    return all(any(k in part for k in (key, key.removesuffix(POINTWISE))) for part in (hs.dsp, hs.cpu))


@dataclass(frozen=True)
class PipelineWork:
    """What co-scheduling would overlap, in numbers (plan.Plan.pipeline_work): for each op a
    micro-batch runs, then each run once after them (the updates), (backend name, MACs,
    bytes moved, runs once per micro-batch, rate key or None, kernel calls); and the elements of the
    weight gradients the slices' sums add up. Numbers only: the cost model reads no plan
    and no backend."""

    ops: tuple
    grad_elements: int


def micro_batch_count(work: PipelineWork | None, profile, batch: int) -> tuple[int, str]:
    """(micro-batches, why) for co-scheduling a step of `work` (None: an op couples rows
    outside the update, so the step cannot be pipelined), from the profile's speeds."""
    if work is None:
        return 1, "an op couples rows outside the update"
    stage = {"dsp": 0.0, "cpu": 0.0}
    per_slice = 0.0  # what one more micro-batch adds: its calls, its gradient sum
    part = {where: speeds(profile, where) for where in stage}
    for backend, macs, nbytes, sliced, key, calls in work.ops:
        where = PROCESSOR.get(backend, "cpu")  # the profile part it runs on
        fast = part[where]
        stage[where] += fast.seconds(macs, nbytes, key, calls)
        if sliced:
            per_slice += calls * fast.call_s
    # the slices' weight gradients are summed in int64 on the host: read and write 8 bytes each
    per_slice += 2 * 8 * work.grad_elements / speeds(profile, "cpu").bytes_per_s
    d, c = stage["dsp"], stage["cpu"]

    def total(m: int) -> float:
        return d + c if m == 1 else max(d, c) + min(d, c) / m + (m - 1) * per_slice

    best = min(range(1, min(MAX_MICRO_BATCHES, batch) + 1), key=total)
    why = (
        f"cost model ({profile.name}): DSP {d * 1e3:.3g} ms, CPU {c * 1e3:.3g} ms per batch, "
        f"{per_slice * 1e3:.3g} ms per extra micro-batch; serial {total(1) * 1e3:.3g} ms, "
        f"{best} micro-batches {total(best) * 1e3:.3g} ms"
    )
    return best, why


def grads_of(graph, ops) -> list[str]:
    """Weight gradients `ops` produce (summed over micro-batches)."""
    return [t for op in ops for t in op.outputs if graph.tensors[t].role in ("grad", "accum")]


def grad_elements(graph, names) -> int:
    """Elements of the tensors `names` of `graph`."""
    return sum(graph.tensors[t].nbytes // np.dtype(graph.tensors[t].dtype).itemsize for t in names)


def split_net_seconds(
    profile, processor: str, streamed: int, fixed: int, results: int, chunks: int, macs: int = 0, key: str | None = None
) -> float:
    """Seconds saved (> 0) or lost by running an op of `macs` in `chunks` chunks whose working
    set fits a fast memory: `streamed` bytes kept out of DDR (counted twice), `fixed` bytes
    re-read by every extra chunk, `results` bytes copied once more by the join (on the host
    CPU). By the roofline, keeping bytes in fast memory saves time only where the op was
    memory-bound: the saving is what the DDR traffic took beyond the op's compute time
    (at the product's measured rate, rate key `key`, where the profile has one)."""
    fast = speeds(profile, processor)
    saving = max(0.0, 2 * streamed / fast.bytes_per_s - macs / fast.rate(key)[0])
    cost = (chunks - 1) * (fast.call_s + fixed / fast.bytes_per_s) + 2 * results / speeds(profile, "cpu").bytes_per_s
    return saving - cost


# ---------------------------------------------------------------- the DSP's time, modeled
# QEMU has no cycle model, but its packet counters are exact: each op reports the
# packets it ran (cost.packets) and the packets on its critical path when its work is
# split across the profile's HVX threads (cost.critical, dsp_kernels/dispatch.c: each
# share runs on its own worker thread and counts its own packets, dsp_kernels/threads.c). A
# Hexagon hardware thread issues at most one packet per thread cycle (Hexagon V66
# Programmer's Reference Manual 80-N2040-42 and V66 HVX Programmer's Reference
# 80-N2040-44: a packet of up to four instructions per cycle, HVX contexts each fed by
# one thread), so packets / clock is a lower bound on an op's compute time: stalls
# (L2 misses, VTCM contention) are not in it. The DDR term is the roofline's: the
# bytes the op reads and writes in the arena over dsp.bytes_per_s. A call to the DSP
# (one batch of ops: a FastRPC round trip) adds dsp.call_s.


@dataclass(frozen=True)
class DspTime:
    """Modeled seconds of DSP work: compute (packets / clock), DDR-bound ops' excess, calls."""

    compute_s: float
    memory_s: float  # what DDR traffic adds beyond compute (ops where bytes dominate)
    call_s: float

    @property
    def seconds(self) -> float:
        return self.compute_s + self.memory_s + self.call_s


def dsp_op_seconds(profile, critical_packets: int, nbytes: int) -> float:
    """One op on the DSP: max(packets on its critical path / clock, bytes / DDR bandwidth)."""
    dsp = profile.dsp
    return max(critical_packets / dsp.clock_hz, nbytes / dsp.bytes_per_s)


def dsp_model_time(profile, costs, calls: int) -> DspTime:
    """The modeled DSP time of ops run: `costs` are (op, packets, critical, bytes) records
    (DspBackend.cost_log), `calls` the transport calls that ran them."""
    dsp = profile.dsp
    compute = memory = 0.0
    for _, _, critical, nbytes in costs:
        c, m = critical / dsp.clock_hz, nbytes / dsp.bytes_per_s
        compute += c
        memory += max(0.0, m - c)
    return DspTime(compute, memory, calls * dsp.call_s)


def modeled_step_seconds(dsp_s: float, cpu_s: float, micro_batches: int) -> float:
    """A step in modeled time: the DSP's modeled seconds and the CPU's (measured) ones,
    serial when micro_batches == 1, else overlapped as micro_batch_count's pipeline
    model has it: max(D, C) + min(D, C) / m."""
    if micro_batches <= 1:
        return dsp_s + cpu_s
    return max(dsp_s, cpu_s) + min(dsp_s, cpu_s) / micro_batches
