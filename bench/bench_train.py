"""Training speed and memory: NITI int8 on the `cpu` backend vs PyTorch float32 (SGD) on
the same cores, same model and batch.

    python bench/bench_train.py [--steps 5] [--rounds 3] [--batch-size 64] [--backend cpu]
                                [--lenet-steps 100] [--no-memory] [--only vgg|lenet]

  vgg11    one VGG-11 step (batch 64, 32x32x3 synthetic images): best/median s/step over
           --rounds rounds that alternate --steps steps of each system, so that a slow
           spell of the shared machine (seconds long) falls on both; vs_torch is the
           median over rounds of each round's best-step ratio, with its range
  lenet5   LeNet-5 on Fashion-MNIST (real batches of the training set): ms/step (best
           and median of --lenet-steps after a warm-up) and seconds per epoch, measured:
           one whole pass over the 60,000 training images, timed from the first step's
           start to the last step's end (not a median step times a count)
  memory   peak RSS of a VGG-11 step, each system in a fresh subprocess (the import,
           the model and a few steps), so neither sees the other's allocations

Results go to bench/results/bench_train.{csv,json}. PyTorch is optional (n/a without).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import print_table, write_results  # noqa: E402

# A pause before each system's round: the other's worker threads (PyTorch's OpenMP
# threads spin-wait after a parallel region) must be idle again, or they take a core.
SETTLE_S = 0.5

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def dsptrain_trainer(args, model: str = "vgg11", dataset: str = "synthetic"):
    """A NITI Trainer for `model` on `dataset` at the bench's backend and batch size."""
    import dsptrain

    run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
    run = dataclasses.replace(
        run,
        model=dataclasses.replace(run.model, name=model),
        data=dataclasses.replace(run.data, dataset=dataset),
        backend=args.backend,
        train=dataclasses.replace(run.train, batch_size=args.batch_size),
    )
    return dsptrain.Trainer(run, progress=False, out_dir="/tmp/dsptrain-bench-train")


def timed(step, batches) -> tuple[list[float], object]:
    """The wall seconds of each `step(images, labels)` call over `batches`, and the last result."""
    times, result = [], None
    for images, labels in batches:
        t0 = time.perf_counter()
        result = step(images, labels)
        times.append(time.perf_counter() - t0)
    return times, result


def dsptrain_steps(
    args, batches, model: str = "vgg11", dataset: str = "synthetic", whole: list | None = None
) -> tuple[list[float], dict]:
    """Seconds per step over `batches` (an iterable of (images, labels)) after one warm-up,
    each the wall time of the whole Trainer.step call, as torch_steps times its step (the
    input's conversion and the bookkeeping around the executor included: about 0.7 ms of
    a VGG-11 step more than StepStats.time_s); with `whole` (a list of batches), also the
    wall seconds of one pass over all of them, appended to the returned dict as "pass_s"."""
    trainer = dsptrain_trainer(args, model, dataset)
    try:
        batches = iter(batches)
        trainer.step(*next(batches))  # warm-up: plan, scratch buffers
        times, stats = timed(trainer.step, batches)
        placed = dict(stats.ops_on)
        if whole is not None:
            t0 = time.perf_counter()
            for images, labels in whole:
                trainer.step(images, labels)
            placed["pass_s"] = time.perf_counter() - t0
        return times, placed
    finally:
        trainer.close()


def torch_model(torch, model: str):
    from torch import nn

    if model == "lenet5":  # as dsptrain.models.lenet5, without biases (NITI has none)
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2, bias=False),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, bias=False),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(400, 120, bias=False),
            nn.ReLU(),
            nn.Linear(120, 84, bias=False),
            nn.ReLU(),
            nn.Linear(84, 10, bias=False),
        )
    layers, c = [], 3
    for v in VGG11:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1, bias=False), nn.ReLU()]
            c = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 10, bias=False))


def torch_stepper(args, model: str = "vgg11"):
    """One PyTorch float32 SGD step on (uint8 NHWC images, labels), None without PyTorch."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    net = torch_model(torch, model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(images, labels):
        x = torch.from_numpy(images.astype(np.float32) / 255).permute(0, 3, 1, 2).contiguous()
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), torch.from_numpy(labels)).backward()
        opt.step()

    return step


def torch_steps(args, batches, model: str = "vgg11", whole: list | None = None) -> list[float] | None:
    """PyTorch float32 SGD steps over `batches` (uint8 NHWC images), the first a warm-up;
    with `whole`, one more item: the wall seconds of a pass over all of those batches."""
    step = torch_stepper(args, model)
    if step is None:
        return None
    times = timed(step, batches)[0][1:]
    if whole is None:
        return times
    t0 = time.perf_counter()
    for images, labels in whole:
        step(images, labels)
    return times + [time.perf_counter() - t0]


def vgg_rounds(args) -> tuple[list[float], list[float] | None, list[float], dict]:
    """(our step times, PyTorch's or None, each round's best-step ratio, our placement):
    one warm-up step each, then --rounds rounds of --steps steps of ours then theirs."""
    batches = vgg_batches(args, args.steps)
    trainer, theirs_step = dsptrain_trainer(args), torch_stepper(args)
    try:
        trainer.step(*batches[0])  # warm-up: plan, scratch buffers
        if theirs_step is not None:
            theirs_step(*batches[0])
        ours, theirs, ratios = [], [] if theirs_step else None, []
        for _ in range(args.rounds):
            time.sleep(SETTLE_S)
            times, stats = timed(trainer.step, batches)
            ours += times
            if theirs_step is not None:
                time.sleep(SETTLE_S)
                their_times = timed(theirs_step, batches)[0]
                theirs += their_times
                ratios.append(min(their_times) / min(times))
        return ours, theirs, ratios, dict(stats.ops_on)
    finally:
        trainer.close()


def vgg_batches(args, count: int):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.batch_size, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, args.batch_size).astype(np.int64)
    return [(images, labels)] * count


def fmnist_batches(args, count: int | None):
    """The first `count` (None: all) shuffled batches of Fashion-MNIST's training set, and its size."""
    from dsptrain.data import batches, load_fashion_mnist

    train = load_fashion_mnist("train")
    out = []
    for batch in batches(train, args.batch_size, seed=0):
        if len(out) == count:
            break
        out.append(batch)
    return out, len(train)


