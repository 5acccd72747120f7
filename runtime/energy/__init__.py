"""Energy per batch: one interface over real meters and a labelled estimate.

    meter, why = make_meter("auto")          # or rapl | battery | trace:FILE | estimate[:DEVICE]
    meter.measure_baseline(5.0)              # battery only: idle power to subtract
    with meter:
        meter.start()
        ...one batch...
        reading = meter.stop(WorkCounts({"dsp": macs_dsp, "cpu": macs_cpu}, flops, nbytes))
    reading.joules, reading.meter, reading.estimated, reading.detail

Meters live one per file in this package: rapl.py (Linux powercap RAPL), battery.py (fuel
gauge, sampled on a thread), trace.py (an external monitor's CSV), estimate.py with
coeffs.py (counted work x per-device coefficients); base.py holds the interface.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from .base import EnergyReading, Meter, MeterError, MeterUnavailable, WorkCounts
from .battery import PLUGGED, POWER_SUPPLY_ROOT, BatteryMeter
from .coeffs import DEVICES, DeviceCoefficients
from .estimate import EstimateMeter
from .rapl import POWERCAP_ROOT, RaplMeter
from .trace import TraceMeter, align_trace, load_trace

__all__ = [
    "EnergyReading",
    "WorkCounts",
    "Meter",
    "MeterError",
    "MeterUnavailable",
    "RaplMeter",
    "BatteryMeter",
    "TraceMeter",
    "EstimateMeter",
    "DeviceCoefficients",
    "DEVICES",
    "align_trace",
    "load_trace",
    "make_meter",
    "spec_problem",
    "SPECS",
]

SPECS = "auto | rapl | battery | trace:FILE | estimate[:DEVICE]"


def spec_problem(spec: str) -> str | None:
    """Why `spec` is no energy setting, or None: checked where a run's `energy:` or
    `--energy` is read, so a typo fails there by name instead of when the meter opens."""
    kind, _, arg = str(spec).partition(":")
    if spec == "auto" or (kind in ("rapl", "battery") and not arg) or (kind == "trace" and arg):
        return None
    if kind == "estimate":
        if not arg or arg in DEVICES:
            return None
        return f"{spec!r}: no coefficients for device {arg!r} (known: {', '.join(sorted(DEVICES))})"
    return f"{spec!r} is not one of {SPECS}"


def make_meter(
    spec: str = "auto",
    *,
    powercap_root=POWERCAP_ROOT,
    power_supply_root=POWER_SUPPLY_ROOT,
    device: str = "sd865",
    android: bool | None = None,
    **options,
) -> tuple[Meter, str]:
    """The meter for an `--energy` value, and a sentence saying why it was chosen.

    auto: on Android the battery gauge, then RAPL; elsewhere RAPL, then the battery;
    a meter counts only if it can be read now (and the battery only if no charger is
    connected). With none, the estimate for `device` (the phone the project targets,
    not this host), and the reason says so. An explicitly named meter that cannot be
    read raises MeterUnavailable naming the file. `options` go to the meter's
    constructor (e.g. offset_s for a trace, period_s for the battery).
    """
    kind, _, arg = spec.partition(":")
    if kind == "rapl" and not arg:
        return RaplMeter(powercap_root, **options), f"rapl: counters under {powercap_root}"
    if kind == "battery" and not arg:
        meter = BatteryMeter(power_supply_root, **options)
        return meter, f"battery: fuel gauge {meter.node}"
    if kind == "trace" and arg:
        return TraceMeter(arg, **options), f"trace: power-monitor CSV {arg}"
    if kind == "estimate":
        dev = arg or device
        return EstimateMeter(dev, **options), f"estimate: counted work x {dev} coefficients"
    if spec != "auto":
        raise UserError(f"--energy {spec!r}: expected {SPECS}")

    if android is None:
        android = "ANDROID_ROOT" in os.environ or Path("/system/build.prop").exists()
    order = ("battery", "rapl") if android else ("rapl", "battery")
    why_not = []
    for kind in order:
        try:
            if kind == "rapl":
                return RaplMeter(powercap_root), f"auto: rapl, counters under {powercap_root}"
            meter = BatteryMeter(power_supply_root, **options)
            status = meter.battery_status()
            if status in PLUGGED:
                meter.close()
                raise MeterUnavailable(f"battery: {meter.node / 'status'} is {status!r} (charger connected)")
            return meter, f"auto: battery, fuel gauge {meter.node}"
        except MeterError as exc:
            why_not.append(str(exc))
    reason = f"auto: no real meter ({'; '.join(why_not)}); using the estimate for {device}, labelled estimated"
    return EstimateMeter(device), reason
