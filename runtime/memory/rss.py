"""The process's memory around one training step, from Linux /proc (None elsewhere).

    watch = StepRss()
    watch.begin()            # RSS now; restart the kernel's high-water mark (VmHWM)
    ...one step...
    growth, step_peak, process_peak = watch.end()

`growth` is how far the resident set rose above its value at begin() at its highest
during the step (VmHWM after the step less VmRSS before it): it grows with the batch,
where the process's lifetime peak (ru_maxrss) is usually set while the data loads and
stays flat. Restarting VmHWM ("5" into /proc/self/clear_refs, Linux >= 4.0) also lowers
what getrusage reports as ru_maxrss from then on, so the process peak is kept here:
`peak_rss_bytes()` is the largest of ru_maxrss and every step's high-water mark.
Without /proc (macOS), growth is the RSS after the step less before it, and step_peak None.
"""
from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
# The largest high-water mark seen before any reset: process-wide, as the kernel's own is.
_process_peak = 0


def _status_bytes(field: str) -> int | None:
    try:
        with open(_STATUS) as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """The resident set now (Linux /proc/self/statm); None where there is none."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_bytes() -> int:
    """The process's peak resident set so far, across the high-water resets of StepRss."""
    global _process_peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024
    _process_peak = max(_process_peak, peak, _status_bytes("VmHWM") or 0)
    return _process_peak


class StepRss:
    """Brackets one step: RSS growth during it, its high-water mark, the process peak."""

    def __init__(self):
        self._before: int | None = None
        self._reset = False

    def begin(self) -> None:
        peak_rss_bytes()   # fold the high-water mark so far into the process peak first
        try:
            _CLEAR_REFS.write_text("5")
            self._reset = True
        except OSError:
            self._reset = False
        self._before = rss_bytes()

    def end(self) -> tuple[int | None, int | None, int]:
        """(RSS growth during the step, the step's high-water mark, the process peak), bytes."""
        after = rss_bytes()
        step_peak = _status_bytes("VmHWM") if self._reset else None
        top = step_peak if step_peak is not None else after
        growth = None if top is None or self._before is None else max(top - self._before, 0)
        return growth, step_peak, peak_rss_bytes()
