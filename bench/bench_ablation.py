"""Mandheling's ablation: per-batch time with every scheduler technique, and with each off.

    python bench/bench_ablation.py                         # LeNet-5 + VGG-11, cpu and dsp
    python bench/bench_ablation.py --models lenet5,vgg11,mobilenet_v2   # + MobileNetV2 (torch to build it)
    python bench/bench_ablation.py --models lenet5 --backends cpu --steps 20
    python bench/bench_ablation.py --accuracy-epochs 10    # + LeNet test accuracy, adaptive on/off
    python bench/bench_ablation.py --models "" --accuracy-epochs 10   # the accuracy check alone

For each model and backend it builds one trainer per scheduler config -- all on,
co_schedule off, adaptive_rescale off, batch_split off, and on `dsp` also placement by
the device profile off (`placement: first`: max-pool back on the DSP) and co-scheduling
forced to 2 micro-batches (the cost model keeps it serial on these models: see below) --
and times `--steps` batches (batch 64) round-robin across them, rotating the order, so
the load of a shared machine hits every config alike. A technique's gain is the median
over rounds of time(off) / time(all) (paired, > 1: it helps).

What each technique saves, and what is printed for it:
- co-scheduling overlaps the CPU's ops with the DSP's: `pipelined` (share of steps run as
  micro-batches), `no_sync` (share of those with no due range check to synchronise at),
  `ops_piped` (share of per-slice ops run without waiting) and `overlap_ms` (CPU time
  spent while the DSP queue had work). Its `micro_batches` comes from the cost model.
- adaptive rescaling skips range-estimate passes: `estimates` (passes per batch) and
  `skipped` (share of requantized ops that ran on a given shift); on `dsp` the packets of
  the epilogue (REQUANT + ABSMAX descriptors), where the skipped pass shows. A given
  shift also lets batch splitting run a requantized product in chunks (without one it
  runs whole: execute/split.py), so "no adaptive_rescale" splits fewer ops (`split_ops`);
  "adaptive_rescale (batch_split off)" compares the two with splitting off on both sides.
- placement by the profile runs the ops its `dsp.bad_at` lists (max-pool forward and
  backward) on the CPU: `on_cpu` (ops per batch run on the CPU); on `dsp` its packets.
- batch splitting keeps an op's working set in fast memory; QEMU has no cache model, so
  on `dsp` its figure is `fast_fit`: the share of the products' working-set bytes (per
  op, per chunk) that fit VTCM or the DSP's L2, not a time.
On `dsp` wall time is QEMU's and packets (c20, DspBackend.total_costs) are the DSP's own
measure; `model_ms` is the step in modeled time (runtime/cost.py): the DSP's modeled
seconds (dsp_model_s: critical-path packets over the profile's clock, the DDR term, a
call cost per batch) and the CPU's measured seconds, overlapped as the pipeline runs them
(max + min / micro-batches) or added when serial; `model_gain` is its paired ratio. The
DDR term counts every arena byte, so batch splitting's VTCM residency is not credited.
Self-adaptive rescaling needs history: each trainer first runs `--warmup` steps
of its config on `cpu` (weights, step counter and controller state carried over; integer
backends agree bit for bit, so this is the state the timed backend would reach itself).
VGG-11 runs on synthetic 32x32 data (timing does not depend on pixels); on the emulated
DSP one step takes about a minute, so it runs `--dsp-vgg-steps` steps only. So do the
mobile CNNs of tests/zoo_torch/ (mobilenet_v2: torchvision's definition, width 1.0,
imported through from_torch; bench/zoo_models.py): NITI runs their products in int8
(depthwise on the dwconv2d hooks) and batch norm and ReLU6 in float on the CPU, so
co-scheduling has CPU work to overlap with the DSP's products.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import print_table, write_results  # noqa: E402
from zoo_models import zoo_model  # noqa: E402

CONFIGS = {
    "all": {},
    "no co_schedule": {"co_schedule": False},
    "no adaptive_rescale": {"adaptive_rescale": False},
    "no batch_split": {"batch_split": False},
    "no adaptive_rescale, no batch_split": {"adaptive_rescale": False, "batch_split": False},
}
DSP_OFF = {"placement first": {"placement": "first"}}  # dsp only: without a DSP nothing moves
FORCED = {"2 micro-batches": {"micro_batches": 2}}  # dsp only: the pipeline, forced on
TECHNIQUE = {
    "no co_schedule": "co_schedule",
    "no adaptive_rescale": "adaptive_rescale",
    "no batch_split": "batch_split",
    "no adaptive_rescale, no batch_split": "adaptive_rescale (batch_split off)",
    "placement first": "placement: profile (vs first)",
    "2 micro-batches": "co_schedule forced to 2",
}
# What a technique switched off is compared with when not "all": adaptive rescaling's
# given shifts are what lets a requantized product run in chunks (execute/split.py), so
# "all" vs "no adaptive_rescale" also moves every such product between whole and split;
# this pair holds batch splitting off on both sides, leaving the range estimates alone.
AGAINST = {"no adaptive_rescale, no batch_split": "no batch_split"}
EPILOGUE = ("requant", "absmax")  # DSP descriptors of the range estimate + rounding


def make_run(model: str, sched: dict, epochs: int = 1, train_limit: int | None = None):
    import dsptrain
    from dsptrain.config import CONFIG_ROOT

    run = dsptrain.load_run(CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    data = run.data if model == "lenet5" else dataclasses.replace(run.data, dataset="synthetic")
    data = dataclasses.replace(data, train_limit=train_limit, test_limit=None if model == "lenet5" else 256)
    return dataclasses.replace(
        run,
        name=f"ablation-{model}",
        model=dataclasses.replace(run.model, name=model),
        data=data,
        train=dataclasses.replace(run.train, epochs=epochs, batch_size=64),
        scheduler=dataclasses.replace(run.scheduler, **sched),
    )


def batches(trainer, n: int, start: int = 0):
    from dsptrain import data as datasets

    out = []
    for i, b in enumerate(datasets.batches(trainer.train_data, 64, 0, 0)):
        if i >= start + n:
            break
        if i >= start and len(b[1]) == 64:
            out.append(b)
    return out


def count_packets(dsp) -> dict:
    """Packets per DSP descriptor kind, summed from every batch the backend runs."""
    counts: dict[str, int] = {}
    run = dsp._run

    def counted(descs):
        try:
            run(descs)
        finally:
            for name, packets, _, _ in dsp.last_costs:
                counts[name] = counts.get(name, 0) + packets

    dsp._run = counted
    return counts


def fast_fit(plan) -> float | None:
    """Share of the products' working-set bytes (each op as it runs: whole or one chunk)
    that fit a fast memory of the backend running it (VTCM / DSP L2; CPU L2)."""
    from dsptrain.plan import splittable, working_set

    fit = total = 0
    rows = plan.graph.batch
    for op in plan.graph.ops:
        if not splittable(plan.graph, op) or op.is_alias() or not plan.graph.row_local(op):
            continue
        fixed, per_row = working_set(plan.graph, op)
        chunk = plan.split_rows(op, rows) or rows
        keys = ("dsp.vtcm", "dsp.l2") if plan.backend_of(op) == "dsp" else ("cpu.l2",)
        ws = fixed + per_row * chunk
        total += fixed + per_row * rows
        if any(ws <= plan.device.size(k) for k in keys):
            fit += fixed + per_row * rows
    return fit / total if total else None


def start_trainer(model: str, backend: str, label: str, steps: int, warmup: int, out_dir: Path):
    """A trainer for `label` on `backend`, after `warmup` steps of the same config on cpu."""
    from dsptrain.train import Trainer

    sched = {**CONFIGS, **DSP_OFF, **FORCED}[label]
    run = make_run(model, sched, train_limit=64 * (warmup + steps))
    warm = Trainer(run, backend="cpu", out_dir=out_dir, progress=False, model=zoo_model(model))
    for x, y in batches(warm, warmup):
        warm.step(x, y)
    if backend == "cpu":
        return warm
    timed = Trainer(run, backend=backend, out_dir=out_dir, progress=False, model=zoo_model(model))
    timed.state, timed.global_step = dict(warm.state), warm.global_step
    timed.rescale.restore(warm.rescale.state())
    warm.close()
    return timed


def modeled(stats, micro_batches: int) -> float | None:
    """The step in modeled time: the DSP's modeled seconds with the CPU's measured ones."""
    from dsptrain.cost import modeled_step_seconds

    if stats.dsp_model_s is None:
        return None
    return modeled_step_seconds(stats.dsp_model_s, stats.backend_time_s.get("cpu", 0.0), micro_batches)


def measure(model: str, backend: str, labels: list[str], steps: int, warmup: int, out_dir: Path):
    """Rows per config, and per round the times (label -> seconds), configs interleaved;
    rounds carry the modeled times too (key (label, "model"))."""
    trainers = {label: start_trainer(model, backend, label, steps, warmup, out_dir) for label in labels}
    packets = {label: count_packets(t.backends["dsp"]) for label, t in trainers.items() if "dsp" in t.backends}
    data = batches(trainers["all"], steps, warmup)
    seen = {label: [] for label in labels}
    rounds = []
    for r, (x, y) in enumerate(data):
        times = {}
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            started = time.perf_counter()
            stats = trainers[label].step(x, y)
            times[label] = time.perf_counter() - started
            times[label, "model"] = modeled(stats, trainers[label].plans.get(64, True).micro_batches)
            seen[label].append(stats)
        rounds.append(times)
    rows = []
    for label in labels:
        t, st = trainers[label], seen[label]
        n = max(len(st), 1)
        plan = t.plans.get(64, True)
        times = [r[label] for r in rounds]
        piped = [s for s in st if s.pipeline and "micro-batches" in s.pipeline]
        per_slice = sum(s.pipeline_ops + s.pipeline_syncs for s in piped)
        counts = packets.get(label)
        rows.append(
            {
                "model": model,
                "backend": backend,
                "config": label,
                "steps": len(st),
                "batch_s": statistics.median(times) if times else float("nan"),
                "best_s": min(times, default=float("nan")),
                "model_ms": 1e3 * statistics.median(m)
                if (m := [r[label, "model"] for r in rounds if r.get((label, "model")) is not None])
                else None,
                "micro_batches": plan.micro_batches,
                "on_cpu": sum(s.ops_on.get("cpu", 0) for s in st) / n,
                "pipelined": len(piped) / n,
                "no_sync": sum(s.pipeline_syncs == 0 for s in piped) / max(len(piped), 1),
                "ops_piped": sum(s.pipeline_ops for s in piped) / per_slice if per_slice else 0.0,
                "overlap_ms": 1e3 * sum(s.overlap_s for s in st) / n,
                "estimates": sum(len(s.shifts) - s.given_shifts for s in st) / n,
                "skipped": sum(s.given_shifts for s in st) / max(sum(len(s.shifts) for s in st), 1),
                "split_ops": st[-1].split_ops if st else 0,
                "fast_fit": fast_fit(plan) if backend == "dsp" else None,
                "packets": sum(counts.values()) // n if counts is not None else None,
                "epilogue_packets": sum(v for k, v in counts.items() if k in EPILOGUE) // n
                if counts is not None
                else None,
            }
        )
        print(rows[-1], flush=True)
    layers = [{"model": model, "op": name, **v} for name, v in trainers["all"].rescale.summary().items()]
    for t in trainers.values():
        t.close()
    return rows, rounds, layers


def gains(rows: list[dict], rounds: list[dict]) -> list[dict]:
    """Per technique: the median over rounds of time without it / time with it, and packet ratios."""
    base = next(r for r in rows if r["config"] == "all")
    by_config = {r["config"]: r for r in rows}
    out = []
    for r in rows:
        if r["config"] not in TECHNIQUE:
            continue
        # a technique switched off: time(off) / time(all); the pipeline forced on: time(all) / time(forced)
        on, off = (r["config"], "all") if r["config"] in FORCED else (AGAINST.get(r["config"], "all"), r["config"])
        ratios = [rd[off] / rd[on] for rd in rounds]
        g = {
            "model": r["model"],
            "backend": r["backend"],
            "technique": TECHNIQUE[r["config"]],
            "time_gain": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
        }
        modeled_ratios = [
            rd[off, "model"] / rd[on, "model"] for rd in rounds if rd.get((off, "model")) and rd.get((on, "model"))
        ]
        if modeled_ratios:
            g["model_gain"] = statistics.median(modeled_ratios)
        if base["packets"]:
            g["packet_gain"] = by_config[off]["packets"] / by_config[on]["packets"]
            g["epilogue_packet_gain"] = by_config[off]["epilogue_packets"] / max(by_config[on]["epilogue_packets"], 1)
        if r["config"] == "no batch_split" and base["fast_fit"] is not None:
            g["fast_fit_on_off"] = f"{base['fast_fit']:.2f} / {r['fast_fit']:.2f}"
        out.append(g)
    return out


def accuracy(epochs: int, out_dir: Path, seeds: list[int]) -> list[dict]:
    """LeNet-5's test accuracy after `epochs`, adaptive rescaling on and off, per seed: the
    spread between seeds is the noise the on/off difference is judged against."""
    from dsptrain.train import Trainer

    rows = []
    for seed in seeds:
        for label in ("all", "no adaptive_rescale"):
            run = make_run("lenet5", CONFIGS[label], epochs=epochs)
            run = dataclasses.replace(run, train=dataclasses.replace(run.train, seed=seed))
            t = Trainer(run, backend="cpu", out_dir=out_dir / f"{label.replace(' ', '_')}-{seed}", progress=False)
            history = t.fit(epochs)
            rows.append(
                {
                    "model": "lenet5",
                    "backend": "cpu",
                    "config": label,
                    "seed": seed,
                    "epochs": len(history),
                    "test_accuracy": history[-1]["test_accuracy"],
                    "estimates_skipped": t.rescale.skipped_fraction(),
                }
            )
            t.close()
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="lenet5,vgg11")
    ap.add_argument("--backends", default="cpu,dsp")
    ap.add_argument("--steps", type=int, default=8, help="timed batches per config")
    ap.add_argument("--warmup", type=int, default=40, help="batches on cpu before timing (controller history)")
    ap.add_argument("--dsp-vgg-steps", type=int, default=1, help="timed VGG-11 batches on the emulated DSP")
    ap.add_argument("--accuracy-epochs", type=int, default=0, help="LeNet epochs, adaptive on vs off (0: skip)")
    ap.add_argument("--accuracy-seeds", default="0,1", help="seeds of the accuracy check (their spread is the noise)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/dsptrain-ablation"))
    ap.add_argument("--results", default="ablation", help="name of the JSON in bench/results/ (default ablation)")
    args = ap.parse_args()
    rows, gain_rows, layer_rows = [], [], []
    for model in [m for m in args.models.split(",") if m]:  # --models "": the accuracy check only
        for backend in args.backends.split(","):
            steps = args.dsp_vgg_steps if (model != "lenet5" and backend == "dsp") else args.steps
            warmup = args.warmup if model == "lenet5" else max(args.warmup // 4, 4)
            labels = list(CONFIGS) + (list(DSP_OFF) + list(FORCED) if backend == "dsp" else [])
            got, rounds, layers = measure(model, backend, labels, steps, warmup, args.out)
            rows += got
            gain_rows += gains(got, rounds)
            if backend == args.backends.split(",")[0]:
                layer_rows += layers
    if rows:
        print_table(rows, title="per-batch time, batch 64 (median of timed steps)")
        print_table(
            gain_rows,
            title="gain of each technique: median over rounds of time without it / time with it (> 1: it helps)",
        )
        print_table(
            layer_rows,
            title="adaptive rescaling per op (config all, warm-up + timed steps): range estimates run / skipped",
        )
    seeds = [int(x) for x in args.accuracy_seeds.split(",")]
    acc = accuracy(args.accuracy_epochs, args.out, seeds) if args.accuracy_epochs else []
    if acc:
        print_table(acc, title=f"LeNet-5 test accuracy after {args.accuracy_epochs} epochs")
    write_results(
        args.results if rows else "ablation_accuracy",
        rows + gain_rows + layer_rows + acc,
        steps=args.steps,
        warmup=args.warmup,
        dsp_vgg_steps=args.dsp_vgg_steps,
        accuracy_epochs=args.accuracy_epochs,
    )


if __name__ == "__main__":
    main()
