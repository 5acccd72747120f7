"""LeNet-5 on Fashion-MNIST under every recipe: test accuracy beside FP32, seconds per epoch.

    python bench/bench_recipes.py                          # 10 epochs, all recipes, backend ref
    python bench/bench_recipes.py --epochs 2 --train-limit 10000 --recipes niti octo fp32

Each recipe trains its run config configs/runs/lenet-fmnist-<recipe>.yaml (WAGEUBN also
lenet-fmnist-wageubn-bn.yaml, LeNet-5 with batch norm as in its paper). Prints the final
test accuracy, its gap to FP32 in points, and seconds per epoch; writes
bench/results/recipes.csv/.json. Rows are written as each recipe finishes, so a bench
cut short still leaves its numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402

import dsptrain  # noqa: E402
from dsptrain.config import CONFIG_ROOT  # noqa: E402

RUNS = ("fp32", "niti", "octo", "wageubn", "wageubn-bn", "afp", "mls", "fp8")


def train(run_name: str, epochs: int, backend: str, train_limit, out: Path) -> dict:
    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{run_name}.yaml")
    run = dataclasses.replace(run, train=dataclasses.replace(run.train, epochs=epochs),
                              data=dataclasses.replace(run.data, train_limit=train_limit))
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=out / f"recipes-{run_name}", progress=False)
    trainer.checkpoint_path.unlink(missing_ok=True)
    (trainer.out_dir / "metrics.jsonl").unlink(missing_ok=True)
    history = trainer.fit(on_epoch=lambda r: print(f"  {run_name} epoch {r['epoch']}: {r['test_accuracy']:.4f} "
                                                   f"({r['seconds']:.1f} s)", flush=True))
    trainer.close()
    return {"run": run_name, "recipe": run.recipe.name, "model": run.model.name,
            "backend": "+".join(trainer.backend_names), "epochs": epochs,
            "test_acc": round(100 * history[-1]["test_accuracy"], 2),
            "best_acc": round(100 * max(r["test_accuracy"] for r in history), 2),
            "s/epoch": round(float(np.mean([r["seconds"] for r in history])), 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", default="ref", choices=("ref", "cpu", "dsp", "auto"))
    parser.add_argument("--train-limit", type=int, default=None, help="first N training samples (default all 60000)")
    parser.add_argument("--recipes", nargs="+", default=list(RUNS), choices=RUNS, metavar="RUN",
                        help=f"runs to train (default all: {' '.join(RUNS)})")
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    names = ["fp32", *[n for n in args.recipes if n != "fp32"]] if "fp32" in args.recipes else args.recipes
    rows = []
    for name in names:
        rows.append(train(name, args.epochs, args.backend, args.train_limit, args.out))
        fp32 = next((r["test_acc"] for r in rows if r["run"] == "fp32"), None)
        for row in rows:
            row["vs_fp32"] = None if fp32 is None else round(row["test_acc"] - fp32, 2)
        report.write_results("recipes", rows, args.out, epochs=args.epochs, backend=args.backend,
                             train_limit=args.train_limit)
    report.print_table(rows, title=f"LeNet-5 on Fashion-MNIST ({args.train_limit or 'all'} training samples, "
                                   f"{args.epochs} epochs, batch 64, backend {args.backend}): test accuracy (%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
