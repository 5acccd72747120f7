"""LeNet-5 on Fashion-MNIST under every recipe: speed beside NITI and PyTorch, quiet and
under load, placement on the DSP; and (--accuracy) test accuracy beside FP32.

    python bench/bench_recipes.py                          # speed: all recipes, cpu, quiet + loaded, dsp
    python bench/bench_recipes.py --samples 3200 --repeats 3 --no-dsp
    python bench/bench_recipes.py --cpu-time               # CPU time at one thread, beside PyTorch at one
    python bench/bench_recipes.py --accuracy               # 10 epochs, all recipes, backend cpu
    python bench/bench_recipes.py --epochs 2 --train-limit 10000 --recipes niti octo fp32
    OPENBLAS_NUM_THREADS=1 python bench/bench_recipes.py --jobs 2   # two recipes at a time
    python bench/bench_recipes.py --merge a/recipes.json b/recipes.json   # runs split over processes

Speed (the default): each recipe trains `--samples` Fashion-MNIST images (batch 64) on
`cpu`, timed as one whole pass (not a median step times a count), after ten warm-up
steps. The passes run in `--repeats` alternating rounds (every recipe and PyTorch once
a round, the order rotated each round), so that a drift of the machine's state falls on
all of them alike: timed one recipe after another, two quiet runs of this bench gave
NITI 0.056 and 0.067 s/1000 and every ratio to it moved by up to 40 %. The table gives
the median wall seconds per 1,000 samples and the CPU seconds beside them; ratios to
NITI and to PyTorch are the median of each round's ratio, with their range over the
rounds (the noise left); then the same with a busy process pinned to the last core (a
phone with another app running) and its ratio to the quiet time; PyTorch FP32 (the peer,
same model and batches, SGD) is timed in the same rounds; under `--backend dsp` (the
emulated Hexagon) one step per recipe gives the
share of its ops placed off `ref` and the DSP packets per step. The machine's load
average is printed with the table. Results: bench/results/recipes_speed.{csv,json}.
Targets (issue #15): every INT8 recipe <= 1.5x NITI, FP32 <= 1.2x PyTorch FP32, loaded
<= 2x quiet, >= 90 % of each INT8 recipe's ops off ref on dsp.

Accuracy (--accuracy): each recipe trains its run config configs/runs/lenet-fmnist-<recipe>.yaml (WAGEUBN also
lenet-fmnist-wageubn-bn.yaml, LeNet-5 with batch norm as in its paper). Prints the final
test accuracy, its gap to FP32 in points, and seconds per epoch (training only, the
test pass excluded); writes bench/results/recipes.csv/.json. Rows are written as each
recipe finishes, so a bench cut short still leaves its numbers.

Backend `cpu` (the default) runs every op but the float loss gradient on the C++ kernels:
bit-exact with `ref` for the integer and emulated recipes, FP32's products (an AVX-512
float GEMM) within float32 rounding. `--jobs N` trains N recipes at once in forked
processes (longest first); give each one BLAS thread (OPENBLAS_NUM_THREADS=1) so they do
not fight over the cores, and read s/epoch as measured beside the other jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsptrain  # noqa: E402
import report  # noqa: E402
from dsptrain.config import CONFIG_ROOT  # noqa: E402

RUNS = ("fp32", "niti", "octo", "wageubn", "wageubn-bn", "afp", "mls", "fp8")
SPEED_RUNS = ("niti", "octo", "wageubn", "afp", "mls", "fp8", "fp32")
INT8_RUNS = ("octo", "wageubn", "afp", "mls")  # int8 elements in every product
LONGEST_FIRST = ("fp8", "mls", "wageubn-bn", "wageubn", "octo", "fp32", "afp", "niti")  # measured s/epoch


def train(run_name: str, epochs: int, backend: str, train_limit, out: Path) -> dict:
    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{run_name}.yaml")
    run = dataclasses.replace(
        run,
        train=dataclasses.replace(run.train, epochs=epochs),
        data=dataclasses.replace(run.data, train_limit=train_limit),
    )
    trainer = dsptrain.Trainer(run, backend=backend, out_dir=out / f"recipes-{run_name}", progress=False)
    trainer.checkpoint_path.unlink(missing_ok=True)
    (trainer.out_dir / "metrics.jsonl").unlink(missing_ok=True)
    history = trainer.fit(
        on_epoch=lambda r: print(
            f"  {run_name} epoch {r['epoch']}: {r['test_accuracy']:.4f} ({r['seconds']:.1f} s)", flush=True
        )
    )
    trainer.close()
    return result_row(run_name, run, trainer.backend_names, history)


def result_row(run_name: str, run, backend_names, history: list[dict]) -> dict:
    """The bench's row of a finished run from its epoch records (Trainer.fit's, or
    metrics.jsonl's `"kind": "epoch"` lines)."""
    return {
        "run": run_name,
        "recipe": run.recipe.name,
        "model": run.model.name,
        "backend": "+".join(backend_names),
        "epochs": len(history),
        "test_acc": round(100 * history[-1]["test_accuracy"], 2),
        "best_acc": round(100 * max(r["test_accuracy"] for r in history), 2),
        "s/epoch": round(float(np.mean([r["seconds"] for r in history])), 1),
    }


