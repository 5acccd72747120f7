"""Memory budgets: a number, a size string, a schedule by step, or the OS's available memory.

    memory:
      budget: 64MB                      # or 67108864, or "available", or a schedule:
      budget: {0: 256MB, 100: 48MB, 300: 256MB}
      margin: 20%                       # with "available": leave this share (or size) free

Sizes use binary units: K, M, G (with or without B or iB) are powers of 1024. A schedule
maps the first step at which a value holds to the value; before its first step there is
no budget. The trainer asks for the budget between steps (`BudgetSource.at`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError, UserError

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)
MEMINFO = Path("/proc/meminfo")


class BudgetError(UserError):
    """No plan fits the memory budget; the message says the smallest one that would."""


def parse_size(text) -> int:
    """Bytes from 67108864, "64MB", "64M", "1.5GiB"; ValueError if it is none of them."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K, M or G)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(n: int | None) -> str:
    if n is None:
        return "none"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def mem_available(path: Path = MEMINFO) -> int:
    """MemAvailable from /proc/meminfo, in bytes: what the kernel can give without swapping."""
    for line in path.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{path} has no MemAvailable line")


class BudgetSource:
    """The budget at a step; `in_use` is what this run's own plan holds now (it is given
    back when the plan changes, so an OS-derived budget counts it as available)."""

    kind = "fixed"

    def at(self, step: int, in_use: int = 0) -> int | None:
        raise NotImplementedError


class Fixed(BudgetSource):
    def __init__(self, nbytes: int):
        self.nbytes = nbytes

    def at(self, step, in_use=0):
        return self.nbytes


class Schedule(BudgetSource):
    kind = "schedule"

    def __init__(self, points: dict[int, int]):
        self.points = sorted(points.items())

    def at(self, step, in_use=0):
        value = None
        for first, nbytes in self.points:
            if step >= first:
                value = nbytes
        return value


class Available(BudgetSource):
    """MemAvailable minus a margin (a share like "20%", or a size), plus what we hold."""

    kind = "available"

    def __init__(self, margin: str | int = "20%", meminfo: Path = MEMINFO):
        self.margin, self.meminfo = margin, meminfo

    def at(self, step, in_use=0):
        free = mem_available(self.meminfo)
        if isinstance(self.margin, str) and self.margin.strip().endswith("%"):
            keep = free * float(self.margin.strip()[:-1]) / 100
        else:
            keep = parse_size(self.margin)
        return int(max(free - keep, 0) + in_use)


def size_setting(value, source, key, minimum: int = 1, too_small: str = "must be at least 1 byte") -> int:
    """A size from a config file (bytes or "64MB"); a bad or too small one is a ConfigError
    naming the file, key and value."""
    try:
        nbytes = parse_size(value)
    except ValueError as exc:
        raise ConfigError(source, key, str(exc)) from None
    if nbytes < minimum:
        raise ConfigError(source, key, f"{value!r} {too_small}")
    return nbytes


def _check_margin(margin, source) -> None:
    if isinstance(margin, str) and margin.strip().endswith("%"):
        try:
            share = float(margin.strip()[:-1])
        except ValueError:
            share = -1
        if not 0 <= share < 100:
            raise ConfigError(source, "memory.margin", f"{margin!r} must be a share in 0%..99%")
    else:
        try:
            parse_size(margin)
        except ValueError as exc:
            raise ConfigError(source, "memory.margin", str(exc)) from None


def source_from_config(memory, source="memory") -> BudgetSource | None:
    """The BudgetSource a run's `memory:` section describes (None: no budget).
    Bad values raise ConfigError naming the file, the key and the value."""
    budget = memory.budget
    _check_margin(memory.margin, source)
    if memory.micro_batch is not None and memory.micro_batch < 1:
        raise ConfigError(source, "memory.micro_batch", f"{memory.micro_batch} must be >= 1")
    if budget is None:
        return None
    if isinstance(budget, str) and budget.strip().lower() == "available":
        if not MEMINFO.exists():
            raise ConfigError(source, "memory.budget", f"'available' needs {MEMINFO}, which this system lacks")
        return Available(memory.margin)
    if isinstance(budget, dict):
        if not budget:
            raise ConfigError(source, "memory.budget", "an empty schedule: give {step: size, ...}")
        points = {}
        for step, value in budget.items():
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise ConfigError(source, f"memory.budget.{step}", f"step {step!r} must be an integer >= 0")
            points[step] = size_setting(value, source, f"memory.budget.{step}")
        return Schedule(points)
    return Fixed(size_setting(budget, source, "memory.budget"))
