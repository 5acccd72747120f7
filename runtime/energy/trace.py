"""An external power monitor's trace (a Monsoon, a USB power meter) as an energy meter.

The monitor writes a CSV of timestamp, current and voltage while training runs; each
batch is bracketed by wall-clock times (`time.time()`), and its energy is the trapezoid
integral of current x voltage over that window. The trace is usually complete only after
the run, so `stop()` reads whatever is on disk then, and `readings()` (or `align_trace`)
aligns every recorded batch again afterwards.

CSV accepted: an optional header row naming the columns, e.g. Monsoon's
`Time(ms),Main(mA),Main Voltage(V)` or `timestamp,current,voltage`; other columns are
ignored. Units come from the header (`(s)`/`(ms)`/`(us)`, `(A)`/`(mA)`/`(uA)`,
`(V)`/`(mV)`), else from the arguments, else seconds, amperes and volts. Without a header
the first three columns are time, current, voltage.

Time base: timestamps above 1e9 s are taken as Unix time. Smaller ones count from the
start of the capture (as Monsoon's do): pass `offset_s`, the Unix time of the trace's
zero, found for instance by a marker pulse or by starting the capture from the script.

A batch the trace does not cover (it starts before the first sample, ends after the
last, or spans a gap longer than `max_gap_s`) reads NaN with `detail["error"]` saying
so, or raises MeterError with `strict=True`; it is never a silent zero.
"""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path

import numpy as np

from .base import EnergyReading, Meter, MeterError, WorkCounts

_UNIT = re.compile(r"[\(\[]\s*(s|ms|us|a|ma|ua|v|mv)\s*[\)\]]", re.IGNORECASE)
_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "a": 1.0, "ma": 1e-3, "ua": 1e-6, "v": 1.0, "mv": 1e-3}
EPOCH_THRESHOLD_S = 1e9  # 2001-09-09: any later Unix time is above it, any capture below


class Trace:
    """A loaded trace: sorted Unix times (s) and power (W)."""

    def __init__(self, path, t, watts):
        self.path, self.t, self.watts = path, t, watts
        steps = np.diff(t)
        self.period_s = float(np.median(steps)) if len(steps) else math.nan

    def energy(self, t0: float, t1: float, max_gap_s: float | None = None) -> float:
        """Joules over [t0, t1]; MeterError naming the file if the trace does not cover it."""
        t, w = self.t, self.watts
        if len(t) < 2 or t0 < t[0] or t1 > t[-1]:
            span = f"{t[0]:.3f}-{t[-1]:.3f}" if len(t) else "nothing"
            raise MeterError(f"trace: {self.path} covers {span} (Unix s); batch {t0:.3f}-{t1:.3f} is not covered")
        lo, hi = np.searchsorted(t, t0, "right"), np.searchsorted(t, t1, "left")
        ts = np.concatenate(([t0], t[lo:hi], [t1]))
        ws = np.concatenate(([np.interp(t0, t, w)], w[lo:hi], [np.interp(t1, t, w)]))
        gap = max_gap_s if max_gap_s is not None else 10 * self.period_s
        if len(ts) > 1 and np.max(np.diff(ts)) > gap:
            raise MeterError(
                f"trace: {self.path} has a gap of {np.max(np.diff(ts)):.3f} s "
                f"inside batch {t0:.3f}-{t1:.3f} (limit {gap:.3f} s)"
            )
        return float(np.trapezoid(ws, ts))


MAX_TRACE_BYTES = 2 << 30


def load_trace(
    path,
    *,
    offset_s: float | None = None,
    time_unit: str | None = None,
    current_unit: str | None = None,
    voltage_unit: str | None = None,
) -> Trace:
    """Read a power-monitor CSV into a Trace; errors name the file, row and value."""
    from ..inputs.files import read_limited  # a FIFO or device named as the trace never blocks

    path = Path(path)
    raw = read_limited(path, "power trace", MAX_TRACE_BYTES, lambda m: MeterError(f"trace: {m}"))
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise MeterError(f"trace: {path} is not UTF-8 text (byte {exc.start})") from None
    rows = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not rows:
        raise MeterError(f"trace: {path} is empty")
    cols, units, skip = (0, 1, 2), [None, None, None], 0
    if not _numeric(rows[0]):  # a header row; "1.7e9" is a number, not a header
        cols, units = _parse_header(path, rows[0])
        skip = 1
    units = [u or d for u, d in zip((time_unit, current_unit, voltage_unit), units)]
    units = [u or d for u, d in zip(units, ("s", "A", "V"))]
    data = np.empty((len(rows) - skip, 3))
    for r, line in enumerate(rows[skip:]):
        fields = line.split(",")
        try:
            data[r] = [float(fields[c]) for c in cols]
        except (ValueError, IndexError):
            raise MeterError(
                f"trace: {path} row {r + skip + 1} {line!r} does not have numbers in columns {cols}"
            ) from None
    t = data[:, 0] * _scale(path, units[0])
    watts = data[:, 1] * _scale(path, units[1]) * data[:, 2] * _scale(path, units[2])
    if len(t) and t[0] < EPOCH_THRESHOLD_S:
        if offset_s is None:
            raise MeterError(
                f"trace: {path} timestamps start at {t[0]:g} s, not Unix "
                "time; pass offset_s (the Unix time of the trace's zero)"
            )
        t = t + offset_s
    order = np.argsort(t, kind="stable")
    return Trace(path, t[order], watts[order])


