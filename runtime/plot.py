"""Plots of training runs from their metrics.jsonl: what `dsptrain plot` draws.

    from dsptrain.plot import plot_runs
    plot_runs(["runs/lenet-fmnist-niti", "runs/lenet-fmnist-fp32"], "compare.png")

Four panels, the runs overlaid, each labelled with its run's name: time per batch,
energy per batch (the meter that made the figures in the axis label, "estimate:..."
when it is one), memory per batch (the RSS growth during the step, the arena's
high-water mark when the run had one, and the process's peak so far), and accuracy per
epoch (test, and train dashed). matplotlib draws with the Agg backend: no display needed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError, UserError

MB = 1 << 20
PANEL_TITLES = ("time per batch", "energy per batch", "memory per batch", "accuracy per epoch")
SMOOTH_POINTS = 50  # above 150 batches, time per batch also shows a moving average over steps/50


@dataclass
class RunMetrics:
    """The records of one run directory, split by kind."""

    label: str
    path: Path
    steps: list = field(default_factory=list)
    epochs: list = field(default_factory=list)

    def column(self, key: str, records=None, scale: float = 1.0) -> list[float]:
        """`key` of every record, NaN where missing or null (so lines break, not lie)."""
        values = []
        for record in self.steps if records is None else records:
            value = record.get(key)
            values.append(value * scale if isinstance(value, (int, float)) else math.nan)
        return values


def load_metrics(run_dir: str | Path) -> RunMetrics:
    """RunMetrics from RUN_DIR/metrics.jsonl (or that file given directly)."""
    path = Path(run_dir)
    file = path / "metrics.jsonl" if path.is_dir() else path
    if not file.exists():
        hint = "" if path.exists() else " (no such directory)"
        raise UserError(f"{path}: no metrics.jsonl{hint}; `dsptrain train RUN.yaml` writes one to runs/<name>/")
    run = RunMetrics(label=(path if path.is_dir() else path.parent).resolve().name, path=file)
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{file}: line {number} is not JSON ({exc.msg})") from None
        kind = record.get("kind") if isinstance(record, dict) else None
        if isinstance(record, dict) and isinstance(record.get("run"), str) and record["run"]:
            run.label = record["run"]  # the run's name (profile/logs.py writes it into every record)
        if kind == "step":
            run.steps.append(record)
        elif kind == "epoch":
            run.epochs.append(record)
        else:
            raise DataError(f"{file}: line {number}: kind {kind!r} is neither 'step' nor 'epoch'")
    if not run.steps and not run.epochs:
        raise DataError(f"{file}: no step or epoch records to plot")
    return run


def _unique_labels(runs: list[RunMetrics]) -> None:
    """Two runs with the same name are told apart by their directories."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1:
            run.label = f"{run.label} ({run.path.parent.parent.name}/{run.path.parent.name})"


def _moving_average(values: list[float], window: int):
    """The centred moving average of `values` over `window` points (None below 3 points)."""
    if window < 3:
        return None
    import numpy as np

    data = np.asarray(values, dtype=float)
    kernel = np.ones(window)
    valid = np.isfinite(data)
    sums = np.convolve(np.where(valid, data, 0.0), kernel, mode="same")
    counts = np.convolve(valid.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def _meters(runs: list[RunMetrics]) -> str:
    names = sorted({r.get("energy_meter") for run in runs for r in run.steps if r.get("energy_meter")})
    return ", ".join(names) or "no meter"


def plot_runs(run_dirs, out: str | Path, title: str | None = None):
    """Draw the runs of `run_dirs` into `out` (PNG, SVG or PDF by its suffix); returns the Figure."""
    import matplotlib

    matplotlib.use("Agg")  # headless: the command runs over SSH and in CI
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [load_metrics(d) for d in run_dirs]
    _unique_labels(runs)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), layout="constrained")
    ax_time, ax_energy, ax_memory, ax_acc = axes.flat
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        color = colors[i % len(colors)]
        x = run.column("step")
        _draw_times(ax_time, run, x, color)
        ax_energy.plot(x, run.column("energy_j", scale=1e3), color=color, lw=1, label=run.label)
        _draw_memory(ax_memory, run, x, color)
        _draw_accuracy(ax_acc, run, color)
    ax_time.set(title=PANEL_TITLES[0], xlabel="batch (global step)", ylabel="ms")
    ax_energy.set(title=PANEL_TITLES[1], xlabel="batch (global step)", ylabel=f"mJ ({_meters(runs)})")
    ax_memory.set(title=PANEL_TITLES[2], xlabel="batch (global step)", ylabel="MB")
    ax_memory.set_yscale("symlog", linthresh=1.0)  # MB of growth beside hundreds of MB of peak
    ax_acc.set(title=PANEL_TITLES[3], xlabel="epoch", ylabel="accuracy %")
    ax_acc.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title or "dsptrain: " + ", ".join(run.label for run in runs))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return fig


def _draw_times(ax, run, x, color) -> None:
    """Each batch's time; over thousands of noisy batches the raw times faint, their moving
    average on top."""
    times = run.column("time_s", scale=1e3)
    smooth = _moving_average(times, len(times) // SMOOTH_POINTS)
    if smooth is None:
        ax.plot(x, times, color=color, lw=1, label=run.label)
    else:
        ax.plot(x, times, color=color, lw=0.5, alpha=0.3)
        ax.plot(x, smooth, color=color, lw=1.5, label=f"{run.label} (mean of {len(times) // SMOOTH_POINTS} batches)")


def _draw_memory(ax, run, x, color) -> None:
    """The step's RSS growth, the arena's high-water (when the run had one), the process's peak RSS."""
    ax.plot(
        x, run.column("rss_growth_bytes", scale=1 / MB), color=color, lw=1, label=f"{run.label}: RSS growth in the step"
    )
    arena = run.column("arena_high_water_bytes", scale=1 / MB)
    if any(not math.isnan(v) for v in arena):
        ax.plot(x, arena, color=color, lw=1, ls="--", label=f"{run.label}: arena high-water")
    ax.plot(
        x, run.column("peak_rss_bytes", scale=1 / MB), color=color, lw=1, ls=":", label=f"{run.label}: process peak RSS"
    )


def _draw_accuracy(ax, run, color) -> None:
    """Test and train accuracy per epoch, and validation accuracy when the run held some out (data.val_fraction)."""
    epochs = run.column("epoch", run.epochs)
    ax.plot(epochs, run.column("test_accuracy", run.epochs, 100), color=color, marker="o", label=f"{run.label}: test")
    ax.plot(
        epochs,
        run.column("train_accuracy", run.epochs, 100),
        color=color,
        marker=".",
        ls="--",
        label=f"{run.label}: train",
    )
    val = run.column("val_accuracy", run.epochs, 100)
    if any(not math.isnan(v) for v in val):
        ax.plot(epochs, val, color=color, marker="s", ls=":", label=f"{run.label}: val")
