"""A profiled run's timeline in the Chrome trace event format (Perfetto, chrome://tracing).

One process, one lane ("thread") per backend and worker: the ops each host thread ran on
each backend (the CPU's ops on the calling thread; under co-scheduling the DSP's on the
DSP queue's worker, execute/pipeline.py, so the two lanes overlap where the processors
did), the DSP's modeled time as a lane of its own (QEMU's packet counts through
cost.dsp_model_time: each DSP call placed at the earliest moment after its host call
started and the previous modeled call ended, as a DSP running one call at a time would),
and the steps. Events are complete events ("ph": "X", microseconds); within a lane they
never overlap (a thread runs one op at a time; the modeled lane is laid out so).
Format: "Trace Event Format", Google, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..cost import dsp_op_seconds
from .table import role

PID = 1
STEP_LANE = "steps"
MODELED_LANE = "dsp (modeled from packets)"


def _lane_name(backend: str, thread: str) -> str:
    return f"{backend} on {thread}"


def trace_events(recorder, device=None) -> list[dict]:
    """The trace's events: metadata naming the process and lanes, then complete events."""
    if not recorder.steps:
        return []
    origin = recorder.steps[0].start_s
    lanes: dict[str, list] = {STEP_LANE: []}
    for span in recorder.steps:
        stats = span.stats
        lanes[STEP_LANE].append({"name": f"step {span.index}", "cat": "step", "start": span.start_s,
                                 "dur": span.seconds, "args": {"measured_ms": round(
                                     (stats.time_s if stats is not None else span.seconds) * 1e3, 3),
                                     **({"pipeline": stats.pipeline} if stats is not None and stats.pipeline else {})}})
    modeled_end = None
    for event in sorted(recorder.events, key=lambda e: e.start_s):
        op = event.op
        args = {"op": op.name, "kind": op.kind, "layer": op.layer, "role": role(op), "backend": event.backend}
        if event.rows:
            args["rows"] = f"{event.rows[0]} of {event.rows[1]}"
        if event.dsp_costs:
            args["packets"] = sum(c[1] for c in event.dsp_costs)
            args["critical_packets"] = sum(c[2] for c in event.dsp_costs)
        lanes.setdefault(_lane_name(event.backend, event.thread), []).append(
            {"name": op.name, "cat": role(op), "start": event.start_s, "dur": event.seconds, "args": args})
        if device is not None and (event.dsp_costs or event.dsp_calls):
            seconds = sum(dsp_op_seconds(device, c[2], c[3]) for c in event.dsp_costs) \
                + event.dsp_calls * device.dsp.call_s
            start = event.start_s if modeled_end is None else max(event.start_s, modeled_end)
            modeled_end = start + seconds
            lanes.setdefault(MODELED_LANE, []).append(
                {"name": op.name, "cat": role(op), "start": start, "dur": seconds,
                 "args": {**args, "modeled_ms": round(seconds * 1e3, 4)}})
    out = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "dsptrain step"}}]
    for tid, (lane, items) in enumerate(sorted(lanes.items(), key=lambda kv: _lane_order(kv[0])), start=1):
        out.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": lane}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}})
        items.sort(key=lambda e: e["start"])
        for k, item in enumerate(items):
            ts = _us(item["start"] - origin)
            dur = _us(item["dur"])
            if k + 1 < len(items):   # rounding to nanoseconds must not make neighbours overlap
                dur = max(0.0, min(dur, _us(items[k + 1]["start"] - origin) - ts))
            out.append({"name": item["name"], "cat": item["cat"], "ph": "X", "pid": PID, "tid": tid,
                        "ts": ts, "dur": round(dur, 3), "args": item["args"]})
    return out


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _lane_order(lane: str) -> tuple:
    """Steps first, then the host threads' lanes (the main thread first), the modeled DSP last."""
    if lane == STEP_LANE:
        return (0, lane)
    if lane == MODELED_LANE:
        return (3, lane)
    return (1 if "MainThread" in lane else 2, lane)


def write_trace(recorder, path: str | Path, device=None) -> Path:
    """Write the recorder's timeline to `path` (JSON object format, opened by Perfetto and chrome://tracing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": trace_events(recorder, device), "displayTimeUnit": "ms",
                                "otherData": {"producer": "dsptrain profile"}}) + "\n")
    return path
