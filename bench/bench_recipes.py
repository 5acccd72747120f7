"""LeNet-5 on Fashion-MNIST under every recipe: test accuracy beside FP32, seconds per epoch.

    python bench/bench_recipes.py                          # 10 epochs, all recipes, backend cpu
    python bench/bench_recipes.py --epochs 2 --train-limit 10000 --recipes niti octo fp32
    OPENBLAS_NUM_THREADS=1 python bench/bench_recipes.py --jobs 2   # two recipes at a time
    python bench/bench_recipes.py --merge a/recipes.json b/recipes.json   # runs split over processes

Each recipe trains its run config configs/runs/lenet-fmnist-<recipe>.yaml (WAGEUBN also
lenet-fmnist-wageubn-bn.yaml, LeNet-5 with batch norm as in its paper). Prints the final
test accuracy, its gap to FP32 in points, and seconds per epoch (training only, the
test pass excluded); writes bench/results/recipes.csv/.json. Rows are written as each
recipe finishes, so a bench cut short still leaves its numbers.

Backend `cpu` (the default) runs the int8 products on the C++ kernels, bit-exact with
`ref`; float ops fall back to NumPy. `--jobs N` trains N recipes at once in forked
processes (longest first); give each one BLAS thread (OPENBLAS_NUM_THREADS=1) so they do
not fight over the cores, and read s/epoch as measured beside the other jobs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402

import dsptrain  # noqa: E402
from dsptrain.config import CONFIG_ROOT  # noqa: E402

RUNS = ("fp32", "niti", "octo", "wageubn", "wageubn-bn", "afp", "mls", "fp8")
LONGEST_FIRST = ("fp8", "mls", "wageubn-bn", "wageubn", "octo", "fp32", "afp", "niti")   # measured s/epoch


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
    return result_row(run_name, run, trainer.backend_names, history)


def result_row(run_name: str, run, backend_names, history: list[dict]) -> dict:
    """The bench's row of a finished run from its epoch records (Trainer.fit's, or
    metrics.jsonl's `"kind": "epoch"` lines)."""
    return {"run": run_name, "recipe": run.recipe.name, "model": run.model.name,
            "backend": "+".join(backend_names), "epochs": len(history),
            "test_acc": round(100 * history[-1]["test_accuracy"], 2),
            "best_acc": round(100 * max(r["test_accuracy"] for r in history), 2),
            "s/epoch": round(float(np.mean([r["seconds"] for r in history])), 1)}


def _train_job(job) -> dict:
    try:
        return train(*job)
    except Exception as exc:
        # the pool pickles a worker's exception back; ours (ConfigError...) take extra
        # arguments and would not unpickle, killing the pool's result thread
        raise RuntimeError(f"{job[0]}: {type(exc).__name__}: {exc}") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", default="cpu", choices=("ref", "cpu", "dsp", "auto"))
    parser.add_argument("--train-limit", type=int, default=None, help="first N training samples (default all 60000)")
    parser.add_argument("--recipes", nargs="+", default=list(RUNS), choices=RUNS, metavar="RUN",
                        help=f"runs to train (default all: {' '.join(RUNS)})")
    parser.add_argument("--jobs", type=int, default=1, help="recipes trained at once (forked processes)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="train nothing: combine the rows of these results files (same epochs, training "
                             "samples and backend; a later file's row replaces an earlier one's)")
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    if args.merge:
        meta, rows = merged(args.merge)
        write_rows(rows, args.out, meta)
        return 0
    names = sorted(set(args.recipes), key=LONGEST_FIRST.index)
    jobs = [(name, args.epochs, args.backend, args.train_limit, args.out) for name in names]
    for name in names:     # import every recipe module before forking, and fail early on a bad config
        dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{name}.yaml")
    meta = dict(epochs=args.epochs, backend=args.backend, train_limit=args.train_limit, jobs=args.jobs)
    rows = []
    with multiprocessing.get_context("fork").Pool(min(args.jobs, len(jobs))) if args.jobs > 1 else _Serial() as pool:
        for row in pool.imap_unordered(_train_job, jobs):
            rows.append(row)
            write_rows(rows, args.out, meta, table=len(rows) == len(jobs))
    return 0


def write_rows(rows: list[dict], out: Path, meta: dict, table: bool = True) -> None:
    """Sort the rows, set each one's gap to FP32, write the results files (and print the table)."""
    rows.sort(key=lambda r: RUNS.index(r["run"]))
    fp32 = next((r["test_acc"] for r in rows if r["run"] == "fp32"), None)
    for r in rows:
        r["vs_fp32"] = None if fp32 is None else round(r["test_acc"] - fp32, 2)
    report.write_results("recipes", rows, out, **meta)
    if table:
        how = (f"merged from {len(meta['merged_from'])} results files" if "merged_from" in meta
               else f"{meta['jobs']} at once")
        report.print_table(rows, title=f"LeNet-5 on Fashion-MNIST ({meta['train_limit'] or 'all'} training samples, "
                                       f"{meta['epochs']} epochs, batch 64, backend {meta['backend']}, {how}): "
                                       f"test accuracy (%)")


def merged(paths: list[Path]) -> tuple[dict, list[dict]]:
    """(meta, rows) of several results files of the same bench settings."""
    by_run, meta = {}, None
    for path in paths:
        data = json.loads(path.read_text())
        settings = {key: data.get(key) for key in ("epochs", "backend", "train_limit")}
        if meta is not None and settings != {k: meta[k] for k in settings}:
            raise SystemExit(f"{path}: settings {settings} differ from the first file's "
                             f"{ {k: meta[k] for k in settings} }")
        meta = meta or settings
        by_run.update({row["run"]: row for row in data["rows"]})
    meta["merged_from"] = [str(p) for p in paths]
    return meta, list(by_run.values())


class _Serial:
    """The Pool interface, one job after another in this process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def imap_unordered(self, fn, items):
        return map(fn, items)


if __name__ == "__main__":
    sys.exit(main())
