"""LeNet-5 on Fashion-MNIST: NITI vs FP32 in this engine, and PyTorch FP32 as the peer.

    python bench/bench_accuracy.py                 # 10 epochs each, backend ref
    python bench/bench_accuracy.py --epochs 5 --backend cpu

Prints test accuracy after epochs 1, 5 and 10 and seconds per epoch, and writes
bench/results/accuracy.csv/.json. PyTorch is optional (pip install torch==2.13.0):
the same LeNet-5, data scaling, batch size, SGD settings and epochs as the engine's FP32.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsptrain  # noqa: E402
import report  # noqa: E402
from dsptrain import data as datasets  # noqa: E402
from dsptrain.config import CONFIG_ROOT  # noqa: E402

CHECKPOINTS = (1, 5, 10)


def engine(recipe: str, epochs: int, backend: str, out: Path) -> dict:
    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{recipe}.yaml")
    run = dataclasses.replace(run, train=dataclasses.replace(run.train, epochs=epochs))
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=out / f"accuracy-{recipe}", progress=False)
    if trainer.checkpoint_path.exists():
        trainer.checkpoint_path.unlink()
    (trainer.out_dir / "metrics.jsonl").unlink(missing_ok=True)
    history = trainer.fit(
        on_epoch=lambda r: print(
            f"  {recipe} epoch {r['epoch']}: {r['test_accuracy']:.4f} ({r['seconds']:.1f} s)", flush=True
        )
    )
    trainer.close()
    return _row(f"dsptrain {recipe} ({'+'.join(trainer.backend_names)})", history)


def torch_fp32(epochs: int, recipe) -> dict | None:
    try:
        import torch
        from torch import nn
    except ImportError:
        return None
    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = nn.Sequential(
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
    o = recipe.optimizer
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    train, test = datasets.load_fashion_mnist("train"), datasets.load_fashion_mnist("test")
    scale = lambda images: torch.from_numpy((images.astype(np.float32) - 128) / 128).permute(0, 3, 1, 2)
    test_x, test_y = scale(test.images), torch.from_numpy(test.labels)
    history = []
    for epoch in range(epochs):
        for group in opt.param_groups:
            group["lr"] = o.lr * recipe.schedule.at("lr_factor", epoch, 1.0)
        started = time.perf_counter()
        model.train()
        for images, labels in datasets.batches(train, 64, seed=0, epoch=epoch):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(scale(images)), torch.from_numpy(labels))
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - started
        model.eval()
        with torch.no_grad():
            accuracy = float((model(test_x).argmax(1) == test_y).float().mean())
        print(f"  pytorch fp32 epoch {epoch + 1}: {accuracy:.4f} ({seconds:.1f} s)", flush=True)
        history.append({"epoch": epoch + 1, "test_accuracy": accuracy, "seconds": seconds})
    return _row(f"pytorch {torch.__version__} fp32 (peer)", history)


def _row(name: str, history: list[dict]) -> dict:
    row = {"run": name}
    for r in history:
        if r["epoch"] in CHECKPOINTS:
            row[f"acc@{r['epoch']}"] = round(100 * r["test_accuracy"], 2)
    row["s/epoch"] = round(float(np.mean([r["seconds"] for r in history])), 1)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", default="ref", choices=("ref", "cpu", "dsp", "auto"))
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    rows = [engine("niti", args.epochs, args.backend, args.out), engine("fp32", args.epochs, args.backend, args.out)]
    peer = None if args.no_torch else torch_fp32(args.epochs, dsptrain.load_recipe("fp32"))
    if peer:
        rows.append(peer)
    report.print_table(
        rows,
        title=f"LeNet-5 on Fashion-MNIST, test accuracy (%) and seconds per epoch, batch 64, backend {args.backend}",
    )
    report.write_results("accuracy", rows, args.out, epochs=args.epochs, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
