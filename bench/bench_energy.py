"""Time and energy per training batch: FP32 vs NITI, on each backend, with the meter named.

    python bench/bench_energy.py                       # every usable backend, --energy auto
    python bench/bench_energy.py --energy estimate:sd865 --batches 50 --backends cpu,dsp
    python bench/bench_energy.py --energy trace:monsoon.csv --trace-offset 1700000000.0

Each batch is bracketed by the meter (start before trainer.step, stop after), so the
figure covers exactly the step. The work the step counted (MACs per backend, as int8 for
an integer recipe and as 2 FLOPs per MAC for FP32) is handed to the meter and, in a
second column, turned into the labelled estimate, so a real measurement and the
estimate sit side by side. Writes energy.csv, energy.json and energy.png to --out.
Synthetic data by default (the cost of a step does not depend on the pixels); --data
config uses each run's own dataset.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import statistics
import sys
import textwrap
from pathlib import Path

import dsptrain
from dsptrain import data as datasets
from dsptrain.backends import availability
from dsptrain.energy import EstimateMeter, TraceMeter, WorkCounts, make_meter

RUNS = ("configs/runs/lenet-fmnist-fp32.yaml", "configs/runs/lenet-fmnist-niti.yaml")


def work_of(stats, recipe) -> WorkCounts:
    """The step's counted work: int8 MACs per backend, float FLOPs and bytes moved."""
    return WorkCounts.of(stats)


def bench_one(run_path, backend, meter, estimate, args) -> dict:
    run = dsptrain.load_run(run_path)
    if args.data == "synthetic":
        run = dataclasses.replace(run, data=dataclasses.replace(run.data, dataset="synthetic"))
    run = dataclasses.replace(run, backend=backend, train=dataclasses.replace(run.train, batch_size=args.batch_size))
    trainer = dsptrain.Trainer(run, progress=False, out_dir=Path(args.out) / "runs" / run.name)
    rows = []
    try:
        batches = datasets.batches(trainer.train_data, args.batch_size, seed=0)
        for i, (images, labels) in enumerate(batches):
            if i >= args.warmup + args.batches:
                break
            meter.start()
            estimate.start()
            stats = trainer.step(images, labels)
            work = work_of(stats, trainer.recipe)
            reading, guess = meter.stop(work), estimate.stop(work)
            if i >= args.warmup:  # the first steps build plans and warm caches
                rows.append((stats, reading, guess))
    finally:
        trainer.close()
    return run, backend, rows


def realign(raw, meter):
    """A power-monitor trace is complete only after the run: read every batch again."""
    if not isinstance(meter, TraceMeter):
        return raw
    final = {r.detail["t_start"]: r for r in meter.readings()}
    return [(run, backend, [(s, final[r.detail["t_start"]], g) for s, r, g in rows]) for run, backend, rows in raw]


def summarise(run, backend, rows) -> dict:
    stats, readings, guesses = zip(*rows)
    joules = [r.joules for r in readings if r.ok]
    errors = [r.detail["error"] for r in readings if not r.ok]
    return {
        "run": run.name,
        "recipe": run.recipe.name,
        "backend": backend,
        "batches": len(rows),
        "batch_size": stats[0].batch,
        "ran_on": ",".join(sorted({b for s in stats for b in s.ops_on})),
        "time_ms": 1e3 * statistics.median(s.time_s for s in stats),
        "energy_j": statistics.median(joules) if joules else math.nan,
        "meter": readings[0].meter,
        "estimated": readings[0].estimated,
        "estimate_j": statistics.median(g.joules for g in guesses),
        "estimate_meter": guesses[0].meter,
        "macs": sum(stats[0].int8_macs.values()) + stats[0].fp32_flops // 2,
        "uncovered": len(errors),
        "errors": errors[:1],
    }


