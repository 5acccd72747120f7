"""The memory-budget layer: the largest batch that trains under a budget, with and without it.

    python bench/bench_memory.py [--budgets 64 128 256] [--models vgg11 resnet18] [--no-run]
                                 [--alternatives 2] [--x4-only]

Per model (NITI, 32x32x3, the `cpu` backend with `ref` for what it lacks) and budget
(MB = 2**20 bytes):
- largest batch by the planner's model: without the layer (the plain executor keeps
  every tensor to the end of the step), with the arena only (lifetimes, no slicing or
  recomputation), and with the whole layer (micro-batching + recomputation); every
  figure counts the cpu kernels' kept scratch;
- training steps, each run in a fresh process (best of 3 steps): at the plain largest
  batch without the layer; at the layer's largest batch under the budget (samples/s,
  the plan, its planned peak, and the process's peak RSS above its RSS before the
  first step); PyTorch float32 (the same network, SGD) at that batch, its peak RSS
  the same way. At the layer's largest batch, ours and PyTorch's, one step only (the
  slowest plan, to keep the bench within minutes): its time includes the first
  step's warm-up, so samples/s there is a lower bound;
- at 4x the plain largest batch under the budget (the target: <= 1.5x the plain time
  per sample): the plan the cost model chose and, to check that choice, the next
  `--alternatives` plans that also fit (cheaper by the model, smaller peak), each timed.
NITI has no BatchNorm, so ResNet-18 is `resnet18_nobn` (asking for `resnet18` gets it,
and the table says so). Table on stdout, CSV/JSON in bench/results/, a PNG plot beside.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
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
    from dsptrain.backends import select as select_backends
    from dsptrain.plan import place

    backends, cache = select_backends("cpu"), {}  # cpu, with ref for what it lacks (residual adds)

    def plan(b):
        if b not in cache:
            cache[b] = place(_graph(model, b), backends)
        return cache[b]

    def plain(b):
        return plan(b).fitter().plain_peak()

    def arena(b):  # the arena alone: the whole batch at once, every activation kept
        return min(o.peak for o in plan(b).fitter().options if o.micro_batch == b and not o.memory.recomputed_ops)

    return {
        "plain": largest_batch(lambda b: plain(b) <= budget),
        "arena": largest_batch(lambda b: arena(b) <= budget),
        "layer": largest_batch(lambda b: plan(b).fitter().smallest().peak <= budget),
    }


# ---------------------------------------------------------------- children (one process each)


def child_ours(model_name: str, batch: int, budget: int | None, alternative: int = 0, steps: int = 3) -> dict:
    """`steps` steps at `batch`: under `budget` with the memory layer (its `alternative`-th
    plan that fits, 0 being the cost model's choice), or with no budget the plain step."""
    import dataclasses

    import dsptrain
    import numpy as np
    from dsptrain.config import MemoryConfig
    from dsptrain.data import synthetic
    from dsptrain.train import _peak_rss_bytes, _rss_bytes

    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    run = dataclasses.replace(
        run, model=dataclasses.replace(run.model, name=model_name), memory=MemoryConfig(budget=budget)
    )
    trainer = dsptrain.Trainer(run, backend="cpu", progress=False, out_dir="/tmp/bench_memory", energy_meter=_NoMeter())
    data = synthetic("train", (32, 32, 3), count=batch)
    plan = trainer.plans.get(batch, True)
    if budget is not None:
        fitting = distinct_plans(plan.fitter().options, budget)
        if alternative >= len(fitting):
            return {"error": f"only {len(fitting)} distinct plans fit"}
        chosen = fitting[alternative]
        trainer.steps.memory_option = lambda _plan, _step: (chosen, budget)  # the plan to time
        trainer.memory_option(plan)
    pool = getattr(dsptrain.memory, "pool", None)  # memory/pool.py (None: code before the array pool)
    base = _rss_bytes()
    times, cpu_times, stats = [], [], None
    for _ in range(steps):
        cpu = time.process_time()
        stats = trainer.step(data.images, data.labels)
        cpu_times.append(time.process_time() - cpu)  # all threads: less disturbed by others' load
        times.append(stats.time_s)
    return {
        "s_per_sample": min(times) / batch,
        "cpu_s_per_sample": min(cpu_times) / batch,
        "pool_missed": pool.stats().get("missed") if pool else None,
        "planned_peak": stats.planned_peak_bytes,
        "arena_high_water": stats.arena_high_water_bytes,
        "plan": stats.memory_plan,
        "model_cost": chosen.cost / fitting[0].cost if budget is not None else None,
        "rss_above_start": _peak_rss_bytes() - base,
        "finite": bool(np.isfinite(stats.loss)),
    }


def distinct_plans(options, budget: int, step: float = 1.05) -> list:
    """The plans that fit `budget` which a budget can make the choice (memory.fit.frontier),
    cheapest first, keeping only those the cost model puts >= `step` x above the last kept:
    the first is the cost model's choice; the others are real alternatives to time, not
    near-copies (a plan that drops one more small activation costs the same)."""
    from dsptrain.memory.fit import frontier

    kept = []
    for option in frontier([o for o in options if o.peak <= budget]):
        if not kept or option.cost >= step * kept[-1].cost:
            kept.append(option)
    return kept


class _NoMeter:
    def start(self):
        pass

    def stop(self, stats):
        from types import SimpleNamespace

        return SimpleNamespace(joules=None, meter=None)

    def close(self):
        pass


def torch_network(model):
    """The dsptrain model as a float32 torch module (NCHW, no biases): layers in order, a
    layer with `source` reading that layer's output, an Add adding `skip_from`'s."""
    import torch
    from dsptrain import nn as dnn
    from torch import nn

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = list(model.layers)
            self.mods = nn.ModuleDict()
            for layer in self.layers:
                key = layer.name.replace(".", "_")
                if isinstance(layer, dnn.Conv2d):
                    self.mods[key] = nn.Conv2d(
                        layer.in_channels, layer.out_channels, layer.kernel, layer.stride, layer.padding, bias=False
                    )
                elif isinstance(layer, dnn.Linear):
                    self.mods[key] = nn.Linear(layer.in_features, layer.out_features, bias=False)
                elif isinstance(layer, dnn.MaxPool2d):
                    self.mods[key] = nn.MaxPool2d(layer.kernel, layer.stride)
                elif not isinstance(layer, (dnn.ReLU, dnn.Flatten, dnn.Add, dnn.GlobalAvgPool)):
                    raise ValueError(f"no torch peer for {type(layer).__name__} {layer.name}")

        def forward(self, x):
            outputs = {dnn.INPUT: x}
            for layer in self.layers:
                source = dnn.source_of(layer)
                if source is not None:
                    x = outputs[source]
                if isinstance(layer, dnn.ReLU):
                    x = torch.relu(x)
                elif isinstance(layer, dnn.Flatten):
                    x = torch.flatten(x.permute(0, 2, 3, 1), 1)  # NHWC order, as dsptrain flattens
                elif isinstance(layer, dnn.Add):
                    x = x + outputs[layer.skip_from]
                elif isinstance(layer, dnn.GlobalAvgPool):
                    x = x.mean(dim=(2, 3))
                else:
                    x = self.mods[layer.name.replace(".", "_")](x)
                outputs[layer.name] = x
            return x

    return Network()


def child_torch(model_name: str, batch: int, steps: int = 3) -> dict:
    import resource

    import torch
    from dsptrain.models import build_model
    from torch import nn

    torch.set_num_threads(2)
    net = torch_network(build_model(model_name))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096  # noqa: E731
    base = rss()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"s_per_sample": min(times) / batch, "rss_above_start": peak - base}


