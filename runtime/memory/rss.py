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

_STATUS = "/proc/self/status"
_STATM = "/proc/self/statm"
_CLEAR_REFS = "/proc/self/clear_refs"
# The largest high-water mark seen before any reset: process-wide, as the kernel's own is.
_process_peak = 0


# Raw os.open / os.read: a step reads these twice, and through Python's text files and
# pathlib the five reads and one write cost 140 us a step (3 % of a LeNet-5 step).
def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.read(fd, 16384)
        finally:
            os.close(fd)
    except OSError:
        return None


def _status(*fields: str) -> list[int | None]:
    """Fields of /proc/self/status in bytes (VmHWM, VmRSS, ...), None where absent."""
    text = _read(_STATUS)
    values: list[int | None] = []
    for field in fields:
        value = None
        at = text.find(b"\n" + field.encode() + b":") if text else -1
        if at >= 0:
            try:
                value = int(text[at : text.index(b"\n", at + 1)].split()[1]) * 1024
            except (ValueError, IndexError):
                value = None
        values.append(value)
    return values


def _status_bytes(field: str) -> int | None:
    return _status(field)[0]


def rss_bytes() -> int | None:
    """The resident set now (Linux /proc/self/statm); None where there is none."""
    try:
        return int(_read(_STATM).split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, IndexError):
        return None


def _ru_maxrss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def peak_rss_bytes(hwm: int | None = None) -> int:
    """The process's peak resident set so far, across the high-water resets of StepRss
    (`hwm`: VmHWM when the caller has just read it)."""
    global _process_peak
    if hwm is None:
        hwm = _status_bytes("VmHWM")
    _process_peak = max(_process_peak, _ru_maxrss(), hwm or 0)
    return _process_peak


class StepRss:
    """Brackets one step: RSS growth during it, its high-water mark, the process peak;
    `after` is the resident set end() read."""

    def __init__(self):
        self._before: int | None = None
        self._reset = False
        self.after: int | None = None

    def begin(self) -> None:
        hwm, rss = _status("VmHWM", "VmRSS")
        peak_rss_bytes(hwm)  # fold the high-water mark so far into the process peak first
        try:
            fd = os.open(_CLEAR_REFS, os.O_WRONLY)
            try:
                os.write(fd, b"5")
            finally:
                os.close(fd)
            self._reset = True
        except OSError:
            self._reset = False
        self._before = rss if rss is not None else rss_bytes()

    def end(self) -> tuple[int | None, int | None, int]:
        """(RSS growth during the step, the step's high-water mark, the process peak), bytes."""
        hwm, after = _status("VmHWM", "VmRSS")
        self.after = after if after is not None else rss_bytes()
        step_peak = hwm if self._reset else None
        top = step_peak if step_peak is not None else self.after
        growth = None if top is None or self._before is None else max(top - self._before, 0)
        return growth, step_peak, peak_rss_bytes(hwm)
