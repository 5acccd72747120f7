"""torchvision's mobile CNNs under every recipe: imported?, step time, peak RSS, loss after
N steps and where the ops ran, beside PyTorch FP32 on the same model in the same run.

    python bench/bench_zoo.py [--models mobilenet_v2,resnet18] [--recipes fp32,octo]
                              [--steps 10] [--batch-size 32] [--backend cpu] [--reduced]
                              [--threads N]

Each (model, system) runs in a fresh subprocess (so its peak RSS, VmHWM, is its own): the
model from tests/zoo_torch/ (torchvision's definitions restated, full size unless
--reduced, random weights), imported through `dsptrain.from_torch` for the recipes;
`--steps` steps at batch 32 of 32x32x3 synthetic images after one warm-up step; median
seconds per step, the loss of the last step. PyTorch FP32 is the same module with SGD at the
FP32 recipe's float settings (configs/algorithms/fp32.yaml's lr, momentum, weight decay, as
bench_zoo_accuracy.py's peer; the other recipes ship the same lr 0.05 and momentum 0.9, so
the loss columns compare) on the same images, as many threads as dsptrain's kernels: all cores, or
--threads N for both (DSPTRAIN_CPU_THREADS and torch.set_num_threads); on a shared machine
one thread each is the like-for-like figure, as PyTorch's OpenMP threads stall when the
cores are oversubscribed. vs_torch is dsptrain's step time over PyTorch's (< 1: faster).
Results: bench/results/bench_zoo.{csv,json} (bench_zoo_<N>t with --threads N).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from report import print_table, write_results  # noqa: E402

TORCH_RECIPE = "fp32"  # the PyTorch peer trains with this recipe's optimizer settings

MODELS = [
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "squeezenet1_1",
    "resnet18",
    "resnet50",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
]
RECIPES = ["fp32", "niti", "octo", "wageubn", "afp", "mls", "fp8"]


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def _batches(args):
    import numpy as np

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.batch_size, 32, 32, 3)).astype(np.uint8)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int64)
    return images, labels


def child_dsptrain(args) -> dict:
    import tempfile
    import warnings
    from pathlib import Path

    import dsptrain
    import torch
    from zoo_torch import build

    net = build(args.model, full=not args.reduced)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dsptrain.from_torch(net, torch.zeros(2, 3, 32, 32))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "zoo.yaml"
        path.write_text(
            f"name: zoo\nrecipe: {args.recipe}\nbackend: {args.backend}\nenergy: estimate\n"
            f"data: {{dataset: synthetic, train_limit: 64, test_limit: 32}}\n"
            f"train: {{epochs: 1, batch_size: {args.batch_size}}}\n"
        )
        trainer = dsptrain.Trainer(dsptrain.load_run(path), model=model, progress=False, out_dir=Path(tmp) / "out")
        try:
            images, labels = _batches(args)
            trainer.step(images, labels)  # warm-up: plan, buffers
            times, stats = [], None
            for _ in range(args.steps):
                t0 = time.perf_counter()
                stats = trainer.step(images, labels)
                times.append(time.perf_counter() - t0)
        finally:
            trainer.close()
    return {
        "step_s": statistics.median(times),
        "loss": float(stats.loss),
        "peak_rss_mb": peak_rss_mb(),
        "placement": " ".join(f"{k}:{v}" for k, v in sorted(dict(stats.ops_on).items())),
    }


def child_torch(args) -> dict:
    import torch
    from zoo_torch import build

    torch.set_num_threads(int(os.environ.get("DSPTRAIN_CPU_THREADS", os.cpu_count() or 1)))
    import dsptrain

    net = build(args.model, full=not args.reduced).train()
    o = dsptrain.load_recipe(TORCH_RECIPE).optimizer
    opt = torch.optim.SGD(
        net.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay, nesterov=o.nesterov
    )
    images, labels = _batches(args)
    x = (torch.from_numpy(images).float() - 128) / 128
    x, y = x.permute(0, 3, 1, 2).contiguous(), torch.from_numpy(labels)
    times, loss = [], None
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        if step:
            times.append(time.perf_counter() - t0)
    return {
        "step_s": statistics.median(times),
        "loss": float(loss),
        "peak_rss_mb": peak_rss_mb(),
        "placement": "torch",
        "sgd": f"lr {o.lr}, momentum {o.momentum}, weight decay {o.weight_decay}",
    }


def run_child(args, model, system) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        system,
        "--model",
        model,
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--backend",
        args.backend,
    ] + (["--reduced"] if args.reduced else [])
    env = {**os.environ, **({"DSPTRAIN_CPU_THREADS": str(args.threads)} if args.threads else {})}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"imported": "dsptrain: error" not in last and "ModelFileError" not in last, "error": last[:200]}
    return {"imported": True, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--reduced", action="store_true", help="the tests' reduced widths, not torchvision's")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--threads", type=int, help="threads of both systems (default: all cores)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the other models' rows of bench/results/bench_zoo.json (each row says its steps and load)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.recipe = args.child
        print(json.dumps(child_torch(args) if args.child == "torch" else child_dsptrain(args)))
        return
    name = f"bench_zoo_{args.threads}t" if args.threads else "bench_zoo"
    rows = []
    for model in args.models.split(","):
        peer = run_child(args, model, "torch")
        rows.append(
            {
                "model": model,
                "system": "torch fp32",
                **peer,
                "steps": args.steps,
                "load_1min": round(os.getloadavg()[0], 2),
            }
        )
        for recipe in args.recipes.split(","):
            row = {
                "model": model,
                "system": recipe,
                **run_child(args, model, recipe),
                "steps": args.steps,
                "load_1min": round(os.getloadavg()[0], 2),
            }
            if row.get("step_s") and peer.get("step_s"):
                row["vs_torch"] = row["step_s"] / peer["step_s"]
            if row.get("peak_rss_mb") and peer.get("peak_rss_mb"):
                row["rss_vs_torch"] = row["peak_rss_mb"] / peer["peak_rss_mb"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.append:  # another run's rows for the models this one did not run
        old = json.loads((Path(__file__).parent / "results" / f"{name}.json").read_text())
        ran = {row["model"] for row in rows}
        kept = [{"steps": old.get("steps"), **row} for row in old["rows"] if row["model"] not in ran]
        rows = kept + rows
    columns = [
        "model",
        "system",
        "imported",
        "step_s",
        "vs_torch",
        "peak_rss_mb",
        "rss_vs_torch",
        "loss",
        "sgd",
        "placement",
        "steps",
        "load_1min",
        "error",
    ]
    threads = f"{args.threads} thread(s)" if args.threads else "all cores"
    print_table(rows, columns, title=f"bench_zoo: batch {args.batch_size}, 32x32x3, {args.steps} steps, {threads}")
    steps = sorted({row.get("steps") for row in rows if row.get("steps")})
    write_results(
        name,
        rows,
        threads=args.threads or os.cpu_count(),
        steps=steps[0] if len(steps) == 1 else "per row",
        batch_size=args.batch_size,
        full_size=not args.reduced,
        load=os.getloadavg(),
    )


if __name__ == "__main__":
    main()
