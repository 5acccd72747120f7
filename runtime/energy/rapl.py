"""Linux RAPL energy counters, read through the powercap sysfs tree.

Layout (Documentation/power/powercap/powercap.rst in the kernel): each zone is a
directory `intel-rapl:N` (one per CPU package; AMD Zen parts appear under the same
name) with sub-zones `intel-rapl:N:M`. Each zone has `name` ("package-0", "core",
"uncore", "dram", "psys"), `energy_uj` (a counter in microjoules) and
`max_energy_range_uj` (where the counter wraps back to 0).

What we add up: package zones plus their dram sub-zones. core and uncore are parts of
the package figure (Intel SDM vol. 3B, "RAPL Interfaces": PP0/PP1 lie inside PKG) and
would be counted twice; DRAM is outside PKG so it is added; psys (the whole platform on
some laptops) contains the package, so it is reported in `detail` but not in the total.
`intel-rapl-mmio:*` zones mirror the MSR package zone and are skipped.

Since Linux 5.10 energy_uj is readable by root only (Intel advisory INTEL-SA-00389,
CVE-2020-8694, "Platypus"): the meter then says which file it could not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .base import EnergyReading, Meter, MeterError, MeterUnavailable, WorkCounts, read_number, read_word

POWERCAP_ROOT = "/sys/class/powercap"
_ZONE = re.compile(r"^intel-rapl:\d+(:\d+)?$")


@dataclass(frozen=True)
class RaplDomain:
    path: Path
    name: str  # the zone's `name` file, e.g. "package-0", "dram"
    max_range_uj: int  # the counter wraps to 0 after this many microjoules
    counted: bool  # part of the total (package, dram) or only reported (core, psys)


class RaplMeter(Meter):
    """Energy from RAPL counters. `root` is the powercap directory (a fake tree in tests)."""

    name = "rapl"

    def __init__(self, root: str | Path = POWERCAP_ROOT):
        super().__init__()
        self.root = Path(root)
        self.domains = find_domains(self.root)
        self._start_uj: dict[Path, int] = {}
        for d in self.domains:  # fail now, naming the file, rather than mid-training
            read_number(d.path / "energy_uj", self.name)

    def _begin(self) -> None:
        self._start_uj = {d.path: read_number(d.path / "energy_uj", self.name) for d in self.domains}

    def _end(self, seconds: float, work: WorkCounts) -> EnergyReading:
        per_domain, wraps, total = {}, [], 0.0
        for d in self.domains:
            end = read_number(d.path / "energy_uj", self.name)
            delta = end - self._start_uj[d.path]
            if delta < 0:
                # One wrap: the counter passed max_energy_range_uj and restarted at 0.
                # Two wraps in one batch cannot be seen; with the ~262 kJ range common
                # on Intel package zones that takes ~44 min at 100 W, far beyond a batch.
                delta += d.max_range_uj
                wraps.append(d.name)
            joules = delta / 1e6
            per_domain[f"{d.path.name}:{d.name}"] = joules
            if d.counted:
                total += joules
        detail = {"seconds": seconds, "domains": per_domain, "wrapped": wraps, "work": work.as_dict()}
        return EnergyReading(total, self.name, False, detail)


def find_domains(root: Path) -> list[RaplDomain]:
    """The RAPL zones under `root`, sorted; MeterUnavailable if there are none."""
    if not root.is_dir():
        raise MeterUnavailable(f"rapl: {root} does not exist (no powercap driver; try `modprobe intel_rapl_msr`)")
    zones = sorted(p for p in root.iterdir() if _ZONE.match(p.name))
    if not zones:
        raise MeterUnavailable(f"rapl: no intel-rapl:N zones under {root}")
    domains = []
    for zone in zones:
        name = read_word(zone / "name") or zone.name
        max_range = read_number(zone / "max_energy_range_uj", "rapl")
        if max_range <= 0:
            raise MeterError(f"rapl: {zone / 'max_energy_range_uj'} is {max_range}, expected a positive range")
        counted = name.startswith("package") or name == "dram"
        domains.append(RaplDomain(zone, name, max_range, counted))
    if not any(d.counted for d in domains):
        names = ", ".join(d.name for d in domains)
        raise MeterUnavailable(f"rapl: no package or dram zone under {root} (found {names})")
    return domains