def _numeric(line):
    try:
        [float(f) for f in line.split(",")]
        return True
    except ValueError:
        return False


def _parse_header(path, header):
    names = [h.strip().lower() for h in header.split(",")]

    def find(pred, what, taken=()):
        for i, n in enumerate(names):
            if i not in taken and pred(n):
                return i
        raise MeterError(f"trace: {path} header {header!r} has no {what} column")

    # Time first, then voltage, then current among the rest: "timestamp" contains "amp"
    # and Monsoon's "Main Voltage(V)" contains "main".
    it = find(lambda n: "time" in n or n == "t", "time")
    iv = find(lambda n: "volt" in n or n == "v", "voltage", (it,))
    ii = find(lambda n: "current" in n or "main" in n or "amp" in n or n == "i", "current", (it, iv))
    units = []
    for i in (it, ii, iv):
        m = _UNIT.search(names[i])
        units.append(m.group(1).lower() if m else None)
    return (it, ii, iv), units


def _scale(path, unit):
    try:
        return _SCALE[unit.lower()]
    except KeyError:
        raise MeterError(f"trace: {path}: unknown unit {unit!r}; use one of {sorted(_SCALE)}") from None


def align_trace(
    trace: Trace, windows, *, max_gap_s: float | None = None, baseline_w: float = 0.0
) -> list[EnergyReading]:
    """One reading per (t_start, t_end) Unix-time window; NaN where not covered."""
    out = []
    for t0, t1 in windows:
        detail = {"seconds": t1 - t0, "t_start": t0, "t_end": t1, "trace": str(trace.path), "baseline_w": baseline_w}
        try:
            joules = trace.energy(t0, t1, max_gap_s) - baseline_w * (t1 - t0)
        except MeterError as exc:
            joules, detail["error"] = math.nan, str(exc)
        out.append(EnergyReading(joules, "trace", False, detail))
    return out


class TraceMeter(Meter):
    """Brackets batches with time.time(); reads the trace file at stop() and afterwards."""

    name = "trace"

    def __init__(
        self,
        path,
        *,
        offset_s: float | None = None,
        strict: bool = False,
        max_gap_s: float | None = None,
        baseline_w: float = 0.0,
        **units,
    ):
        super().__init__()
        self.path = Path(path)
        self.offset_s, self.units = offset_s, units
        self.strict, self.max_gap_s, self.baseline_w = strict, max_gap_s, baseline_w
        self.windows: list[tuple[float, float]] = []
        self._wall_t0 = 0.0
        self._cache: tuple[tuple, Trace] | None = None

    def trace(self) -> Trace:
        """The trace as on disk now; re-read only when the file changed."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise MeterError(f"trace: cannot read {self.path}: {exc.strerror}") from exc
        key = (st.st_mtime_ns, st.st_size)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, load_trace(self.path, offset_s=self.offset_s, **self.units))
        return self._cache[1]

    def _begin(self) -> None:
        self._wall_t0 = time.time()

    def _end(self, seconds: float, work: WorkCounts) -> EnergyReading:
        window = (self._wall_t0, time.time())
        self.windows.append(window)
        try:
            reading = align_trace(self.trace(), [window], max_gap_s=self.max_gap_s, baseline_w=self.baseline_w)[0]
        except MeterError as exc:  # file absent or unreadable yet: the same as uncovered
            reading = EnergyReading(
                math.nan, self.name, False, {"t_start": window[0], "t_end": window[1], "error": str(exc)}
            )
        if self.strict and not reading.ok:
            raise MeterError(reading.detail["error"])
        reading.detail.update(seconds=seconds, work=work.as_dict())
        return reading

    def readings(self) -> list[EnergyReading]:
        """Every batch so far, aligned again with the trace as it is now (after the run)."""
        return align_trace(self.trace(), self.windows, max_gap_s=self.max_gap_s, baseline_w=self.baseline_w)
