"""Mobile CNNs on Fashion-MNIST-32: test accuracy of dsptrain's recipes beside PyTorch FP32
training the same module on the same batches for the same epochs.

    python bench/bench_zoo_accuracy.py [--models mobilenet_v2,resnet18] [--recipes niti]
                                       [--epochs 2] [--train-limit 60000] [--backend cpu]
                                       [--bn-recalibration 30] [--mu 4] [--lr-step-epochs 1]

The models are torchvision's definitions restated (tests/zoo_torch/, full size, random
weights, seed 0), imported through `dsptrain.from_torch`. Fashion-MNIST (Debian's
dataset-fashion-mnist) is padded to 32x32 and its gray channel repeated, as dsptrain does
for any 32x32x3 model; pixels enter as (p - 128) / 128 on both sides. PyTorch: SGD with the
recipe's float settings (lr, momentum), batch 64 in dsptrain's batch order (data.batches,
seed 0), one intra-op thread unless --torch-threads. dsptrain re-estimates its batch norms'
running statistics over --bn-recalibration training batches before each evaluation
(train.bn_recalibration; 0: off); --mu sets NITI's weight-step bits for the whole run.
--lr-step-epochs E halves both sides' learning rate every E epochs: PyTorch's SGD rate, and
dsptrain's `train.lr_schedule` (kind step), which is one bit less of NITI's mu and half the
rate of its float parameters. Prints test accuracy after each epoch and seconds per epoch
(a whole epoch, timed), and writes bench/results/zoo_accuracy.{csv,json}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import dsptrain  # noqa: E402
import report  # noqa: E402
from dsptrain import data as datasets  # noqa: E402

BATCH = 64
LR_GAMMA = 0.5  # --lr-step-epochs: the rate's factor at each step


def _padded(split: str, limit: int | None):
    return datasets.as_32x32_rgb(datasets.load_fashion_mnist(split).limit(limit))  # as the run's train_limit


def engine(model_name: str, recipe: str, args, out: Path) -> dict:
    import torch
    from zoo_torch import build

    net = build(model_name, full=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dsptrain.from_torch(net, torch.zeros(2, 3, 32, 32))
    limit = f", train_limit: {args.train_limit}" if args.train_limit else ""
    run_file = out / f"{model_name}-{recipe}.yaml"
    mu = f", schedule: {{mu: [[0, {args.mu}]]}}" if args.mu and recipe == "niti" else ""
    decay = ""
    if args.lr_step_epochs:
        steps = args.lr_step_epochs * -(-len(_padded("train", args.train_limit or None).labels) // BATCH)
        decay = f", lr_schedule: {{kind: step, step_size: {steps}, gamma: {LR_GAMMA}}}"
    run_file.write_text(
        f"name: {model_name}-{recipe}\nrecipe: {{name: {recipe}{mu}}}\nbackend: {args.backend}\nenergy: estimate\n"
        f"data: {{dataset: fashion-mnist{limit}}}\n"
        f"train: {{epochs: {args.epochs}, batch_size: {BATCH}, seed: 0, "
        f"bn_recalibration: {args.bn_recalibration}{decay}}}\n"
    )
    trainer = dsptrain.Trainer(dsptrain.load_run(run_file), model=model, progress=False, out_dir=out / run_file.stem)
    try:
        history = trainer.fit(
            on_epoch=lambda r: print(
                f"  {model_name} {recipe} epoch {r['epoch']}: {r['test_accuracy']:.4f} ({r['seconds']:.1f} s)",
                flush=True,
            )
        )
    finally:
        trainer.close()
    settings = [args.backend, f"bn_recalibration {args.bn_recalibration}"] + ([f"mu {args.mu}"] if mu else [])
    settings += [f"lr x{LR_GAMMA} every {args.lr_step_epochs} epochs"] if decay else []
    return _row(model_name, f"dsptrain {recipe} ({', '.join(settings)})", history)


def torch_fp32(model_name: str, recipe_name: str, args) -> dict:
    import torch
    from zoo_torch import build

    torch.manual_seed(0)
    torch.set_num_threads(args.torch_threads)
    net = build(model_name, full=True)
    o = dsptrain.load_recipe(recipe_name).optimizer
    opt = torch.optim.SGD(net.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    train, test = _padded("train", args.train_limit or None), _padded("test", None)

    def scale(images):
        return torch.from_numpy((images.astype(np.float32) - 128) / 128).permute(0, 3, 1, 2).contiguous()

    history = []
    for epoch in range(args.epochs):
        for group in opt.param_groups:  # the same staircase as dsptrain's train.lr_schedule
            group["lr"] = o.lr * LR_GAMMA ** (epoch // args.lr_step_epochs) if args.lr_step_epochs else o.lr
        started = time.perf_counter()
        net.train()
        for images, labels in datasets.batches(train, BATCH, seed=0, epoch=epoch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(scale(images)), torch.from_numpy(labels)).backward()
            opt.step()
        seconds = time.perf_counter() - started
        net.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test.labels), 500):
                correct += int(
                    (net(scale(test.images[i : i + 500])).argmax(1).numpy() == test.labels[i : i + 500]).sum()
                )
        accuracy = correct / len(test.labels)
        print(f"  {model_name} pytorch fp32 epoch {epoch + 1}: {accuracy:.4f} ({seconds:.1f} s)", flush=True)
        history.append({"epoch": epoch + 1, "test_accuracy": accuracy, "seconds": seconds})
    decay = f", lr x{LR_GAMMA} every {args.lr_step_epochs} epochs" if args.lr_step_epochs else ""
    return _row(model_name, f"pytorch {torch.__version__} fp32 (peer{decay})", history)


def _row(model_name: str, system: str, history: list[dict]) -> dict:
    row = {"model": model_name, "system": system}
    for r in history:
        row[f"acc@{r['epoch']}"] = round(100 * r["test_accuracy"], 2)
    row["s/epoch"] = round(float(np.median([r["seconds"] for r in history])), 1)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18")
    parser.add_argument("--recipes", default="niti")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-limit", type=int, default=0, help="first N training images (0: all 60000)")
    parser.add_argument("--backend", default="cpu", choices=("ref", "cpu", "dsp", "auto"))
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="PyTorch's intra-op threads (on a loaded 2-core machine 2 threads thrash)",
    )
    parser.add_argument("--bn-recalibration", type=int, default=30, help="train.bn_recalibration (0: off)")
    parser.add_argument("--mu", type=int, default=0, help="NITI's mu for the whole run (0: the recipe's schedule)")
    parser.add_argument(
        "--lr-step-epochs", type=int, default=0, help="halve both sides' learning rate every E epochs (0: constant)"
    )
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_name in args.models.split(","):
            for recipe in args.recipes.split(","):
                rows.append(engine(model_name, recipe, args, Path(tmp)))
            peer = torch_fp32(model_name, args.recipes.split(",")[0], args)
            rows.append(peer)
            last = f"acc@{args.epochs}"
            for row in rows:  # the last epoch's accuracy against the peer's: above it when positive
                if row["model"] == model_name:
                    row["points_vs_torch"] = round(row[last] - peer[last], 2) if row is not peer else "peer"
    report.print_table(
        rows,
        title=f"Fashion-MNIST-32 test accuracy (%) after each epoch, batch {BATCH}, "
        f"{args.train_limit or 60000} training images, load {os.getloadavg()[0]:.1f}",
    )
    report.write_results(
        "zoo_accuracy",
        rows,
        args.out,
        epochs=args.epochs,
        train_images=args.train_limit or 60000,
        backend=args.backend,
        bn_recalibration=args.bn_recalibration,
        mu=args.mu or "recipe",
        lr_step_epochs=args.lr_step_epochs,
        load=os.getloadavg(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
