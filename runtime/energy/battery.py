"""The battery fuel gauge (Android phones, Linux laptops) as an energy meter.

Power is `current_now` x `voltage_now` of the battery node under
/sys/class/power_supply, sampled on a background thread every `period_s` seconds and
integrated over each batch by the trapezoid rule, minus an idle baseline power measured
before training with `measure_baseline(seconds)`. The gauge sees the whole phone
(screen, radios, every core), which is why the baseline matters; it also updates slowly
on many phones (often once per 0.1-1 s), so batches shorter than that are coarse.

Units. The kernel ABI (Documentation/ABI/testing/sysfs-class-power) says microamps and
microvolts, but some vendor drivers report mA and mV. We decide once per node:
  voltage: |v| >= 100000 is uV, 100 <= |v| < 100000 is mV (a Li-ion pack is 2.5-9 V,
           so uV values are in the millions and mV values in the thousands);
  current: decided on the first non-zero sample: |i| >= 10000 is uA, smaller is mA.
           A training phone draws well above 10 mA (10000 uA), and no phone battery
           delivers 10 A (10000 mA), so the two ranges do not overlap in practice.
Pass `current_unit`/`voltage_unit` ("uA"/"mA", "uV"/"mV") to override.

Sign. The kernel documents negative current for discharging and positive for charging
(commit 05f94eb98907 "power: supply: document current direction", 2020; Android's
BatteryManager.BATTERY_PROPERTY_CURRENT_NOW says the same), but that commit notes that
drivers also report the opposite sign or only positive values. So while `status` is
"Discharging" we take the magnitude and learn the node's sign from it; when the status
is absent or "Unknown" we apply the learned sign, or the kernel's if none was learned.
With a charger connected (status "Charging", "Full", "Not charging") the gauge sees the
charger's input minus the load, not the load: such a batch reads NaN with a message,
unless `allow_charging=True`, which reports the net energy out of the battery (negative
while charging).
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from pathlib import Path

from .base import (
    EnergyReading,
    Meter,
    MeterError,
    MeterUnavailable,
    WorkCounts,
    integrate_power,
    read_number,
    read_word,
)

POWER_SUPPLY_ROOT = "/sys/class/power_supply"
PLUGGED = ("Charging", "Full", "Not charging")
_SCALE = {"uA": 1e-6, "mA": 1e-3, "uV": 1e-6, "mV": 1e-3}


def find_battery(root: Path, supply: str | None = None) -> Path:
    """The battery node under `root`: `supply` if named, else the first (sorted) whose
    `type` is "Battery" and which has current_now and voltage_now."""
    if supply is not None:
        node = root / supply
        if not node.is_dir():
            raise MeterUnavailable(f"battery: no power supply {node}")
        return node
    if not root.is_dir():
        raise MeterUnavailable(f"battery: {root} does not exist")
    seen = []
    for node in sorted(root.iterdir()):
        if read_word(node / "type") != "Battery":
            continue
        seen.append(node.name)
        if (node / "current_now").exists() and (node / "voltage_now").exists():
            return node
    if seen:
        raise MeterUnavailable(f"battery: battery nodes {seen} under {root} have no current_now and voltage_now")
    raise MeterUnavailable(f"battery: no power supply of type Battery under {root}")


class BatteryMeter(Meter):
    """Energy per batch from the battery fuel gauge, sampled on a daemon thread."""

    name = "battery"

    def __init__(
        self,
        root: str | Path = POWER_SUPPLY_ROOT,
        *,
        supply: str | None = None,
        period_s: float = 0.05,
        current_unit: str | None = None,
        voltage_unit: str | None = None,
        allow_charging: bool = False,
    ):
        super().__init__()
        for unit, allowed in ((current_unit, ("uA", "mA")), (voltage_unit, ("uV", "mV"))):
            if unit is not None and unit not in allowed:
                raise ValueError(f"battery: unit {unit!r} is not one of {allowed}")
        if not period_s > 0:
            raise ValueError(f"battery: period_s must be > 0, got {period_s}")
        self.node = find_battery(Path(root), supply)
        self.period_s = period_s
        self.current_unit, self.voltage_unit = current_unit, voltage_unit
        self.allow_charging = allow_charging
        self.baseline_w = 0.0
        self._discharge_sign: int | None = None  # +1 or -1 once learned, see module doc
        self._samples: list[tuple[float, float, str]] = []  # (monotonic s, watts, status)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._window_t0 = 0.0
        self._sample()  # fail now, naming the file, if the gauge cannot be read

    # -- sampling -----------------------------------------------------------------
    def _sample(self) -> tuple[float, float, str]:
        raw_i = read_number(self.node / "current_now", self.name)
        raw_v = read_number(self.node / "voltage_now", self.name)
        status = self.battery_status()
        t = time.monotonic()
        volts = raw_v * _SCALE[self._voltage_unit(raw_v)]
        amps = raw_i * _SCALE[self._current_unit(raw_i)] if raw_i else 0.0
        if status == "Discharging" and raw_i:
            self._discharge_sign = 1 if raw_i > 0 else -1
        sign = self._discharge_sign or -1  # kernel convention: negative = discharging
        sample = (t, amps * sign * abs(volts), status)
        with self._lock:
            self._samples.append(sample)
        return sample

    def _voltage_unit(self, raw: int) -> str:
        if self.voltage_unit is None:
            if abs(raw) >= 100_000:
                self.voltage_unit = "uV"
            elif abs(raw) >= 100:
                self.voltage_unit = "mV"
            else:
                raise MeterError(
                    f"battery: {self.node / 'voltage_now'} is {raw}, which "
                    "fits neither uV nor mV for a battery; pass voltage_unit"
                )
        return self.voltage_unit

    def _current_unit(self, raw: int) -> str:
        if self.current_unit is None:
            self.current_unit = "uA" if abs(raw) >= 10_000 else "mA"
        return self.current_unit

    def _run(self) -> None:
        while not self._stop_event.wait(self.period_s):
            try:
                self._sample()
            except BaseException as exc:  # surfaced on the next stop(); never lost
                self._error = exc
                return

    def _ensure_thread(self) -> None:
        self._raise_thread_error()
        if self._stop_event.is_set():
            raise MeterError(f"battery: meter on {self.node} is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"dsptrain-battery-{self.node.name}", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    def _raise_thread_error(self) -> None:
        if self._error is not None:
            raise MeterError(f"battery: sampler thread on {self.node} stopped: {self._error}") from self._error

    # -- the meter ----------------------------------------------------------------
    def battery_status(self) -> str:
        """The node's `status` now ("Discharging", "Charging", ...; "Unknown" if absent)."""
        return read_word(self.node / "status") or "Unknown"

    def measure_baseline(self, seconds: float) -> float:
        """Sample `seconds` of idle power; later readings subtract it. Returns watts."""
        if self._t0 is not None:
            raise MeterError("battery: measure_baseline() inside a batch")
        self._ensure_thread()
        t0 = self._sample()[0]
        time.sleep(seconds)
        t1 = self._sample()[0]
        self._raise_thread_error()
        ts, ws, statuses = self._window(t0, t1)
        plugged = sorted(set(statuses) & set(PLUGGED))
        if plugged and not self.allow_charging:
            raise MeterError(
                f"battery: {self.node / 'status'} was {plugged} during the baseline; unplug the charger to measure"
            )
        self.baseline_w = integrate_power(ts, ws, t0, t1) / (t1 - t0)
        return self.baseline_w

    def _begin(self) -> None:
        self._ensure_thread()
        self._window_t0 = self._sample()[0]
        with self._lock:  # drop samples older than this batch: memory stays bounded
            self._samples = [s for s in self._samples if s[0] >= self._window_t0]

    def _end(self, seconds: float, work: WorkCounts) -> EnergyReading:
        self._raise_thread_error()
        t1 = self._sample()[0]
        t0 = self._window_t0
        ts, ws, statuses = self._window(t0, t1)
        gross = integrate_power(ts, ws, t0, t1)
        detail = {
            "seconds": seconds,
            "window_s": t1 - t0,
            "gross_j": gross,
            "baseline_w": self.baseline_w,
            "samples": len(ts),
            "supply": self.node.name,
            "units": f"{self.current_unit},{self.voltage_unit}",
            "discharge_sign": self._discharge_sign,
            "work": work.as_dict(),
        }
        joules = gross - self.baseline_w * (t1 - t0)
        plugged = sorted(set(statuses) & set(PLUGGED))
        if plugged:
            detail["charging"] = plugged
            if not self.allow_charging:
                detail["error"] = (
                    f"battery: {self.node / 'status'} was {plugged} during "
                    "the batch; with a charger connected the gauge sees "
                    "charger input minus load, not the load. Unplug it."
                )
                joules = math.nan
        return EnergyReading(joules, self.name, False, detail)

    def _window(self, t0: float, t1: float):
        with self._lock:
            inside = [s for s in self._samples if t0 <= s[0] <= t1]
        return [s[0] for s in inside], [s[1] for s in inside], [s[2] for s in inside]

    def close(self) -> None:
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s + 2.0)
            atexit.unregister(self.close)
            self._thread = None
