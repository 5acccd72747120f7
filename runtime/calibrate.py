"""`dsptrain calibrate`: each int8 product's MAC rate, measured, written into a device profile.

The cost model (cost.py) gives every product of a processor one MAC rate unless the
profile's `hook_speeds` holds the product's own, by rate key (cost.RATE_KEYS: the product
hook, `.pointwise` for 1x1 convolutions). This measures them on representative shapes:
MobileNetV2's depthwise and pointwise convolutions (torchvision's definition at 32 x 32
input: the stem's stride 2 leaves 16 x 16), VGG-11's 3 x 3 convolutions at 32 x 32, and
linear layers; each shape weighted by the times its model has it, so a rate is the
model's MACs over the model's time in that kernel.

- CPU: the CPU backend's hook, timed (the fastest of `repeats` calls after a warm one: on
  a shared machine others' load only ever adds time) on this machine: MACs per second.
- DSP: the DSP backend's hook under its transport (qemu-hexagon here); QEMU's packet
  counters are exact where its wall time is not, so a rate is MACs per packet on the
  critical path across the profile's dsp.hvx_threads (cost.dsp_model_time's input): MACs
  per DSP cycle, made per second by the profile's dsp.clock_hz when read.

Forward and backward-data products run fused with NITI's requantization (round to
nearest), as a NITI step calls them; weight gradients are the plain int32 product. MACs
count every tap, padding included, as a layer's MAC count does (graph.lower).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# (H = W of the input, channels, stride, count in the model): MobileNetV2's 3 x 3 depthwise layers (pad 1)
MOBILENET_DW = (
    (16, 32, 1, 1),
    (16, 96, 2, 1),
    (8, 144, 1, 1),
    (8, 144, 2, 1),
    (4, 192, 1, 2),
    (4, 192, 2, 1),
    (2, 384, 1, 4),
    (2, 576, 1, 2),
    (2, 576, 2, 1),
    (1, 960, 1, 3),
)
# (H, in channels, out channels, count): its pointwise expansions and projections
MOBILENET_PW = (
    (16, 32, 16, 1),
    (16, 16, 96, 1),
    (8, 96, 24, 1),
    (8, 24, 144, 2),
    (8, 144, 24, 1),
    (4, 144, 32, 1),
    (4, 32, 192, 3),
    (4, 192, 32, 2),
    (2, 192, 64, 1),
    (2, 64, 384, 4),
    (2, 384, 64, 3),
    (2, 384, 96, 1),
    (2, 96, 576, 3),
    (2, 576, 96, 2),
    (1, 576, 160, 1),
    (1, 160, 960, 3),
    (1, 960, 160, 2),
    (1, 960, 320, 1),
    (1, 320, 1280, 1),
)
# (H, in, out, count): VGG-11's 3 x 3 convolutions (pad 1) at 32 x 32
VGG11_CONV = (
    (32, 3, 64, 1),
    (16, 64, 128, 1),
    (8, 128, 256, 1),
    (8, 256, 256, 1),
    (4, 256, 512, 1),
    (4, 512, 512, 1),
    (2, 512, 512, 2),
)
# (in features, out features, count): linear layers (VGG-11's classifier, MobileNetV2's)
LINEAR = ((512, 512, 1), (512, 10, 1), (1280, 10, 1))


@dataclass(frozen=True)
class Case:
    """One product on one shape: its rate key, MACs, weight (times a model has it), the call,
    and the bytes its operands and result hold (as a graph's op reads and writes them)."""

    key: str
    shape: str
    macs: int
    count: int
    call: Callable  # call(backend): runs the hook once
    nbytes: int = 0


def cases(batch: int, seed: int = 0) -> list[Case]:
    """Every rate key's representative shapes at `batch` (operands random, seeded)."""
    rng = np.random.default_rng(seed)

    def s8(*shape):
        return rng.integers(-127, 128, shape, dtype=np.int8)

    return _depthwise_cases(s8, batch) + _dense_cases(s8, batch) + _linear_cases(s8, batch)


def _depthwise_cases(s8, batch: int) -> list[Case]:
    """MobileNetV2's depthwise 3x3 layers: forward, backward data, weight gradient."""
    out = []
    for hw, c, stride, count in MOBILENET_DW:
        oh = (hw + 2 - 3) // stride + 1
        x, w, err = s8(batch, hw, hw, c), s8(c, 3, 3, 1), s8(batch, oh, oh, c)
        macs, name = batch * oh * oh * c * 9, f"dw {c} {hw}x{hw} s{stride}"
        out += [
            Case(
                "dwconv2d_s8",
                name,
                macs,
                count,
                lambda b, x=x, w=w, s=stride: b.dwconv2d_requant_s8(x, w, s, 1, "round", None),
                x.nbytes + w.nbytes + err.nbytes,
            ),
            Case(
                "dwconv2d_bwd_data_s8",
                name,
                macs,
                count,
                lambda b, e=err, w=w, s=stride, hw=hw: b.dwconv2d_bwd_data_requant_s8(
                    e, w, s, 1, (hw, hw), "round", None
                ),
                err.nbytes + w.nbytes + x.nbytes,
            ),
            Case(
                "dwconv2d_bwd_weight_s8",
                name,
                macs,
                count,
                lambda b, e=err, x=x, s=stride: b.dwconv2d_bwd_weight_s8(e, x, s, 1, (3, 3)),
                err.nbytes + x.nbytes + 4 * w.size,
            ),
        ]
    return out


def _dense_cases(s8, batch: int) -> list[Case]:
    """MobileNetV2's pointwise and VGG-11's 3x3 convolutions: the three passes each."""
    out = []
    dense = [(hw, ci, co, 1, 0, count, ".pointwise") for hw, ci, co, count in MOBILENET_PW] + [
        (hw, ci, co, 3, 1, count, "") for hw, ci, co, count in VGG11_CONV
    ]
    for hw, ci, co, k, pad, count, suffix in dense:
        x, w, err = s8(batch, hw, hw, ci), s8(co, k, k, ci), s8(batch, hw, hw, co)
        macs, name = batch * hw * hw * co * k * k * ci, f"{k}x{k} {ci}->{co} {hw}x{hw}"
        out += [
            Case(
                "conv2d_s8" + suffix,
                name,
                macs,
                count,
                lambda b, x=x, w=w, p=pad: b.conv2d_requant_s8(x, w, 1, p, "round", None),
                x.nbytes + w.nbytes + err.nbytes,
            ),
            Case(
                "conv2d_bwd_data_s8" + suffix,
                name,
                macs,
                count,
                lambda b, e=err, w=w, p=pad, hw=hw: b.conv2d_bwd_data_requant_s8(e, w, 1, p, (hw, hw), "round", None),
                err.nbytes + w.nbytes + x.nbytes,
            ),
            Case(
                "conv2d_bwd_weight_s8" + suffix,
                name,
                macs,
                count,
                lambda b, e=err, x=x, p=pad, k=k: b.conv2d_bwd_weight_s8(e, x, 1, p, (k, k)),
                err.nbytes + x.nbytes + 4 * w.size,
            ),
        ]
    return out


def _linear_cases(s8, batch: int) -> list[Case]:
    """The classifiers' linear layers (forward)."""
    out = []
    for fin, fout, count in LINEAR:
        x, w = s8(batch, fin), s8(fout, fin)
        out.append(
            Case(
                "gemm_s8",
                f"linear {fin}->{fout}",
                batch * fin * fout,
                count,
                lambda b, x=x, w=w: b.gemm_requant_s8(x, w, "round", None),
                x.nbytes + w.nbytes + batch * fout,
            )
        )
    return out


def time_cpu(backend, case: Case, repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls of `case` on `backend`, after a warm call."""
    case.call(backend)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        case.call(backend)
        times.append(time.perf_counter() - started)
    return min(times)


def count_dsp(backend, case: Case) -> int:
    """Critical-path packets of one call of `case` on the DSP backend (every descriptor it ran)."""
    backend.take_cost_log()
    case.call(backend)
    log, _ = backend.take_cost_log()
    return sum(critical for _, _, critical, _ in log)


def rates(per_case: dict[Case, float]) -> dict[str, float]:
    """Per rate key: weighted MACs over weighted cost (seconds or packets) of its cases."""
    macs: dict[str, float] = {}
    cost: dict[str, float] = {}
    for case, c in per_case.items():
        macs[case.key] = macs.get(case.key, 0) + case.count * case.macs
        cost[case.key] = cost.get(case.key, 0) + case.count * c
    return {key: macs[key] / cost[key] for key in macs if cost[key] > 0}


def measure(part: str, backend, batch: int, repeats: int, only=None, progress=None) -> tuple[dict, list[dict]]:
    """({rate key: rate}, rows per case) of `backend` on processor part `part` ("cpu": MACs
    per second; "dsp": MACs per critical-path packet)."""
    per_case, rows = {}, []
    for case in cases(batch):
        if only and case.key not in only:
            continue
        cost = time_cpu(backend, case, repeats) if part == "cpu" else count_dsp(backend, case)
        per_case[case] = cost
        rows.append(
            {
                "part": part,
                "key": case.key,
                "shape": case.shape,
                "macs": case.macs,
                "count": case.count,
                "cost": cost,
                "rate": case.macs / cost if cost else float("nan"),
            }
        )
        if progress:
            progress(rows[-1])
    return rates(per_case), rows


# ---------------------------------------------------------------- writing the profile

MARK = "# hook_speeds: written by `dsptrain calibrate`"


def speeds_block(speeds) -> str:
    """The profile's `hook_speeds:` block (config.HookSpeeds) as YAML text, one rate a line."""
    lines = [
        f"{MARK} (run it again to measure again; it rewrites this block).",
        "#   cpu: int8 MACs per second, each product's fastest call on the CPU kernels of the machine it ran on",
        "#   dsp: int8 MACs per DSP cycle on the critical path (the packets at dsp.hvx_threads threads)",
        "hook_speeds:",
        "  measured:" + ("" if speeds.measured else " {}"),
    ]
    # a JSON string is a YAML double-quoted one
    lines += [f"    {part}: {json.dumps(note)}" for part, note in sorted(speeds.measured.items())]
    for part, fmt in (("cpu", "{:.3e}"), ("dsp", "{:.2f}")):
        values = getattr(speeds, part)
        lines.append(f"  {part}:" + ("" if values else " {}"))
        lines += [f"    {key}: {fmt.format(values[key])}" for key in sorted(values)]
    return "\n".join(lines) + "\n"


def with_speeds_block(text: str, block: str) -> str:
    """`text` (a profile's YAML) with its hook_speeds block (and the comment above it) replaced
    by `block`, or `block` appended; everything else is kept as written, comments included."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("hook_speeds:")), None)
    if start is None:
        return text + ("" if text.endswith("\n") or not text else "\n") + block
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in (" ", "\n")), len(lines))
    while (
        start > 0
        and lines[start - 1].startswith("#")
        and (lines[start - 1].startswith(MARK) or lines[start - 1].startswith("#   "))
    ):
        start -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def provenance(part: str, batch: int, dsp_threads: int) -> str:
    """One line: when, on what, at which batch (and, for the CPU, load: call it before
    measuring) a part's rates were measured."""
    import os

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if part == "dsp":
        return f"{when}, batch {batch}, {dsp_threads} HVX threads"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{when}, batch {batch}, {platform.machine()} {os.cpu_count()} cores, 1-minute load {load:.2f} at the start"


def write_profile(source: Path, out: Path, speeds) -> None:
    """`source`'s text with `speeds` as its hook_speeds block, written to `out` atomically
    after the result is loaded and checked as a profile (config.load_device)."""
    from .config import load_device

    text = with_speeds_block(source.read_text(), speeds_block(speeds))
    out = Path(out)
    tmp = out.with_name(f".{out.name}.calibrate.yaml")
    tmp.write_text(text)
    try:
        load_device(str(tmp))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
