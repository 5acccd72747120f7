"""Mandheling's ablation: per-batch time with every scheduler technique, and with each off.

    python bench/bench_ablation.py                         # LeNet-5 + VGG-11, cpu and dsp
    python bench/bench_ablation.py --models lenet5 --backends cpu --steps 20
    python bench/bench_ablation.py --accuracy-epochs 10    # + LeNet test accuracy, adaptive on/off

For each model and backend it times `--steps` training batches (batch 64) under four
scheduler configs: all on, co_schedule off, adaptive_rescale off, batch_split off, and
prints each technique's gain as time(off) / time(all). On `dsp` (the emulated Hexagon,
QEMU) it also sums the DSP's packet counts (DspBackend.total_costs, from c20): wall time
there is QEMU's, not a phone's, and QEMU has no cache model, so batch splitting cannot
show a gain in either figure on the emulator.

Self-adaptive rescaling needs history: each timed run starts from `--warmup` steps of
the same config run on `cpu` first (weights, step counter and controller state carried
over; integer backends agree bit for bit, so this is exactly the state the timed backend
would reach itself). The fraction of range estimates skipped is from the timed steps.
VGG-11 runs on synthetic 32x32 data (timing does not depend on pixels); on the emulated
DSP it is very slow, so it runs `--dsp-vgg-steps` steps only.
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

CONFIGS = {"all": {}, "no co_schedule": {"co_schedule": False},
           "no adaptive_rescale": {"adaptive_rescale": False}, "no batch_split": {"batch_split": False}}
TECHNIQUE = {"no co_schedule": "co_schedule", "no adaptive_rescale": "adaptive_rescale",
             "no batch_split": "batch_split"}


def make_run(model: str, sched: dict, epochs: int = 1, train_limit: int | None = None):
    import dsptrain
    from dsptrain.config import CONFIG_ROOT

    run = dsptrain.load_run(CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    data = run.data if model == "lenet5" else dataclasses.replace(run.data, dataset="synthetic")
    data = dataclasses.replace(data, train_limit=train_limit, test_limit=None if model == "lenet5" else 256)
    return dataclasses.replace(run, name=f"ablation-{model}", model=dataclasses.replace(run.model, name=model),
                               data=data, train=dataclasses.replace(run.train, epochs=epochs, batch_size=64),
                               scheduler=dataclasses.replace(run.scheduler, **sched))


def batches(trainer, n: int, start: int = 0):
    from dsptrain import data as datasets

    out = []
    for i, b in enumerate(datasets.batches(trainer.train_data, 64, 0, 0)):
        if i >= start + n:
            break
        if i >= start and len(b[1]) == 64:
            out.append(b)
    return out


def measure(model: str, backend: str, label: str, steps: int, warmup: int, out_dir: Path) -> dict:
    from dsptrain.train import Trainer

    run = make_run(model, CONFIGS[label], train_limit=64 * (warmup + steps))
    warm = Trainer(run, backend="cpu", out_dir=out_dir, progress=False)
    for x, y in batches(warm, warmup):
        warm.step(x, y)
    timed = warm if backend == "cpu" else Trainer(run, backend=backend, out_dir=out_dir, progress=False)
    if timed is not warm:
        timed.state, timed.global_step = dict(warm.state), warm.global_step
        timed.rescale.restore(warm.rescale.state())
        warm.close()
    dsp = timed.backends.get("dsp")
    times, given, total, piped, packets = [], 0, 0, 0, 0
    for i, (x, y) in enumerate(batches(timed, steps, warmup)):
        before = list(dsp.total_costs) if dsp is not None else None
        started = time.perf_counter()
        stats = timed.step(x, y)
        times.append(time.perf_counter() - started)
        given, total = given + stats.given_shifts, total + len(stats.shifts)
        piped += bool(stats.pipeline and "micro-batches" in stats.pipeline)
        if dsp is not None:
            packets += dsp.total_costs[0] - before[0]
    timed.close()
    n = max(len(times), 1)
    return {"model": model, "backend": backend, "config": label, "steps": len(times),
            "batch_s": statistics.median(times) if times else float("nan"), "mean_s": sum(times) / n,
            "dsp_packets_per_batch": packets // n if dsp is not None else None,
            "estimates_skipped": given / total if total else 0.0, "pipelined_steps": piped,
            "split_ops": stats.split_ops if times else 0}


def accuracy(epochs: int, out_dir: Path) -> list[dict]:
    from dsptrain.train import Trainer

    rows = []
    for label in ("all", "no adaptive_rescale"):
        run = make_run("lenet5", CONFIGS[label], epochs=epochs)
        t = Trainer(run, backend="cpu", out_dir=out_dir / label.replace(" ", "_"), progress=False)
        history = t.fit(epochs)
        rows.append({"model": "lenet5", "backend": "cpu", "config": label, "epochs": len(history),
                     "test_accuracy": history[-1]["test_accuracy"],
                     "estimates_skipped": t.rescale.skipped_fraction()})
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
    ap.add_argument("--out", type=Path, default=Path("/tmp/dsptrain-ablation"))
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            steps = args.dsp_vgg_steps if (model != "lenet5" and backend == "dsp") else args.steps
            warmup = args.warmup if model == "lenet5" else max(args.warmup // 4, 4)
            for label in CONFIGS:
                rows.append(measure(model, backend, label, steps, warmup, args.out))
                print(rows[-1], flush=True)
    gains = []
    for r in rows:
        base = next(b for b in rows if b["model"] == r["model"] and b["backend"] == r["backend"]
                    and b["config"] == "all")
        if r["config"] in TECHNIQUE:
            g = {"model": r["model"], "backend": r["backend"], "technique": TECHNIQUE[r["config"]],
                 "time_gain": r["batch_s"] / base["batch_s"]}
            if base["dsp_packets_per_batch"]:
                g["packet_gain"] = r["dsp_packets_per_batch"] / base["dsp_packets_per_batch"]
            gains.append(g)
    print_table(rows, title="per-batch time, batch 64 (median of timed steps)")
    print_table(gains, title="gain of each technique: time with it off / time with all on (> 1: it helps)")
    acc = accuracy(args.accuracy_epochs, args.out) if args.accuracy_epochs else []
    if acc:
        print_table(acc, title=f"LeNet-5 test accuracy after {args.accuracy_epochs} epochs")
    write_results("ablation", rows + gains + acc, steps=args.steps, warmup=args.warmup,
                  dsp_vgg_steps=args.dsp_vgg_steps, accuracy_epochs=args.accuracy_epochs)


if __name__ == "__main__":
    main()
