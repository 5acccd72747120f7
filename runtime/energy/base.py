"""The meter interface every energy source implements, and the helpers they share.

A meter brackets one batch: `start()` before it, `stop()` after it, which returns an
`EnergyReading` saying how many joules the batch cost, which meter said so, and whether
the figure is an estimate. Work counts (`WorkCounts`) may be handed to any meter; the
estimate turns them into joules, the real meters keep them in `detail` for comparison.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DsptrainError


class MeterError(DsptrainError):
    """A meter failed while measuring, or was used out of order."""


class MeterUnavailable(MeterError):
    """This machine has no such meter, or we may not read it (the message names the file)."""


@dataclass(frozen=True)
class EnergyReading:
    """Energy of one batch. `joules` is NaN when the meter could not cover the batch;
    `detail["error"]` then says why. `detail["seconds"]` is the wall time measured."""

    joules: float
    meter: str
    estimated: bool
    detail: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not math.isnan(self.joules)

    @property
    def watts(self) -> float:
        seconds = self.detail.get("seconds", 0.0)
        return self.joules / seconds if seconds else math.nan


@dataclass
class WorkCounts:
    """Work done in one batch, as the executor counts it.

    int8_macs: int8 multiply-accumulates per backend name ("dsp", "cpu", "ref").
    fp32_flops: float operations (a fused multiply-add counts as two).
    bytes_moved: bytes read from or written to main memory (DRAM), all backends.
    """

    int8_macs: dict = field(default_factory=dict)
    fp32_flops: int = 0
    bytes_moved: int = 0
    note: str = ""

    @classmethod
    def of(cls, obj) -> WorkCounts:
        """WorkCounts from itself, or from a StepStats-like object: its int8_macs,
        fp32_flops and bytes_moved if it has them; else its `macs` dict, taken as int8
        MACs per backend and said so in `note` (an fp32 recipe's MACs would be miscounted)."""
        if isinstance(obj, cls):
            return obj
        if hasattr(obj, "int8_macs"):
            return cls(dict(obj.int8_macs), int(getattr(obj, "fp32_flops", 0)), int(getattr(obj, "bytes_moved", 0)))
        if isinstance(getattr(obj, "macs", None), dict):
            return cls(dict(obj.macs), note=f"{type(obj).__name__}.macs taken as int8 MACs")
        raise TypeError(f"work: expected WorkCounts or a StepStats with int8_macs or macs, got {type(obj).__name__}")

    def add(self, other: WorkCounts) -> None:
        for backend, macs in other.int8_macs.items():
            self.int8_macs[backend] = self.int8_macs.get(backend, 0) + int(macs)
        self.fp32_flops += int(other.fp32_flops)
        self.bytes_moved += int(other.bytes_moved)
        if other.note and other.note not in self.note:
            self.note = f"{self.note}; {other.note}" if self.note else other.note

    def as_dict(self) -> dict:
        out = {"int8_macs": dict(self.int8_macs), "fp32_flops": self.fp32_flops, "bytes_moved": self.bytes_moved}
        if self.note:
            out["note"] = self.note
        return out


class Meter:
    """Base class: subclasses implement `_begin()` and `_end(seconds, work) -> EnergyReading`.

    The base keeps the bracket honest (stop without start is an error) and accumulates
    work counts given through `record_work` between start and stop.
    """

    name = "meter"
    estimated = False

    def __init__(self):
        self._t0: float | None = None
        self._work = WorkCounts()

    def start(self) -> None:
        if self._t0 is not None:
            raise MeterError(f"{self.name}: start() called twice without stop()")
        self._work = WorkCounts()
        self._begin()
        self._t0 = time.perf_counter()

    def record_work(
        self,
        work: WorkCounts | None = None,
        *,
        int8_macs: Mapping | None = None,
        fp32_flops: int = 0,
        bytes_moved: int = 0,
    ) -> None:
        """Add work done since start(); call it any number of times within a batch."""
        if work is None:
            work = WorkCounts(dict(int8_macs or {}), fp32_flops, bytes_moved)
        self._work.add(WorkCounts.of(work))

    def stop(self, work=None) -> EnergyReading:
        """End the batch; `work` (WorkCounts or a StepStats) is added to what was recorded."""
        if self._t0 is None:
            raise MeterError(f"{self.name}: stop() called before start()")
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        if work is not None:
            self._work.add(WorkCounts.of(work))
        return self._end(seconds, self._work)

    def close(self) -> None:
        """Release threads and files. Safe to call twice."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _begin(self) -> None:
        raise NotImplementedError(f"{self.name}: needs _begin")

    def _end(self, seconds: float, work: WorkCounts) -> EnergyReading:
        raise NotImplementedError(f"{self.name}: needs _end")


def read_number(path: Path, meter: str) -> int:
    """Read one integer from a sysfs file; errors name the file and what was found."""
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise MeterUnavailable(f"{meter}: cannot read {path}: {type(exc).__name__}: {exc.strerror or exc}") from exc
    try:
        return int(text)
    except ValueError:
        raise MeterError(f"{meter}: {path} holds {text!r}, not an integer") from None


def read_word(path: Path) -> str | None:
    """Read a short sysfs text value (type, status, name); None if absent or unreadable."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def integrate_power(ts: Sequence[float], watts: Sequence[float], t0: float, t1: float) -> float:
    """Joules between t0 and t1 by the trapezoid rule over (time, power) samples.

    The power at t0 and t1 is linearly interpolated between the neighbouring samples, so
    a window that falls between two samples still gets its share. The caller checks that
    the samples cover [t0, t1]; outside them this holds the end value constant.
    """
    if t1 <= t0 or not ts:
        return 0.0
    pts = [(t0, _interp(ts, watts, t0))]
    pts += [(t, p) for t, p in zip(ts, watts) if t0 < t < t1]
    pts.append((t1, _interp(ts, watts, t1)))
    return sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(pts, pts[1:]))


def _interp(ts: Sequence[float], ys: Sequence[float], t: float) -> float:
    if t <= ts[0]:
        return ys[0]
    if t >= ts[-1]:
        return ys[-1]
    lo, hi = 0, len(ts) - 1  # bisect for the segment holding t
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ts[mid] <= t:
            lo = mid
        else:
            hi = mid
    span = ts[hi] - ts[lo]
    frac = (t - ts[lo]) / span if span else 0.0
    return ys[lo] + frac * (ys[hi] - ys[lo])
