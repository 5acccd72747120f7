"""An energy estimate from counted work, for when no real meter is present.

joules = sum over backends (int8 MACs x pJ/MAC) + fp32 FLOPs x pJ/FLOP
         + bytes moved x pJ/byte + static_w x seconds

The coefficients are per device (coeffs.py, each with its source or assumption).
Dynamic energy alone leaves out idle and uncore power, which on a phone is often most of
the total: pass `static_w` (e.g. a battery baseline measured once) to add it. Every
reading is labelled estimated=True and carries its parts in `detail`.
"""

from __future__ import annotations

from .base import EnergyReading, Meter, MeterError, WorkCounts
from .coeffs import DEVICES, DeviceCoefficients

PJ = 1e-12


class EstimateMeter(Meter):
    """Turns the work recorded for a batch (record_work / stop(work)) into joules."""

    name = "estimate"
    estimated = True

    def __init__(self, device: str | DeviceCoefficients = "sd865", *, static_w: float = 0.0):
        super().__init__()
        if isinstance(device, str):
            if device not in DEVICES:
                raise ValueError(f"estimate: unknown device {device!r}; known: {sorted(DEVICES)}")
            device = DEVICES[device]
        self.device = device
        self.static_w = static_w

    def _begin(self) -> None:
        pass

    def _end(self, seconds: float, work: WorkCounts) -> EnergyReading:
        parts = parts_joules(self.device, work, seconds, self.static_w)
        return EnergyReading(
            sum(parts.values()),
            f"{self.name}:{self.device.name}",
            True,
            {"seconds": seconds, "work": work.as_dict(), "parts_j": parts, "note": self.device.note},
        )


def parts_joules(device: DeviceCoefficients, work: WorkCounts, seconds: float = 0.0, static_w: float = 0.0) -> dict:
    """Joules by source: one `int8_<backend>` entry per backend, fp32, dram, static."""
    parts = {}
    for backend, macs in work.int8_macs.items():
        if backend not in device.pj_per_int8_mac:
            raise MeterError(
                f"estimate: device {device.name} has no int8 coefficient "
                f"for backend {backend!r} (has "
                f"{sorted(device.pj_per_int8_mac)}); {macs} MACs uncounted"
            )
        parts[f"int8_{backend}"] = macs * device.pj_per_int8_mac[backend] * PJ
    parts["fp32"] = work.fp32_flops * device.pj_per_fp32_flop * PJ
    parts["dram"] = work.bytes_moved * device.pj_per_byte * PJ
    parts["static"] = static_w * seconds
    return parts


def estimate_joules(device: DeviceCoefficients, work: WorkCounts, seconds: float = 0.0, static_w: float = 0.0) -> float:
    return sum(parts_joules(device, work, seconds, static_w).values())
