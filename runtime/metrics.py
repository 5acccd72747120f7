"""The records a run writes to metrics.jsonl beyond one step's: what an epoch adds up to.

A step record (train._step_record) holds one batch's loss, time, energy and memory; the
epoch record adds the epoch's total energy, the process's peak RSS, the largest RSS
growth of a step, and mean samples/s. `epoch_energy` re-sums the energy after a power
monitor's trace rewrote the steps' figures (Trainer.realign_energy).
"""
from __future__ import annotations

import math


class EpochTotals:
    """What an epoch's steps add up to, and the progress bar's smoothed samples/s."""

    SMOOTHING = 0.1   # weight of the newest batch in the moving averages (tqdm's default is 0.3)

    def __init__(self):
        self.energy_j, self.energy_steps, self.meters = 0.0, 0, set()
        self.peak_bytes = self.peak_growth_bytes = 0
        self._samples = self._seconds = None   # exponential moving averages

    def add(self, stats) -> None:
        if stats.energy_j is not None and not math.isnan(stats.energy_j):
            self.energy_j += stats.energy_j
            self.energy_steps += 1
        if stats.energy_meter:
            self.meters.add(stats.energy_meter)
        self.peak_bytes = max(self.peak_bytes, stats.peak_rss_bytes or 0)
        self.peak_growth_bytes = max(self.peak_growth_bytes, stats.rss_growth_bytes or 0)
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
        peak RSS, and samples/s over the whole epoch (training steps only, no evaluation)."""
        return {"energy_j": self.energy_j if self.energy_steps else None,
                "energy_steps": self.energy_steps, "energy_meter": ", ".join(sorted(self.meters)) or None,
                "peak_rss_bytes": self.peak_bytes or None, "peak_rss_growth_bytes": self.peak_growth_bytes,
                "samples_per_s": seen / seconds if seconds > 0 else None}


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
