"""A NITI training step on `cpu` beside PyTorch FP32's step on the same model, in the same
run: MobileNetV2 (the aim: at least 2x faster, at most half the peak RSS), with ResNet-18
and VGG-11 beside it.

    python bench/bench_mobile_step.py [--models mobilenet_v2,resnet18,vgg11] [--batch-size 64]
                                      [--steps 5] [--rounds 3] [--no-memory] [--backend cpu]
                                      [--threads N]

MobileNetV2 and ResNet-18 are tests/zoo_torch's definitions (torchvision's restated, full
width, random weights) exported to ONNX and read by dsptrain (`model: {onnx: ...}`); VGG-11 is dsptrain's built-in
model and bench_train.py's PyTorch twin. Images: one batch of 32x32x3 synthetic uint8 images.
Both systems live in one process and take turns: a warm-up step each, then --rounds rounds
of --steps steps of NITI followed by --steps steps of PyTorch (SGD, lr 0.01, as many threads
as dsptrain's pool), so that a slow spell of the shared machine falls on both. step_s is the
median step over all rounds, vs_torch the median over rounds of (PyTorch's median step /
NITI's median step): > 1 means NITI is faster. Peak RSS (VmHWM) is measured in a fresh
process per (model, system) running a warm-up and two steps. The load average is recorded.
On a shared machine PyTorch's step at 2 threads suffers far more than NITI's when the
cores are oversubscribed (its OpenMP threads wait on each other), so run --threads 1 too:
one thread each is the like-for-like figure there. Results:
bench/results/bench_mobile_step.{csv,json} (bench_mobile_step_<N>t with --threads N).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from bench_train import SETTLE_S, peak_rss_mb, timed  # noqa: E402
from report import print_table, write_results  # noqa: E402

MODELS = ["mobilenet_v2", "resnet18", "vgg11"]


def synthetic_batch(batch_size: int):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (batch_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, batch_size).astype(np.int64)
    return images, labels


def torch_net(model: str):
    """The PyTorch FP32 module of `model` (random weights, seed 0)."""
    if model == "vgg11":
        import torch
        from bench_train import torch_model

        torch.manual_seed(0)
        return torch_model(torch, "vgg11")
    from zoo_torch import build

    return build(model, full=True)


def export_onnx(model: str, tmp: Path) -> Path | None:
    """`model`'s module as ONNX under tmp (None for VGG-11, built into dsptrain): the NITI side
    reads the file, so its memory child never imports PyTorch (whose import alone is some
    hundreds of MB of RSS that dsptrain does not need)."""
    if model == "vgg11":
        return None
    import torch
    from dsptrain.interchange.torch_bridge import to_onnx_bytes  # the export dsptrain.from_torch reads

    path = tmp / f"{model}.onnx"
    path.write_bytes(to_onnx_bytes(torch_net(model), torch.zeros(2, 3, 32, 32)))
    return path


def niti_trainer(model: str, onnx: Path | None, args, tmp: Path):
    """A NITI Trainer on args.backend for `model` (from the ONNX file where given) at
    args.batch_size, writing under tmp."""
    import dsptrain

    spec = f"{{onnx: {onnx}}}" if onnx else f"{{name: {model}}}"
    path = tmp / "run.yaml"
    path.write_text(
        f"name: bench-{model}\nrecipe: niti\nbackend: {args.backend}\nmodel: {spec}\n"
        f"data: {{dataset: synthetic, train_limit: 64, test_limit: 32}}\n"
        f"train: {{epochs: 1, batch_size: {args.batch_size}}}\n"
    )
    return dsptrain.Trainer(dsptrain.load_run(path), progress=False, out_dir=tmp / "out")


def torch_stepper(model: str, threads: int):
    """One PyTorch FP32 SGD step on (uint8 NHWC images, labels)."""
    import torch

    torch.set_num_threads(threads)
    net = torch_net(model).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(images, labels):
        x = torch.from_numpy(images.astype(np.float32) / 255).permute(0, 3, 1, 2).contiguous()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), torch.from_numpy(labels)).backward()
        opt.step()

    return step


def rounds(model: str, onnx: Path | None, args) -> dict:
    """Both systems' steps on `model`, alternating by rounds (see the module docstring)."""
    from dsptrain import _cpu_ops as native

    batch = synthetic_batch(args.batch_size)
    batches = [batch] * args.steps
    with tempfile.TemporaryDirectory() as tmp:
        trainer = niti_trainer(model, onnx, args, Path(tmp))
        theirs_step = torch_stepper(model, native.threads())
        try:
            stats = trainer.step(*batch)  # warm-up: plan, scratch buffers
            theirs_step(*batch)
            ours, theirs, ratios = [], [], []
            for _ in range(args.rounds):
                time.sleep(SETTLE_S)
                times, stats = timed(trainer.step, batches)
                time.sleep(SETTLE_S)
                their_times = timed(theirs_step, batches)[0]
                ours += times
                theirs += their_times
                ratios.append(statistics.median(their_times) / statistics.median(times))
        finally:
            trainer.close()
    placed = dict(stats.ops_on)
    return {
        "model": model,
        "niti_s": statistics.median(ours),
        "torch_s": statistics.median(theirs),
        "vs_torch": statistics.median(ratios),
        "vs_torch_min": min(ratios),
        "vs_torch_max": max(ratios),
        "niti_best_s": min(ours),
        "torch_best_s": min(theirs),
        "placement": " ".join(f"{k}:{v}" for k, v in sorted(placed.items())),
    }


