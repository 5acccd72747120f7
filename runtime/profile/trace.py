"""A profiled run's timeline in the Chrome trace event format (Perfetto, chrome://tracing).

Process 1, "measured (host clock)": one lane ("thread") per backend and host thread: the
ops each thread ran on each backend (the CPU's ops on the calling thread; under
co-scheduling the DSP's on the DSP queue's worker, execute/pipeline.py, so the two lanes
overlap where the processors did), and the steps (the Trainer's step calls).

Process 2, "modeled (DSP time from packets)", when DSP ops ran: the same calls on the
modeled clock (model.py: each DSP call lasting its modeled time from QEMU's packet counts,
every other its measured one, what was ordered kept in order), each step starting where
the previous one ended. The emulator's wall time says nothing of a DSP's: this is the
timeline to read for the DSP. Its DSP lanes are named "(modeled)".

Events are complete events ("ph": "X", microseconds from the first step's start); within
a lane they never overlap. Format: "Trace Event Format", Google,
docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .model import modeled_seconds, replay
from .table import role

MEASURED, MODELED = 1, 2
PROCESS_NAMES = {MEASURED: "measured (host clock)", MODELED: "modeled (DSP time from packets)"}
STEP_LANE = "steps"


def _lane_name(backend: str, thread: str, modeled: bool = False) -> str:
    return f"{backend} on {thread}" + (" (modeled)" if modeled else "")


def _args(event) -> dict:
    op = event.op
    args = {"op": op.name, "kind": op.kind, "layer": op.layer, "role": role(op), "backend": event.backend}
    if event.rows:
        args["rows"] = f"{event.rows[0]} of {event.rows[1]}"
    if event.dsp_costs:
        args["packets"] = sum(c[1] for c in event.dsp_costs)
        args["critical_packets"] = sum(c[2] for c in event.dsp_costs)
    return args


def trace_events(recorder, device=None) -> list[dict]:
    """The trace's events: metadata naming the processes and lanes, then complete events."""
    if not recorder.steps:
        return []
    processes = {MEASURED: _measured_lanes(recorder)}
    if device is not None and any(e.dsp_costs for e in recorder.events):
        processes[MODELED] = _modeled_lanes(recorder, device)
    origin = recorder.steps[0].start_s
    out = []
    for pid, lanes in processes.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": PROCESS_NAMES[pid]}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for tid, (lane, items) in enumerate(sorted(lanes.items(), key=lambda kv: _lane_order(kv[0])), start=1):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": lane}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
            out += _complete_events(items, pid, tid, origin)
    return out


def _measured_lanes(recorder) -> dict[str, list]:
    """Lane name -> the measured steps and op calls on it (host seconds)."""
    measured: dict[str, list] = {STEP_LANE: []}
    for span in recorder.steps:
        stats = span.stats
        args = {"measured_ms": round((stats.time_s if stats is not None else span.seconds) * 1e3, 3)}
        if stats is not None and stats.pipeline:
            args["pipeline"] = stats.pipeline
        measured[STEP_LANE].append(
            {"name": f"step {span.index}", "cat": "step", "start": span.start_s, "dur": span.seconds, "args": args}
        )
    for event in recorder.events:
        measured.setdefault(_lane_name(event.backend, event.thread), []).append(
            {
                "name": event.op.name,
                "cat": role(event.op),
                "start": event.start_s,
                "dur": event.seconds,
                "args": _args(event),
            }
        )
    return measured


def _modeled_lanes(recorder, device) -> dict[str, list]:
    """Lane name -> the steps replayed on `device`'s model (DSP ops at their modeled time),
    each modeled step starting where the previous one ended (the first at its host start)."""
    modeled: dict[str, list] = {STEP_LANE: []}
    dsp_backends = {e.backend for e in recorder.events if e.dsp_costs}  # their lanes are the modeled ones
    end = None
    for span in recorder.steps:
        timed = replay(recorder.step_events(span.index), device)
        if not timed:
            continue
        first = min(t[1] for t in timed)
        shift = 0.0 if end is None else end - first
        end = max(t[1] + t[2] for t in timed) + shift
        modeled[STEP_LANE].append(
            {
                "name": f"step {span.index}",
                "cat": "step",
                "start": first + shift,
                "dur": end - first - shift,
                "args": {"modeled_ms": round((end - first - shift) * 1e3, 3)},
            }
        )
        for e, start, seconds in timed:
            is_dsp = modeled_seconds(e, device) is not None
            modeled.setdefault(_lane_name(e.backend, e.thread, e.backend in dsp_backends), []).append(
                {
                    "name": e.op.name,
                    "cat": role(e.op),
                    "start": start + shift,
                    "dur": seconds,
                    "args": {**_args(e), **({"modeled_ms": round(seconds * 1e3, 4)} if is_dsp else {})},
                }
            )
    return modeled


def _complete_events(items: list, pid: int, tid: int, origin: float) -> list[dict]:
    """One lane's items as Chrome "X" events in start order, in microseconds from `origin`."""
    items.sort(key=lambda e: e["start"])
    out = []
    for k, item in enumerate(items):
        ts = _us(item["start"] - origin)
        dur = _us(item["dur"])
        if k + 1 < len(items):  # rounding to nanoseconds must not make neighbours overlap
            dur = _fit(ts, dur, _us(items[k + 1]["start"] - origin))
        out.append(
            {
                "name": item["name"],
                "cat": item["cat"],
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": item["args"],
            }
        )
    return out


def _fit(ts: float, dur: float, next_ts: float) -> float:
    """`dur` cut so that ts + dur <= next_ts holds in floating point as a reader adds them."""
    dur = max(0.0, min(dur, round(next_ts - ts, 3)))
    while dur > 0.0 and ts + dur > next_ts:
        dur = math.nextafter(dur, 0.0)
    return dur


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _lane_order(lane: str) -> tuple:
    """Steps first, then the main thread's lanes, the workers', the modeled DSP's last."""
    if lane == STEP_LANE:
        return (0, lane)
    if lane.endswith("(modeled)"):
        return (3, lane)
    return (1 if "MainThread" in lane else 2, lane)


def write_trace(recorder, path: str | Path, device=None) -> Path:
    """Write the recorder's timeline to `path` (JSON object format, opened by Perfetto and chrome://tracing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "traceEvents": trace_events(recorder, device),
                "displayTimeUnit": "ms",
                "otherData": {"producer": "dsptrain profile"},
            }
        )
        + "\n"
    )
    return path
