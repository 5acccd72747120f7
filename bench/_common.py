"""Shared bench helpers: best-of-N timing, a plain-text table, CSV + JSON results."""
from __future__ import annotations

import csv
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def best_time(fn, runs: int = 5, min_seconds: float = 0.05) -> float:
    """Best per-call seconds over `runs` runs; each run repeats fn for >= min_seconds.

    Machines are noisy and noise only ever adds time, so the minimum is the estimate."""
    fn()  # warm up: caches, thread pool, lazy packing
    reps = 1
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    if once < min_seconds:
        reps = max(1, int(min_seconds / max(once, 1e-7)))
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def write_results(name: str, rows: list[dict], meta: dict) -> tuple[Path, Path]:
    """bench/results/<name>.csv and .json (the JSON also holds `meta`: machine, versions)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = RESULTS / f"{name}.csv", RESULTS / f"{name}.json"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version(),
            **meta}
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return csv_path, json_path