def child_memory(model: str, system: str, args) -> None:
    """In a fresh process: a warm-up and two steps of one system, then its peak RSS as JSON."""
    from dsptrain import _cpu_ops as native

    batch = synthetic_batch(args.batch_size)
    if system == "torch":
        step = torch_stepper(model, native.threads())
        for _ in range(3):
            step(*batch)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trainer = niti_trainer(model, Path(args.onnx) if args.onnx else None, args, Path(tmp))
            try:
                for _ in range(3):
                    trainer.step(*batch)
            finally:
                trainer.close()
    print(json.dumps({"peak_rss_mb": peak_rss_mb()}))


def peak_rss_child(model: str, system: str, onnx: Path | None, args) -> float | None:
    cmd = (
        [
            sys.executable,
            os.path.abspath(__file__),
            "--child-memory",
            system,
            "--models",
            model,
            "--batch-size",
            str(args.batch_size),
            "--backend",
            args.backend,
        ]
        + (["--onnx", str(onnx)] if onnx else [])
        + (["--threads", str(args.threads)] if args.threads else [])
    )
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"memory child {model}/{system} failed: {out.stderr[-400:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5, help="steps of each system per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, help="threads for both (default: dsptrain's pool, all cores)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS subprocesses")
    parser.add_argument("--child-memory", choices=("niti", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--onnx", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        if args.threads:
            from dsptrain import _cpu_ops as native

            native.set_threads(args.threads)
        child_memory(args.models, args.child_memory, args)
        return

    from dsptrain import _cpu_ops as native

    load_start = os.getloadavg()
    if args.threads:
        native.set_threads(args.threads)
    rows = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            onnx = export_onnx(model, Path(tmp))
            row = rounds(model, onnx, args)
            if not args.no_memory:
                row["niti_rss_mb"] = peak_rss_child(model, "niti", onnx, args)
                row["torch_rss_mb"] = peak_rss_child(model, "torch", None, args)
                if row["niti_rss_mb"] and row["torch_rss_mb"]:
                    row["rss_vs_torch"] = row["niti_rss_mb"] / row["torch_rss_mb"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    columns = [
        "model",
        "niti_s",
        "torch_s",
        "vs_torch",
        "vs_torch_min",
        "vs_torch_max",
        "niti_rss_mb",
        "torch_rss_mb",
        "rss_vs_torch",
        "placement",
    ]
    print_table(
        rows,
        columns,
        title=f"NITI step on {args.backend} vs PyTorch FP32, batch {args.batch_size}, "
        f"32x32x3, {args.rounds} rounds x {args.steps} steps, "
        f"{native.threads()} threads, load {load_start[0]:.1f}",
    )
    name = f"bench_mobile_step_{args.threads}t" if args.threads else "bench_mobile_step"
    write_results(
        name,
        rows,
        batch_size=args.batch_size,
        steps=args.steps,
        rounds=args.rounds,
        threads=native.threads(),
        isa=native.isa(),
        backend=args.backend,
        load_at_start=load_start,
        load_at_end=os.getloadavg(),
    )


if __name__ == "__main__":
    main()