def _child(args: list[str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode != 0:
        out = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    else:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"    {' '.join(args)}: {took:.0f} s, {out.get('plan') or out.get('error') or 'done'}", file=sys.stderr)
    return out


# ---------------------------------------------------------------- main

NOBN = {"resnet18": "resnet18_nobn", "resnet34": "resnet34_nobn"}  # NITI has no BatchNorm


def _ms(out: dict):
    return round(1e3 * out["s_per_sample"], 3) if "s_per_sample" in out else None


def _mb(nbytes):
    return round(nbytes / MB, 1) if nbytes is not None else None


def measure(name: str, mb: int, found: dict, alternatives: int, x4_only: bool = False) -> dict:
    """The training steps of one (model, budget) row (see the module doc); `x4_only`: the
    plain step and the steps at 4x its batch, not the layer's largest batch."""
    budget, row = mb * MB, {}
    plain = _child(["ours", name, str(found["plain"]), "none"]) if found["plain"] else {}
    layer = _child(["ours", name, str(found["layer"]), str(budget), "0", "1"]) if found["layer"] and not x4_only else {}
    torch = _child(["torch", name, str(found["layer"]), "1"]) if found["layer"] and not x4_only else {}
    row.update(
        {
            "plain_ms_per_sample": _ms(plain),
            "plain_rss_mb": _mb(plain.get("rss_above_start")),
            "layer_samples_per_s": round(1 / layer["s_per_sample"], 1) if "s_per_sample" in layer else None,
            "layer_plan": layer.get("plan") or layer.get("error"),
            "layer_planned_mb": _mb(layer.get("planned_peak")),
            "layer_rss_mb": _mb(layer.get("rss_above_start")),
            "torch_f32_rss_mb": _mb(torch.get("rss_above_start")),
            "torch_ms_per_sample": _ms(torch),
        }
    )
    if not found["plain"]:
        return row
    # the target: 4x the plain batch under the same budget at <= 1.5x its time per sample;
    # the cost model's choice (alternative 0) against the next plans that fit
    four = [_child(["ours", name, str(4 * found["plain"]), str(budget), str(k)]) for k in range(alternatives + 1)]
    timed = [(k, o["s_per_sample"]) for k, o in enumerate(four) if "s_per_sample" in o]
    chosen = four[0]
    row.update(
        {
            "x4_batch": 4 * found["plain"],
            "x4_plan": chosen.get("plan") or chosen.get("error"),
            "x4_ms_per_sample": _ms(chosen),
            "x4_time_ratio": round(chosen["s_per_sample"] / plain["s_per_sample"], 2)
            if "s_per_sample" in chosen and "s_per_sample" in plain
            else None,
            "x4_cpu_time_ratio": round(chosen["cpu_s_per_sample"] / plain["cpu_s_per_sample"], 2)
            if "cpu_s_per_sample" in chosen and "cpu_s_per_sample" in plain
            else None,
            "x4_pool_missed": chosen.get("pool_missed"),
            "x4_rss_mb": _mb(chosen.get("rss_above_start")),
            "x4_alternatives_timed": len(timed) - 1,
            "x4_chosen_is_fastest": bool(timed) and min(timed, key=lambda kt: kt[1])[0] == 0,
            "x4_fastest_alternative_ratio": round(min(t for k, t in timed if k) / chosen["s_per_sample"], 2)
            if len(timed) > 1 and "s_per_sample" in chosen
            else None,
            "x4_alternatives": "; ".join(
                f"{o['plan']} (model x{o['model_cost']:.2f}, measured "
                f"x{o['s_per_sample'] / chosen['s_per_sample']:.2f})"
                for o in four[1:]
                if "s_per_sample" in o
            )
            or None,
        }
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[64, 128, 256], help="budgets in MB")
    parser.add_argument("--models", nargs="+", default=["vgg11", "resnet18"])
    parser.add_argument("--no-run", action="store_true", help="planner figures only, no training steps")
    parser.add_argument(
        "--alternatives", type=int, default=2, help="at 4x the plain batch, also time this many other plans that fit"
    )
    parser.add_argument(
        "--x4-only",
        action="store_true",
        help="time only the plain step and the steps at 4x its batch (minutes, not an hour)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model, batch, *rest = args.child
        out = (
            child_ours(model, int(batch), int(rest[0]) if rest[0] != "none" else None, *map(int, rest[1:]))
            if kind == "ours"
            else child_torch(model, int(batch), *map(int, rest))
        )
        print(json.dumps(out))
        return

    from dsptrain.models import build_model

    rows, notes, started = [], [], time.perf_counter()
    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", file=sys.stderr)
    for name in args.models:
        if name in NOBN:
            notes.append(f"{name}: NITI has no BatchNorm; measured {NOBN[name]} (the same network without BN)")
            print(notes[-1], file=sys.stderr)
            name = NOBN[name]
        model = build_model(name)
        for mb in args.budgets:
            found = model_batches(model, mb * MB)
            print(
                f"[{time.perf_counter() - started:4.0f} s] {name}, {mb} MB: largest batch by the planner: "
                f"plain {found['plain']}, arena {found['arena']}, layer {found['layer']}",
                file=sys.stderr,
            )
            row = {
                "model": name,
                "budget_mb": mb,
                "batch_plain": found["plain"],
                "batch_arena": found["arena"],
                "batch_layer": found["layer"],
                "batch_gain": round(found["layer"] / found["plain"], 1) if found["plain"] else None,
            }
            if not args.no_run:
                row.update(measure(name, mb, found, args.alternatives, args.x4_only))
            rows.append(row)
            print_table([row])
    load_after = os.getloadavg()
    print(
        f"[{time.perf_counter() - started:4.0f} s] done; load average before {load_before[0]:.2f}, "
        f"after {load_after[0]:.2f} (1 min)",
        file=sys.stderr,
    )
    print_table(rows, title="largest trainable batch (NITI, cpu backend) and time per sample under a memory budget")
    write_results(
        "bench_memory",
        rows,
        notes=notes,
        load_average_before=load_before,
        load_average_after=load_after,
        units={
            "budget_mb": "2**20 bytes",
            "rss": "peak RSS above the RSS before the first step",
            "x4": "4x the plain largest batch, under the budget; ratio: to the plain ms per sample",
        },
    )
    _plot(rows)


def _plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        budgets = [r["budget_mb"] for r in mine]
        for key, style in (("batch_plain", ":"), ("batch_arena", "--"), ("batch_layer", "-")):
            left.plot(budgets, [r[key] or float("nan") for r in mine], style, marker="o", label=f"{name} {key[6:]}")
        for label, key, scale in (
            ("without the layer", "plain_ms_per_sample", 1e3),
            ("layer, largest batch", "layer_samples_per_s", None),
            ("layer, 4x plain batch", "x4_ms_per_sample", 1e3),
        ):
            values = [(scale / r[key] if scale else r[key]) if r.get(key) else float("nan") for r in mine]
            if any(v == v for v in values):
                right.plot(budgets, values, marker="o", label=f"{name} {label}")
    left.set(xlabel="budget (MB)", ylabel="largest batch", yscale="log", title="batch that fits")
    right.set(xlabel="budget (MB)", ylabel="samples/s", title="training speed under the budget")
    left.legend(fontsize=7)
    if right.lines:
        right.legend(fontsize=7)
    fig.tight_layout()
    path = RESULTS / "bench_memory.png"
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
