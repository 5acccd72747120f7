"""Placement: each op on the first backend, in priority order, that supports it and does
not decline it.

Backends are walked in priority order (dsp, cpu, ref); an op goes to the first one
that supports it and does not decline it. The DSP declines, when the CPU is there:
- under `scheduler.placement: profile` (the default), ops with a hook the device profile
  lists under `dsp.bad_at` (configs/devices/*.yaml: max-pool's data-dependent argmax and
  scatter, measured at 40-120x a GEMM's packets per byte on the emulated v66). This is
  Mandheling's split of work (Xu et al., MobiCom 2022): products on the DSP, the ops it
  is bad at on the CPU, where co-scheduling overlaps them with the DSP's next micro-batch;
  and products the profile measured on both processors (`hook_speeds`, `dsptrain
  calibrate`) whose modeled time is shorter on the CPU (rates.faster_on_host): a
  depthwise layer goes where its kernel is fastest;
- under co-scheduling, the updates (below);
- ops matching DSPTRAIN_CPU_ONLY_OPS=<regex> (by name or kind).
`scheduler.placement: first` keeps the plain first-that-supports order. Every decision
keeps its reason: DSPTRAIN_DEBUG=1 prints them, `Plan.describe()` lists them.
"""

from __future__ import annotations

import os
import re
import sys

from ..backends import ACCELERATOR, HOST
from ..graph import TrainGraph
from .plan import Placement, Plan
from .rates import faster_on_host


def cpu_only_pattern() -> re.Pattern | None:
    text = os.environ.get("DSPTRAIN_CPU_ONLY_OPS")
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        from ..errors import ConfigError

        raise ConfigError("DSPTRAIN_CPU_ONLY_OPS", None, f"{text!r} is not a regular expression: {exc}") from None


PLACEMENTS = ("profile", "first")  # scheduler.placement (config.SchedulerConfig)


def place(
    graph: TrainGraph, backends: dict, ops=None, co_schedule: bool = False, device=None, placement: str = "first"
) -> Plan:
    """Place every op of `graph` (or `ops`) on the first backend of `backends` that takes it.

    With `placement` "profile" and a `device` profile (config.DeviceProfile), ops with a hook
    in its `dsp.bad_at`, and products its measured speeds model faster on the CPU, skip the
    DSP when the CPU backend is there. With `co_schedule` and a
    DSP, the updates go to the CPU: element-wise passes over the weights with nothing to
    reuse, they are what the CPU does while the DSP works on the backward of earlier layers
    (execute/pipeline.py)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    forced_off_dsp = cpu_only_pattern()
    by_profile = placement == "profile" and device is not None
    bad_at = device.dsp.bad_at if by_profile else {}
    placement_of = {}
    for op in ops if ops is not None else graph.ops:
        declined = []
        for name, backend in backends.items():
            if (
                name == ACCELERATOR
                and forced_off_dsp
                and (forced_off_dsp.search(op.name) or forced_off_dsp.search(op.kind))
            ):
                declined.append((name, "forced off the DSP by DSPTRAIN_CPU_ONLY_OPS"))
                continue
            if name == ACCELERATOR and co_schedule and op.phase == "update" and HOST in backends:
                declined.append((name, "co-scheduling: the update runs on the CPU, beside the DSP's backward"))
                continue
            bad = [h for h in op.hooks if h in bad_at]
            if name == ACCELERATOR and bad and HOST in backends:
                declined.append(
                    (name, "; ".join(f"profile {device.name}: the DSP is bad at {h} ({bad_at[h]})" for h in bad))
                )
                continue
            host_faster, speeds = (
                faster_on_host(device, graph, op)
                if by_profile and name == ACCELERATOR and HOST in backends
                else (False, "")
            )
            if host_faster:
                declined.append((name, f"{speeds}: faster on the CPU"))
                continue
            ok, why = backend.supports(op)
            if ok:
                placement_of[op.name] = Placement(name, f"{why}; {speeds}" if speeds else why, tuple(declined))
                break
            declined.append((name, why))
        else:
            raise RuntimeError(
                f"no backend can run {op.name} ({op.kind}): " + "; ".join(f"{b}: {why}" for b, why in declined)
            )
    plan = Plan(graph, placement_of, tuple(backends), backends=dict(backends), device=device)
    if os.environ.get("DSPTRAIN_DEBUG"):
        print(plan.describe(), file=sys.stderr)
    return plan
