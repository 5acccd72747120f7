"""Shared by the benches: print a table, write it as CSV and JSON under bench/results/."""

from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def best_time(fn, runs: int = 5, min_seconds: float = 0.05) -> float:
    """Best per-call seconds over `runs` runs; each run repeats fn for >= min_seconds.

    Machines are noisy and noise only ever adds time, so the minimum is the estimate."""
    fn()  # warm up: caches, thread pool, lazy packing
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    reps = max(1, int(min_seconds / max(once, 1e-7))) if once < min_seconds else 1
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def fmt(value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def print_table(rows: list[dict], columns: list[str] | None = None, title: str = "") -> None:
    """A plain-text table, columns in order of first appearance."""
    if not rows:
        print("(no rows)")
        return
    columns = columns or list(dict.fromkeys(k for row in rows for k in row))
    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    if title:
        print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))


def machine() -> dict:
    """Where and when a result was measured, and how busy the machine was when it was written
    (docs/results.md prints these beside every table: scripts/results.py)."""
    return {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "load_average_at_end": round(os.getloadavg()[0], 2),
    }


def write_results(name: str, rows: list[dict], out: Path | None = None, **meta) -> tuple[Path, Path]:
    """bench/results/<name>.csv and .json (with the machine and `meta`)."""
    out = Path(out or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    csv_path, json_path = out / f"{name}.csv", out / f"{name}.json"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps({"bench": name, **machine(), **meta, "rows": rows}, indent=2))
    print(f"wrote {csv_path} and {json_path}")
    return csv_path, json_path
