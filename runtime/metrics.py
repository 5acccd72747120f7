"""The records a run writes to metrics.jsonl beyond one step's: what an epoch adds up to.

A step record (`step_record`) holds one batch's loss, time, energy and memory; the
epoch record adds the epoch's total energy, the process's peak RSS, the largest RSS
growth of a step, and mean samples/s. `epoch_energy` re-sums the energy after a power
monitor's trace rewrote the steps' figures (`realign_energy`).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path


def step_record(stats) -> dict:
    """The metrics.jsonl line of one step (an execute.StepStats)."""
    return {
        "kind": "step",
        "epoch": stats.epoch + 1,
        "step": stats.step,
        "batch": stats.batch,
        "loss": stats.loss,
        "accuracy": stats.accuracy,
        "time_s": stats.time_s,
        "dsp_model_s": stats.dsp_model_s,
        "energy_j": stats.energy_j,
        "energy_meter": stats.energy_meter,
        "peak_rss_bytes": stats.peak_rss_bytes,
        "rss_bytes": stats.rss_bytes,
        "rss_growth_bytes": stats.rss_growth_bytes,
        "step_peak_rss_bytes": stats.step_peak_rss_bytes,
        "budget_bytes": stats.budget_bytes,
        "planned_peak_bytes": stats.planned_peak_bytes,
        "arena_high_water_bytes": stats.arena_high_water_bytes,
        "micro_batch": stats.micro_batch,
        "recomputed_ops": stats.recomputed_ops,
        "memory_plan": stats.memory_plan,
        "ops_on": stats.ops_on,
        "given_shifts": stats.given_shifts,
        "estimated_shifts": len(stats.shifts) - stats.given_shifts,
        "pipeline": stats.pipeline,
        "split_ops": stats.split_ops,
        "fallbacks": stats.fallbacks or None,
    }


class EpochTotals:
    """What an epoch's steps add up to, and the progress bar's smoothed samples/s."""

    SMOOTHING = 0.1  # weight of the newest batch in the moving averages (tqdm's default is 0.3)

    def __init__(self):
        self.energy_j, self.energy_steps, self.meters = 0.0, 0, set()
        self.peak_bytes = self.peak_growth_bytes = self.peak_arena_bytes = 0
        self._samples = self._seconds = None  # exponential moving averages

    def add(self, stats) -> None:
        if stats.energy_j is not None and not math.isnan(stats.energy_j):
            self.energy_j += stats.energy_j
            self.energy_steps += 1
        if stats.energy_meter:
            self.meters.add(stats.energy_meter)
        self.peak_bytes = max(self.peak_bytes, stats.peak_rss_bytes or 0)
        self.peak_growth_bytes = max(self.peak_growth_bytes, stats.rss_growth_bytes or 0)
        self.peak_arena_bytes = max(self.peak_arena_bytes, stats.arena_high_water_bytes or 0)
        a = self.SMOOTHING
        if self._samples is None:
            self._samples, self._seconds = stats.batch, stats.time_s
        else:
            self._samples = a * stats.batch + (1 - a) * self._samples
            self._seconds = a * stats.time_s + (1 - a) * self._seconds

    @property
    def smoothed_rate(self) -> float:
        """Samples per second over the recent batches (a ratio of moving averages, so a
        partial last batch or one slow step does not make the figure jump)."""
        return self._samples / self._seconds if self._seconds else 0.0

    def record(self, seen: int, seconds: float) -> dict:
        """The epoch record's totals: energy (None when no step had a figure), the process's
        peak RSS, the largest RSS growth of a step, the arena's high-water mark (None without
        a memory budget), and samples/s over the whole epoch (training steps only, no evaluation)."""
        return {
            "energy_j": self.energy_j if self.energy_steps else None,
            "energy_steps": self.energy_steps,
            "energy_meter": ", ".join(sorted(self.meters)) or None,
            "peak_rss_bytes": self.peak_bytes or None,
            "peak_rss_growth_bytes": self.peak_growth_bytes,
            "peak_arena_high_water_bytes": self.peak_arena_bytes or None,
            "samples_per_s": seen / seconds if seconds > 0 else None,
        }


def epoch_energy(records: list[dict]) -> list[dict]:
    """`records` (step and epoch records, in order) with every epoch's energy total re-summed
    from its step records, as EpochTotals sums them."""
    sums: dict[int, tuple[float, int]] = {}
    for record in records:
        if record.get("kind") == "step":
            joules = record.get("energy_j")
            if isinstance(joules, (int, float)) and not math.isnan(joules):
                total, count = sums.get(record["epoch"], (0.0, 0))
                sums[record["epoch"]] = (total + joules, count + 1)
    for record in records:
        if record.get("kind") == "epoch" and "energy_j" in record:
            total, count = sums.get(record["epoch"], (0.0, 0))
            record["energy_j"], record["energy_steps"] = (total if count else None), count
    return records


def realign_energy(meter, metered_steps: list[int], path: Path) -> int:
    """A power monitor's trace is often complete only after the run: align every metered
    step (`metered_steps`: their global step numbers, in order) with `meter`'s trace as it
    is now and rewrite their energy in metrics.jsonl at `path`. Returns how many steps got
    a figure; warns when the trace is unreadable."""
    from .checkpoint import atomic_write
    from .energy import MeterError

    try:
        readings = meter.readings()
    except MeterError as exc:
        warnings.warn(f"energy trace not aligned: {exc}", RuntimeWarning, stacklevel=3)
        return 0
    by_step = {step: r for step, r in zip(metered_steps, readings)}
    if not by_step or not path.exists():
        return 0
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        reading = by_step.get(record.get("step")) if record.get("kind") == "step" else None
        if reading is not None:
            record["energy_j"] = reading.joules if reading.ok else None
            record["energy_meter"] = reading.meter
        lines.append(record)
    lines = [json.dumps(record) for record in epoch_energy(lines)]  # the epochs' totals follow
    atomic_write(path, lambda f: f.write("".join(line + "\n" for line in lines).encode()))
    return sum(r.ok for r in by_step.values())
