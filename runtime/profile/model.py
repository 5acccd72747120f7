"""The modeled clock: a profiled step's calls replayed with each DSP call lasting its modeled
time (QEMU's packet counts through cost.dsp_op_seconds, plus dsp.call_s per transport call:
the terms cost.dsp_model_time adds up for a step) and every other call its measured time.

The emulator's wall time says nothing of a DSP's, so this is how long the step would take
with a DSP as fast as the model says beside this host's CPU, overlapping what co-scheduling
overlapped. A call starts when its lane (backend and thread) is free and every call that had
ended before it started on the host clock has ended in the replay: what was ordered stays
ordered, what overlapped may overlap. The executor's own time between calls is left out.
"""

from __future__ import annotations

import heapq

from ..cost import dsp_op_seconds


def modeled_seconds(event, device) -> float | None:
    """The modeled DSP time of one call (None when it ran no DSP kernel or there is no device profile)."""
    if device is None or not (event.dsp_costs or event.dsp_calls):
        return None
    return sum(dsp_op_seconds(device, c[2], c[3]) for c in event.dsp_costs) + event.dsp_calls * device.dsp.call_s


def replay(events, device) -> list[tuple]:
    """(event, start, seconds) of each event on the modeled clock (see the module's docstring):
    a DSP call lasts its modeled time, others their measured time; a call starts when its
    lane is free and the calls that ended before it started (host clock) have ended."""
    order = sorted(events, key=lambda e: e.start_s)
    origin = order[0].start_s if order else 0.0
    ended = []  # heap of (host end, modeled end) of the calls replayed so far
    ready = origin  # the latest modeled end of the calls that ended before the current one started
    lane_free: dict[tuple, float] = {}
    out = []
    for e in order:
        while ended and ended[0][0] <= e.start_s:
            ready = max(ready, heapq.heappop(ended)[1])
        seconds = modeled_seconds(e, device)
        seconds = e.seconds if seconds is None else seconds
        lane = (e.backend, e.thread)
        start = max(ready, lane_free.get(lane, origin))
        lane_free[lane] = start + seconds
        heapq.heappush(ended, (e.start_s + e.seconds, start + seconds))
        out.append((e, start, seconds))
    return out


def modeled_step_seconds(events, device) -> float | None:
    """One step's length on the modeled clock (None without DSP calls to model)."""
    if device is None or not any(e.dsp_costs for e in events):
        return None
    timed = replay(events, device)
    return max(start + seconds for _, start, seconds in timed) - min(start for _, start, _ in timed)