def peak_rss_child(system: str, args) -> float | None:
    """Peak RSS (MB) of a fresh process running VGG-11 steps on `system`."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child-memory",
        system,
        "--batch-size",
        str(args.batch_size),
        "--backend",
        args.backend,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=os.getcwd())
    if out.returncode != 0:
        print(f"memory child {system} failed: {out.stderr[-400:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def child_memory(system: str, args) -> None:
    batches = vgg_batches(args, 3)
    if system == "torch":
        if torch_steps(args, batches) is None:
            raise SystemExit("torch is not installed")
    else:
        dsptrain_steps(args, batches)
    print(json.dumps({"peak_rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss across
    exec, so a child of a big parent would report the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="VGG-11 steps timed per round")
    parser.add_argument("--rounds", type=int, default=3, help="VGG-11 rounds, each --steps steps of each system")
    parser.add_argument("--lenet-steps", type=int, default=100, help="LeNet-5 steps timed")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--only", choices=("vgg", "lenet"), help="run one of the two models")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS subprocesses")
    parser.add_argument("--child-memory", choices=("dsptrain", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1:
        parser.error(f"--steps and --rounds must be at least 1 (got {args.steps} and {args.rounds})")
    if args.child_memory:
        child_memory(args.child_memory, args)
        return

    rows = []
    if args.only != "lenet":
        ours, theirs, ratios, placement = vgg_rounds(args)
        row = {
            "model": "vgg11",
            "system": f"dsptrain NITI int8 ({args.backend})",
            "best_s": min(ours),
            "median_s": statistics.median(ours),
            "placement": " ".join(f"{k}:{v}" for k, v in placement.items()),
        }
        peer = {
            "model": "vgg11",
            "system": "PyTorch fp32",
            "best_s": min(theirs) if theirs else None,
            "median_s": statistics.median(theirs) if theirs else None,
            "placement": "torch",
        }
        if theirs:
            row["vs_torch"] = statistics.median(ratios)
            row["vs_torch_range"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
        if not args.no_memory:
            row["peak_rss_mb"], peer["peak_rss_mb"] = peak_rss_child("dsptrain", args), peak_rss_child("torch", args)
            if row["peak_rss_mb"] and peer["peak_rss_mb"]:
                row["rss_vs_torch"] = row["peak_rss_mb"] / peer["peak_rss_mb"]
        rows += [row, peer]
    if args.only != "vgg":
        epoch, train_size = fmnist_batches(args, None)
        batches = epoch[: args.lenet_steps + 1]
        ours, placement = dsptrain_steps(args, batches, model="lenet5", dataset="fashion-mnist", whole=epoch)
        theirs = torch_steps(args, batches, model="lenet5", whole=epoch)
        their_epoch = theirs.pop() if theirs else None
        row = {
            "model": "lenet5",
            "system": f"dsptrain NITI int8 ({args.backend})",
            "best_s": min(ours),
            "median_s": statistics.median(ours),
            "epoch_s": placement.pop("pass_s"),
            "placement": " ".join(f"{k}:{v}" for k, v in placement.items()),
        }
        peer = {
            "model": "lenet5",
            "system": "PyTorch fp32",
            "best_s": min(theirs) if theirs else None,
            "median_s": statistics.median(theirs) if theirs else None,
            "epoch_s": their_epoch,
            "placement": "torch",
        }
        if theirs:
            row["vs_torch"] = min(theirs) / min(ours)
            row["epoch_vs_torch"] = row["epoch_s"] / peer["epoch_s"]
        rows += [row, peer]
    load = os.getloadavg()
    print(
        f"Training step, batch {args.batch_size}: VGG-11 32x32x3 ({args.rounds} rounds of {args.steps} steps each, "
        f"alternating; vs_torch = median of the rounds' ratios), "
        f"LeNet-5 Fashion-MNIST ({args.lenet_steps} steps; epoch_s = one measured pass over the "
        f"{len(epoch) if args.only != 'vgg' else 0} batches of the training set; epoch_vs_torch = ours / PyTorch's, "
        f"target <= 0.7); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print_table(
        rows,
        [
            "model",
            "system",
            "best_s",
            "median_s",
            "vs_torch",
            "vs_torch_range",
            "epoch_s",
            "epoch_vs_torch",
            "peak_rss_mb",
            "rss_vs_torch",
            "placement",
        ],
    )
    write_results(
        "bench_train",
        rows,
        steps=args.steps,
        rounds=args.rounds,
        lenet_steps=args.lenet_steps,
        batch=args.batch_size,
        load=load,
    )


if __name__ == "__main__":
    main()
