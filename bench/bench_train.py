"""One VGG-11 training step (batch 64, 32x32x3 synthetic images): NITI int8 on the
`cpu` backend vs a PyTorch float32 step (SGD) on the same cores.

    python bench/bench_train.py [--steps 5] [--batch-size 64] [--backend cpu]

Prints seconds per step (best and median of --steps after one warm-up) and where the
ops ran; writes bench/results/bench_train.{csv,json}. PyTorch is optional (n/a without).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import print_table, write_results  # noqa: E402

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def dsptrain_steps(args, images, labels) -> tuple[list[float], dict]:
    import dsptrain

    run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
    run = dataclasses.replace(run, model=dataclasses.replace(run.model, name="vgg11"),
                              data=dataclasses.replace(run.data, dataset="synthetic"), backend=args.backend,
                              train=dataclasses.replace(run.train, batch_size=args.batch_size))
    trainer = dsptrain.Trainer(run, progress=False, out_dir="/tmp/dsptrain-bench-train")
    try:
        stats = trainer.step(images, labels)  # warm-up: plan, scratch buffers
        times = []
        for _ in range(args.steps):
            stats = trainer.step(images, labels)
            times.append(stats.time_s)
        return times, dict(stats.ops_on)
    finally:
        trainer.close()


def torch_steps(args, images, labels) -> list[float] | None:
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    layers, c = [], 3
    for v in VGG11:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1, bias=False), nn.ReLU()]
            c = v
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 10, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.from_numpy(images.astype(np.float32) / 255).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(labels)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--backend", default="cpu")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.batch_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int64)

    ours, placement = dsptrain_steps(args, images, labels)
    rows = [{"system": f"dsptrain NITI int8 ({args.backend})", "best_s": min(ours), "median_s": statistics.median(ours),
             "placement": " ".join(f"{k}:{v}" for k, v in placement.items())}]
    theirs = torch_steps(args, images, labels)
    rows.append({"system": "PyTorch fp32", "best_s": min(theirs) if theirs else None,
                 "median_s": statistics.median(theirs) if theirs else None, "placement": "torch"})
    if theirs:
        rows[0]["vs_torch"] = min(theirs) / min(ours)
    print(f"VGG-11 training step, batch {args.batch_size}, 32x32x3, {args.steps} steps")
    print_table(rows, ["system", "best_s", "median_s", "vs_torch", "placement"])
    write_results("bench_train", rows, steps=args.steps, batch=args.batch_size)


if __name__ == "__main__":
    main()