def print_table(results) -> None:
    head = (
        f"{'recipe':<8}{'backend':<9}{'ran on':<10}{'ms/batch':>10}{'J/batch':>11}"
        f"{'meter':>24}{'est. J/batch':>14}{'MMACs':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        meter = r["meter"] + (" (est.)" if r["estimated"] else "")
        print(
            f"{r['recipe']:<8}{r['backend']:<9}{r['ran_on']:<10}{r['time_ms']:>10.2f}"
            f"{r['energy_j']:>11.4g}{meter:>24}{r['estimate_j']:>14.4g}{r['macs'] / 1e6:>9.1f}"
        )
        if r["errors"]:
            print(f"    {r['uncovered']} of {r['batches']} batches not measured; the first: {r['errors'][0]}")


def plot(results, path: Path, reason: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = list(dict.fromkeys(r["backend"] for r in results))
    recipes = list(dict.fromkeys(r["recipe"] for r in results))
    by = {(r["backend"], r["recipe"]): r for r in results}
    meter = results[0]["meter"] + (" (ESTIMATE)" if results[0]["estimated"] else "")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(recipes)
    panels = (("time_ms", "time per batch (ms)", "wall clock"), ("energy_j", "energy per batch (J)", f"meter: {meter}"))
    for ax, (key, label, title) in zip(axes, panels):
        for k, recipe in enumerate(recipes):
            xs = [i + k * width for i in range(len(backends))]
            ys = [by[(b, recipe)][key] if (b, recipe) in by else math.nan for b in backends]
            ax.bar(xs, ys, width, label=recipe)
        ax.set_xticks([i + width * (len(recipes) - 1) / 2 for i in range(len(backends))])
        ax.set_xticklabels(backends)
        ax.set_xlabel("backend")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.legend()
    batch = results[0]["batch_size"]
    # the meter's reason is long: wrapped in full rather than cut, and the layout makes room for it
    title = textwrap.fill(f"LeNet-5 training step, batch {batch}: FP32 vs NITI ({reason})", 150)
    fig.suptitle(title, fontsize=9)
    fig.set_layout_engine("constrained")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=",".join(RUNS), help="comma-separated run YAML files")
    p.add_argument("--backends", default=None, help="comma-separated (default: all usable)")
    p.add_argument("--energy", default="auto", help=dsptrain.energy.SPECS)
    p.add_argument("--device", default="sd865", help="coefficient table of the estimate")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--baseline-s", type=float, default=5.0, help="battery idle baseline")
    p.add_argument(
        "--trace-offset", type=float, default=None, help="Unix time of a trace's zero, if its timestamps are relative"
    )
    p.add_argument("--data", choices=("synthetic", "config"), default="synthetic")
    p.add_argument("--out", default="bench/out/energy")
    args = p.parse_args(argv)

    usable = [n for n, (ok, _) in availability().items() if ok]
    backends = args.backends.split(",") if args.backends else usable
    options = {"offset_s": args.trace_offset} if args.energy.startswith("trace:") else {}
    meter, reason = make_meter(args.energy, device=args.device, **options)
    print(f"energy: {reason}", file=sys.stderr)
    estimate = EstimateMeter(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = []
    with meter:
        if hasattr(meter, "measure_baseline"):
            print(f"measuring idle power for {args.baseline_s} s ...", file=sys.stderr)
            print(f"baseline {meter.measure_baseline(args.baseline_s):.3f} W", file=sys.stderr)
        for backend in backends:
            for run_path in args.runs.split(","):
                raw.append(bench_one(run_path, backend, meter, estimate, args))
        results = [summarise(*r) for r in realign(raw, meter)]
    print_table(results)
    with open(out / "energy.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[k for k in results[0] if k != "errors"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results)
    (out / "energy.json").write_text(json.dumps({"reason": reason, "results": results}, indent=1))
    plot(results, out / "energy.png", reason)
    print(f"wrote {out / 'energy.csv'}, {out / 'energy.json'}, {out / 'energy.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
