"""The memory-budget layer: the largest batch that trains under a budget, with and without it.

    python bench/bench_memory.py [--budgets 64 128 256] [--models vgg11 resnet18] [--no-run]

Per model (NITI, 32x32x3) and budget (MB = 2**20 bytes):
- largest batch by the planner's model: without the layer (the plain executor keeps
  every tensor to the end of the step), with the arena only (lifetimes, no slicing or
  recomputation), and with the whole layer (micro-batching + recomputation);
- one training step, each in a fresh process on the `cpu` backend, at the plain
  largest batch and at the layer's: seconds per sample, the plan's peak, the arena's
  high-water mark, and the process's peak RSS above its RSS before the first step;
- the same at 4x the plain largest batch (the target: <= 1.5x the plain time per sample);
- PyTorch float32 (same network, SGD) at the layer's batch: its peak RSS above its RSS
  before the first step, in its own process.
A model the NITI recipe cannot lower (ResNet-18 while NITI has no Add/BatchNorm) is
replaced by vgg_small, and the table says so. Table on stdout, CSV/JSON in
bench/results/, a PNG plot beside them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import RESULTS, print_table, write_results  # noqa: E402

MB = 1 << 20


def _graph(model, batch):
    import dsptrain
    from dsptrain.graph import lower

    return lower(model, dsptrain.load_recipe("niti"), batch)


def largest_batch(fits, high: int = 1 << 14) -> int:
    """The largest batch b with fits(b), by doubling then bisection (0 if none)."""
    if not fits(1):
        return 0
    lo = 1
    while lo < high and fits(min(2 * lo, high)):
        lo = min(2 * lo, high)
    hi = min(2 * lo, high)
    if lo == hi:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def model_batches(model, budget: int) -> dict:
    """Largest batches by the planner, each counting the cpu backend's kept scratch
    (im2col, packed panels, per-thread buffers: Backend.scratch_bytes) as the step does."""
    from dsptrain.backends.ops_cpu import CpuBackend
    from dsptrain.memory import plain_peak
    from dsptrain.memory_fit import kept_scratch
    from dsptrain.plan import place

    backends, cache = {"cpu": CpuBackend()}, {}

    def plan(b):
        if b not in cache:
            cache[b] = place(_graph(model, b), backends)
        return cache[b]

    def plain(b):
        graph = plan(b).graph
        return plain_peak(graph) + sum(kept_scratch(graph, plan(b).scratch_bytes, b).values())

    def arena(b):   # the arena alone: the whole batch at once, every activation kept
        return min(o.peak for o in plan(b).fitter().options if o.micro_batch == b and not o.memory.recomputed_ops)

    return {
        "plain": largest_batch(lambda b: plain(b) <= budget),
        "arena": largest_batch(lambda b: arena(b) <= budget),
        "layer": largest_batch(lambda b: plan(b).fitter().smallest().peak <= budget),
    }


# ---------------------------------------------------------------- children (one process each)

def child_ours(model_name: str, batch: int, budget: int | None) -> dict:
    import dataclasses

    import numpy as np

    import dsptrain
    from dsptrain.config import MemoryConfig
    from dsptrain.data import synthetic
    from dsptrain.train import _peak_rss_bytes, _rss_bytes

    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    run = dataclasses.replace(run, model=dataclasses.replace(run.model, name=model_name),
                              memory=MemoryConfig(budget=budget))
    trainer = dsptrain.Trainer(run, backend="cpu", progress=False, out_dir="/tmp/bench_memory", energy_meter=_NoMeter())
    data = synthetic("train", (32, 32, 3), count=batch)
    plan = trainer.plans.get(batch, True)
    trainer.memory_option(plan)                     # plan before measuring
    base = _rss_bytes()
    times, stats = [], None
    for _ in range(2):
        stats = trainer.step(data.images, data.labels)
        times.append(stats.time_s)
    return {"s_per_sample": min(times) / batch, "planned_peak": stats.planned_peak_bytes,
            "arena_high_water": stats.arena_high_water_bytes, "plan": stats.memory_plan,
            "rss_above_start": _peak_rss_bytes() - base, "finite": bool(np.isfinite(stats.loss))}


class _NoMeter:
    def start(self):
        pass

    def stop(self, stats):
        from types import SimpleNamespace

        return SimpleNamespace(joules=None, meter=None)

    def close(self):
        pass


def child_torch(model_name: str, batch: int) -> dict:
    import resource
    import time

    import torch
    from torch import nn

    from dsptrain.models import build_model
    from dsptrain.nn import Conv2d, Flatten, Linear, MaxPool2d, ReLU

    torch.set_num_threads(2)
    layers = []
    for layer in build_model(model_name).layers:
        if isinstance(layer, Conv2d):
            layers.append(nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel, layer.stride,
                                    layer.padding, bias=False))
        elif isinstance(layer, ReLU):
            layers.append(nn.ReLU())
        elif isinstance(layer, MaxPool2d):
            layers.append(nn.MaxPool2d(layer.kernel, layer.stride))
        elif isinstance(layer, Flatten):
            layers.append(nn.Flatten())
        elif isinstance(layer, Linear):
            layers.append(nn.Linear(layer.in_features, layer.out_features, bias=False))
    net = nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096  # noqa: E731
    base = rss()
    times = []
    for _ in range(2):
        started = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"s_per_sample": min(times) / batch, "rss_above_start": peak - base}


def _child(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[64, 128, 256], help="budgets in MB")
    parser.add_argument("--models", nargs="+", default=["vgg11", "resnet18"])
    parser.add_argument("--no-run", action="store_true", help="planner figures only, no training steps")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model, batch, *rest = args.child
        out = (child_ours(model, int(batch), int(rest[0]) if rest and rest[0] != "none" else None)
               if kind == "ours" else child_torch(model, int(batch)))
        print(json.dumps(out))
        return

    from dsptrain.errors import LoweringError
    from dsptrain.models import build_model

    rows, notes = [], []
    for name in args.models:
        model = build_model(name)
        try:
            _graph(model, 1)
        except LoweringError as exc:
            notes.append(f"{name}: {exc}; measured vgg_small instead")
            print(notes[-1], file=sys.stderr)
            name, model = "vgg_small", build_model("vgg_small")
        for mb in args.budgets:
            budget = mb * MB
            found = model_batches(model, budget)
            row = {"model": name, "budget_mb": mb, "batch_plain": found["plain"], "batch_arena": found["arena"],
                   "batch_layer": found["layer"],
                   "batch_gain": round(found["layer"] / max(found["plain"], 1), 1)}
            if not args.no_run:
                plain = _child(["ours", name, str(found["plain"]), "none"]) if found["plain"] else {}
                ours = _child(["ours", name, str(found["layer"]), str(budget)])
                torch = _child(["torch", name, str(found["layer"])])
                # the target: 4x the plain batch under the same budget at <= 1.5x its time per sample
                four = _child(["ours", name, str(4 * found["plain"]), str(budget)]) if found["plain"] else {}
                row.update({
                    "plain_ms_per_sample": 1e3 * plain.get("s_per_sample", float("nan")),
                    "layer_ms_per_sample": 1e3 * ours.get("s_per_sample", float("nan")),
                    "time_ratio": round(ours.get("s_per_sample", float("nan")) / plain.get("s_per_sample", float("nan")), 2)
                    if plain.get("s_per_sample") else None,
                    "layer_samples_per_s": round(1 / ours["s_per_sample"], 1) if "s_per_sample" in ours else None,
                    "plain_rss_mb": round(plain.get("rss_above_start", 0) / MB, 1) if plain else None,
                    "layer_planned_mb": round((ours.get("planned_peak") or 0) / MB, 1),
                    "layer_arena_hw_mb": round((ours.get("arena_high_water") or 0) / MB, 1),
                    "layer_rss_mb": round(ours.get("rss_above_start", 0) / MB, 1),
                    "torch_f32_rss_mb": round(torch.get("rss_above_start", 0) / MB, 1),
                    "torch_ms_per_sample": 1e3 * torch.get("s_per_sample", float("nan")),
                    "layer_plan": ours.get("plan") or ours.get("error"),
                    "x4_ms_per_sample": 1e3 * four.get("s_per_sample", float("nan")),
                    "x4_time_ratio": round(four["s_per_sample"] / plain["s_per_sample"], 2)
                    if "s_per_sample" in four and plain.get("s_per_sample") else None,
                    "x4_plan": four.get("plan") or four.get("error"),
                })
            rows.append(row)
            print_table([row])
    print_table(rows, title="largest trainable batch (NITI, cpu backend) and time per sample under a memory budget")
    write_results("bench_memory", rows, notes=notes,
                  units={"budget_mb": "2**20 bytes", "rss": "peak RSS above the RSS before the first step"})
    _plot(rows)


def _plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        budgets = [r["budget_mb"] for r in mine]
        for key, style in (("batch_plain", ":"), ("batch_arena", "--"), ("batch_layer", "-")):
            left.plot(budgets, [r[key] for r in mine], style, marker="o", label=f"{name} {key[6:]}")
        if "layer_samples_per_s" in mine[0]:
            right.plot(budgets, [r.get("layer_samples_per_s") for r in mine], marker="o", label=f"{name} with layer")
    left.set(xlabel="budget (MB)", ylabel="largest batch", yscale="log", title="batch that fits")
    right.set(xlabel="budget (MB)", ylabel="samples/s", title="training speed at that batch")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    path = RESULTS / "bench_memory.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