def _train_job(job) -> dict:
    try:
        return train(*job)
    except Exception as exc:
        # the pool pickles a worker's exception back; ours (ConfigError...) take extra
        # arguments and would not unpickle, killing the pool's result thread
        raise RuntimeError(f"{job[0]}: {type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------- speed


def _run(name: str, samples: int, backend: str):
    run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{name}.yaml")
    return dataclasses.replace(
        run,
        data=dataclasses.replace(run.data, train_limit=samples + 128, test_limit=64),
        train=dataclasses.replace(run.train, epochs=1),
        backend=backend,
    )


class RecipePass:
    """One recipe's trainer on cpu, warmed up, that trains `samples` Fashion-MNIST images
    (batch 64) per call as one whole pass (not a median step times a count)."""

    def __init__(self, name: str, samples: int, out: Path, warmup: int = 10):
        from dsptrain import data as datasets

        self.name = name
        self.trainer = dsptrain.Trainer(_run(name, samples, "cpu"), out_dir=out / f"speed-{name}", progress=False)
        batches = list(datasets.batches(self.trainer.train_data, 64, seed=0))
        self.timed = batches[: samples // 64]
        for images, labels in (batches[-2:] * warmup)[:warmup]:  # plans, scratch buffers, page faults
            self.trainer.step(images, labels)

    def __call__(self) -> None:
        for images, labels in self.timed:
            self.trainer.step(images, labels)

    @property
    def samples(self) -> int:
        return len(self.timed) * 64

    def close(self) -> None:
        self.trainer.close()


def torch_pass(samples: int, threads: int | None = None):
    """A TorchPass, or None when torch is not installed (the table then says n/a)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return TorchPass(samples, threads)


class TorchPass:
    """PyTorch FP32 LeNet-5 (bench_train's model), SGD with momentum, the same batches, at
    its own thread count (or `threads`), warmed up; one whole pass per call."""

    def __init__(self, samples: int, threads: int | None = None, warmup: int = 10):
        import torch
        from bench_train import torch_model
        from dsptrain.data import batches, load_fashion_mnist
        from torch import nn

        self.name = "PyTorch FP32 (peer)"
        self.torch, self.nn, self.threads = torch, nn, threads or os.cpu_count() or 1
        torch.set_num_threads(self.threads)
        data = [b for _, b in zip(range(samples // 64 + 2), batches(load_fashion_mnist("train"), 64, seed=0))]
        self.net = torch_model(torch, "lenet5")
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        self.timed = data[: samples // 64]
        for images, labels in (data[-2:] * warmup)[:warmup]:
            self.step(images, labels)

    def step(self, images, labels):
        torch = self.torch
        x = torch.from_numpy((images.astype(np.float32) - 128) / 128).permute(0, 3, 1, 2).contiguous()
        self.opt.zero_grad()
        self.nn.functional.cross_entropy(self.net(x), torch.from_numpy(labels.astype(np.int64))).backward()
        self.opt.step()

    def __call__(self) -> None:
        self.torch.set_num_threads(self.threads)
        for images, labels in self.timed:
            self.step(images, labels)

    @property
    def samples(self) -> int:
        return len(self.timed) * 64

    def close(self) -> None:
        pass


def timed_rounds(passes: list, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Each pass timed `repeats` times, in rounds: every round runs every pass once, the
    order rotated by one each round. A drift in the machine's state (another process,
    the clock) then falls on all of them alike, rather than on whichever recipe ran
    during it. Returns name -> [(wall, cpu) seconds per 1,000 samples] in round order."""
    out = {p.name: [] for p in passes}
    for r in range(repeats):
        for p in passes[r % len(passes) :] + passes[: r % len(passes)]:
            w0, c0 = time.perf_counter(), time.process_time()
            p()
            per = 1000 / p.samples
            out[p.name].append(((time.perf_counter() - w0) * per, (time.process_time() - c0) * per))
    return out


def cpu_time(args) -> int:
    """--cpu-time: CPU seconds per 1,000 samples of every recipe and of PyTorch, all at one
    thread, in alternating rounds. Other processes on the machine change this far less
    than wall time (they still share caches and the memory bus), so it ranks the recipes
    on a busy machine."""
    from dsptrain import _cpu_ops

    load = os.getloadavg()
    _cpu_ops.set_threads(1)
    names = [n for n in SPEED_RUNS if n in args.recipes]
    passes = [RecipePass(n, args.samples, args.out) for n in names]
    peer = torch_pass(args.samples, threads=1)
    try:
        runs = timed_rounds(passes + ([peer] if peer else []), args.repeats)
    finally:
        for p in passes:
            p.close()
    cpu = {name: [c for _, c in v] for name, v in runs.items()}
    theirs = cpu.get(peer.name) if peer else None
    rows = []
    for n in names:
        row = {"recipe": n, "cpu s/1000": statistics.median(cpu[n])}
        row.update(_ratio(cpu[n], cpu.get("niti"), "vs NITI"))
        row.update(_ratio(cpu[n], theirs, "vs torch (1 thread)"))
        row["target"] = "<= 1.5x NITI" if n in INT8_RUNS else "<= 1.2x torch" if n == "fp32" else ""
        rows.append(row)
    if theirs:
        rows.append(
            {
                "recipe": "PyTorch FP32 (peer, 1 thread)",
                "cpu s/1000": statistics.median(theirs),
                **_ratio(theirs, cpu.get("niti"), "vs NITI"),
                "vs torch (1 thread)": 1.0,
            }
        )
    after = os.getloadavg()
    report.print_table(
        rows,
        title=f"LeNet-5, Fashion-MNIST, batch 64, {args.samples} samples, {args.repeats} "
        f"alternating rounds (median; ratios: median of each round's ratio, "
        f"range over rounds), backend cpu, CPU time at one thread (native pool, BLAS, "
        f"PyTorch); load average {load[0]:.1f} before, {after[0]:.1f} after",
    )
    report.write_results(
        "recipes_cpu_time",
        rows,
        args.out,
        samples=args.samples,
        repeats=args.repeats,
        load_before=load,
        load_after=after,
        raw=cpu,
    )
    return 0


def _ratio(mine: list[float], base: list[float] | None, column: str) -> dict:
    """{column: median of the rounds' ratios mine/base, column range: min-max of them}:
    each round's ratio compares two passes run moments apart, so a slow drift of the
    machine cancels; the range shows what noise is left."""
    if not base:
        return {column: None}
    ratios = [m / b for m, b in zip(mine, base)]
    return {column: statistics.median(ratios), f"{column} range": f"{min(ratios):.2f}-{max(ratios):.2f}"}


class BusyCore:
    """A busy process pinned to the last core for the duration of a `with` block."""

    def __enter__(self):
        core = (os.cpu_count() or 1) - 1
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"]
        )
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def dsp_placement(name: str, out: Path) -> dict:
    """One step under --backend dsp: the share of ops off ref and the DSP packets per step."""
    from dsptrain import data as datasets

    trainer = dsptrain.Trainer(_run(name, 128, "dsp"), out_dir=out / f"dsp-{name}", progress=False)
    try:
        images, labels = next(iter(datasets.batches(trainer.train_data, 64, seed=0)))
        trainer.step(images, labels)
        dsp = trainer.backends["dsp"]
        before = dsp.total_costs[0]
        stats = trainer.step(images, labels)
        total = sum(stats.ops_on.values())
        return {
            "ops off ref %": round(100 * (total - stats.ops_on.get("ref", 0)) / total, 1),
            "ops dsp/cpu/ref": "/".join(str(stats.ops_on.get(b, 0)) for b in ("dsp", "cpu", "ref")),
            "dsp packets/step": dsp.total_costs[0] - before,
        }
    finally:
        trainer.close()


def speed(args) -> int:
    load = os.getloadavg()
    names = [n for n in SPEED_RUNS if n in args.recipes]
    passes = [RecipePass(n, args.samples, args.out) for n in names]
    peer = torch_pass(args.samples)
    timed = passes + ([peer] if peer else [])
    try:
        quiet = timed_rounds(timed, args.repeats)
        load_quiet = os.getloadavg()
        loaded = {}
        if not args.no_load:
            with BusyCore():
                loaded = timed_rounds(timed, args.repeats)
    finally:
        for p in passes:
            p.close()
    placed = {}
    if not args.no_dsp:
        for n in names:
            try:
                placed[n] = dsp_placement(n, args.out)
            except Exception as exc:  # no emulated DSP here: the table says why
                placed[n] = {"ops off ref %": f"n/a ({type(exc).__name__}: {exc})"[:60]}
    wall = lambda runs, n: [w for w, _ in runs[n]] if n in runs else None  # noqa: E731
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    rows = []
    for n in names + ([peer.name] if peer else []):
        row = {"recipe": n, "s/1000 quiet": med(wall(quiet, n)), "cpu s/1000": med([c for _, c in quiet[n]])}
        row.update(_ratio(wall(quiet, n), wall(quiet, "niti"), "vs NITI"))
        row.update(_ratio(wall(quiet, n), wall(quiet, peer.name) if peer else None, "vs torch"))
        if loaded:
            row["s/1000 loaded"] = med(wall(loaded, n))
            row["loaded/quiet"] = med(wall(loaded, n)) / med(wall(quiet, n))
        row.update(placed.get(n, {}))
        row["target"] = "<= 1.5x NITI" if n in INT8_RUNS else "<= 1.2x torch" if n == "fp32" else ""
        rows.append(row)
    after = os.getloadavg()
    report.print_table(
        rows,
        title=f"LeNet-5, Fashion-MNIST, batch 64, {args.samples} samples, {args.repeats} "
        f"alternating rounds (median; ratios: median of each round's ratio, range over "
        f"rounds), backend cpu; loaded = a busy process pinned to core "
        f"{(os.cpu_count() or 1) - 1}; load average {load[0]:.1f} before, "
        f"{load_quiet[0]:.1f} after the quiet rounds, {after[0]:.1f} after",
    )
    report.write_results(
        "recipes_speed",
        rows,
        args.out,
        samples=args.samples,
        repeats=args.repeats,
        load_before=load,
        load_after_quiet=load_quiet,
        load_after=after,
        raw={"quiet": quiet, "loaded": loaded},
    )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accuracy", action="store_true", help="train --epochs and report test accuracy instead")
    parser.add_argument("--samples", type=int, default=6400, help="speed: training samples per timed pass")
    parser.add_argument(
        "--repeats", type=int, default=5, help="speed: alternating rounds, one timed pass of every recipe each (median)"
    )
    parser.add_argument("--no-load", action="store_true", help="speed: skip the run beside a busy process")
    parser.add_argument("--no-dsp", action="store_true", help="speed: skip the placement run on the emulated DSP")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="speed as CPU time at one thread, beside PyTorch at one thread (for a busy machine)",
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--backend", default="cpu", choices=("ref", "cpu", "dsp", "auto"))
    parser.add_argument("--train-limit", type=int, default=None, help="first N training samples (default all 60000)")
    parser.add_argument(
        "--recipes",
        nargs="+",
        default=list(RUNS),
        choices=RUNS,
        metavar="RUN",
        help=f"runs to train (default all: {' '.join(RUNS)})",
    )
    parser.add_argument("--jobs", type=int, default=1, help="recipes trained at once (forked processes)")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="train nothing: combine the rows of these results files (same epochs, training "
        "samples and backend; a later file's row replaces an earlier one's)",
    )
    parser.add_argument("--out", type=Path, default=report.RESULTS)
    args = parser.parse_args(argv)
    if args.cpu_time:
        return cpu_time(args)
    if not args.accuracy and not args.merge:
        return speed(args)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    if args.merge:
        meta, rows = merged(args.merge)
        write_rows(rows, args.out, meta)
        return 0
    names = sorted(set(args.recipes), key=LONGEST_FIRST.index)
    jobs = [(name, args.epochs, args.backend, args.train_limit, args.out) for name in names]
    for name in names:  # import every recipe module before forking, and fail early on a bad config
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
        how = (
            f"merged from {len(meta['merged_from'])} results files"
            if "merged_from" in meta
            else f"{meta['jobs']} at once"
        )
        report.print_table(
            rows,
            title=f"LeNet-5 on Fashion-MNIST ({meta['train_limit'] or 'all'} training samples, "
            f"{meta['epochs']} epochs, batch 64, backend {meta['backend']}, {how}): "
            f"test accuracy (%)",
        )


def merged(paths: list[Path]) -> tuple[dict, list[dict]]:
    """(meta, rows) of several results files of the same bench settings."""
    by_run, meta = {}, None
    for path in paths:
        data = json.loads(path.read_text())
        settings = {key: data.get(key) for key in ("epochs", "backend", "train_limit")}
        if meta is not None and settings != {k: meta[k] for k in settings}:
            raise SystemExit(
                f"{path}: settings {settings} differ from the first file's { {k: meta[k] for k in settings} }"
            )
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
