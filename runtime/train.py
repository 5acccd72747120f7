"""The Trainer: runs a RunConfig step by step, evaluates, records metrics, checkpoints.

    run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
    trainer = dsptrain.Trainer(run)
    trainer.fit()
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from . import checkpoint, data as datasets
from .algorithms import algorithm_module
from .backends import PRIORITY, availability, backend_class
from .errors import UserError
from .executor import Executor, StepContext, StepStats
from .graph import lower
from .models import build_model
from .plan import PlanCache, place


def select_backends(choice: str) -> dict:
    """Backend instances for `--backend choice`, in priority order, the fallbacks included.

    `dsp` and `cpu` must be usable (else a UserError saying why); `auto` takes every
    usable backend. `ref` is always last: it runs everything.
    """
    wanted = PRIORITY[PRIORITY.index(choice):] if choice != "auto" else PRIORITY
    found = availability()
    chosen = {}
    for name in wanted:
        ok, why = found[name]
        if ok:
            chosen[name] = backend_class(name)()
        elif name == choice:
            raise UserError(f"backend {name!r} is not available: {why}")
    return chosen


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class Trainer:
    """Trains one run. `backend` overrides the run's; `out_dir` where metrics and checkpoints go."""

    def __init__(self, run, backend: str | None = None, out_dir: str | Path | None = None,
                 progress: bool = True, energy_meter=None):
        self.run = run
        self.recipe = run.recipe
        self.algorithm = algorithm_module(self.recipe.module)
        self.model = build_model(run.model.name, run.model.num_classes)
        lower(self.model, self.recipe, 1)  # a model the recipe cannot lower fails here, before data loads
        self.backends = select_backends(backend or run.backend)
        self.executor = Executor(self.backends, self.algorithm)
        self.plans = PlanCache(self._build_plan)
        self.out_dir = Path(out_dir or run.out_dir or Path("runs") / run.name)
        self.progress = progress
        if energy_meter is None:
            from .energy import make_meter

            energy_meter, why = make_meter(run.energy)
            if progress:
                print(f"energy: {why}", file=sys.stderr)
        self.energy_meter = energy_meter
        self.seed = run.train.seed
        self.state = self.algorithm.init_params(self.model, self.recipe, np.random.default_rng(self.seed))
        self.epoch, self.batch_in_epoch, self.global_step = 0, 0, 0
        self._train = self._test = None

    # ------------------------------------------------------------ plumbing
    def _build_plan(self, batch: int, training: bool):
        graph = lower(self.model, self.recipe, batch, training)
        plan = place(graph, self.backends)
        for name, backend in self.backends.items():
            backend.prepare(graph, [op for op in graph.ops if plan.backend_of(op) == name])
        return plan

    @property
    def train_data(self):
        if self._train is None:
            self._train = datasets.load_dataset(self.run.data, "train", self.model.input_shape)
        return self._train

    @property
    def test_data(self):
        if self._test is None:
            self._test = datasets.load_dataset(self.run.data, "test", self.model.input_shape)
        return self._test

    @property
    def backend_names(self) -> list[str]:
        return list(self.backends)

    def close(self):
        for backend in self.backends.values():
            backend.close()
        self.energy_meter.close()

    # ------------------------------------------------------------ one step
    def step(self, images: np.ndarray, labels: np.ndarray) -> StepStats:
        """One training step on a batch of uint8 images and int labels; updates the weights."""
        batch = len(labels)
        plan = self.plans.get(batch, True)
        ctx = StepContext(self.recipe, plan.graph, self.seed, self.global_step, self.epoch, batch)
        stats = StepStats(self.global_step, self.epoch, batch)
        env = dict(self.state)
        env["input"] = self.algorithm.prepare_input(images)
        env["labels"] = np.asarray(labels, np.int64)
        self.energy_meter.start()
        started = time.perf_counter()
        self.executor.run(plan, env, ctx, stats=stats)
        stats.time_s = time.perf_counter() - started
        reading = self.energy_meter.stop(stats)
        stats.energy_j, stats.energy_meter = reading.joules, reading.meter
        self.state = {name: env[name] for name in self.state}
        logits = self.algorithm.logits_to_float(env[plan.graph.logits])
        stats.loss = cross_entropy(logits, labels)
        stats.correct = int((logits.argmax(axis=1) == labels).sum())
        stats.peak_rss_bytes = _peak_rss_bytes()
        self.global_step += 1
        return stats

    def predict(self, images: np.ndarray) -> np.ndarray:
        plan = self.plans.get(len(images), False)
        ctx = StepContext(self.recipe, plan.graph, self.seed, self.global_step, self.epoch, len(images))
        env = dict(self.state)
        env["input"] = self.algorithm.prepare_input(images)
        self.executor.run(plan, env, ctx, ops=plan.graph.eval_ops)
        return self.algorithm.logits_to_float(env[plan.graph.logits])

    def evaluate(self, dataset=None) -> float:
        """Accuracy on `dataset` (default: the run's test split)."""
        dataset = dataset or self.test_data
        correct = 0
        for images, labels in datasets.batches(dataset, self.run.train.eval_batch_size, seed=None):
            correct += int((self.predict(images).argmax(axis=1) == labels).sum())
        return correct / len(dataset)

    # ------------------------------------------------------------ the loop
    def fit(self, epochs: int | None = None, on_epoch=None) -> list[dict]:
        """Train to `epochs` (default: the run's), evaluating and checkpointing each epoch."""
        from tqdm import tqdm

        epochs = epochs or self.run.train.epochs
        bs = self.run.train.batch_size
        history = []
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if hasattr(self.energy_meter, "measure_baseline") and not getattr(self.energy_meter, "baseline_w", 0):
            self.energy_meter.measure_baseline(3.0)   # battery: idle power, subtracted from every batch
        metrics = open(self.out_dir / "metrics.jsonl", "a")
        try:
            while self.epoch < epochs:
                started, seen, loss_sum, correct = time.perf_counter(), 0, 0.0, 0
                total = datasets.batch_count(self.train_data, bs)
                bar = tqdm(total=total, initial=self.batch_in_epoch, desc=f"epoch {self.epoch + 1}/{epochs}",
                           disable=not self.progress, unit="batch", leave=True, dynamic_ncols=True)
                for images, labels in datasets.batches(self.train_data, bs, self.seed, self.epoch, self.batch_in_epoch):
                    stats = self.step(images, labels)
                    self.batch_in_epoch += 1
                    seen, loss_sum, correct = seen + stats.batch, loss_sum + stats.loss * stats.batch, correct + stats.correct
                    metrics.write(json.dumps(_step_record(stats)) + "\n")
                    postfix = {"loss": f"{loss_sum / seen:.3f}", "acc": f"{correct / seen:.3f}",
                               "samples/s": f"{stats.batch / stats.time_s:.0f}"}
                    if stats.energy_j is not None:
                        postfix["J/batch"] = f"{stats.energy_j:.3g}"
                    bar.set_postfix(postfix, refresh=False)
                    bar.update()
                    every = self.run.train.checkpoint_every_steps
                    if every and self.global_step % every == 0:
                        metrics.flush()
                        self.save()
                bar.close()
                seconds = time.perf_counter() - started
                test_accuracy = self.evaluate()
                record = {"kind": "epoch", "epoch": self.epoch + 1, "step": self.global_step,
                          "train_loss": loss_sum / max(seen, 1), "train_accuracy": correct / max(seen, 1),
                          "test_accuracy": test_accuracy, "seconds": seconds, "backends": self.backend_names}
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
                history.append(record)
                if self.progress:
                    print(f"epoch {self.epoch + 1}: test accuracy {test_accuracy:.4f} "
                          f"({seconds:.1f} s, {seen / max(seconds, 1e-9):.0f} samples/s)", file=sys.stderr)
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
                self.save()
                if on_epoch is not None:
                    on_epoch(record)
        finally:
            metrics.close()
        return history

    # ------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / "checkpoint.npz"

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path or self.checkpoint_path)
        checkpoint.save(path, self.state, {
            "run": self.run.name, "recipe": self.recipe.name, "model": self.model.name,
            "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "global_step": self.global_step, "seed": self.seed,
        })
        return path

    def load(self, path: str | Path | None = None) -> None:
        path = Path(path or self.checkpoint_path)
        state, meta = checkpoint.load(path)
        if meta["recipe"] != self.recipe.name or meta["model"] != self.model.name:
            raise UserError(f"{path}: checkpoint is {meta['model']} with {meta['recipe']}, "
                            f"this run is {self.model.name} with {self.recipe.name}")
        missing = set(self.state) - set(state)
        if missing:
            raise UserError(f"{path}: checkpoint lacks {', '.join(sorted(missing))}")
        self.state = {name: state[name] for name in self.state}
        self.epoch, self.batch_in_epoch = meta["epoch"], meta["batch_in_epoch"]
        self.global_step, self.seed = meta["global_step"], meta["seed"]
        _truncate_metrics(self.out_dir / "metrics.jsonl", self.global_step)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy of float logits (for printing; never fed back)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_sum - shifted[np.arange(len(labels)), labels]))


def _step_record(stats: StepStats) -> dict:
    return {"kind": "step", "epoch": stats.epoch + 1, "step": stats.step, "batch": stats.batch,
            "loss": stats.loss, "accuracy": stats.accuracy, "time_s": stats.time_s,
            "energy_j": stats.energy_j, "energy_meter": stats.energy_meter,
            "peak_rss_bytes": stats.peak_rss_bytes, "ops_on": stats.ops_on,
            "fallbacks": stats.fallbacks or None}


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records a killed run wrote after the checkpoint it is resumed from."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) < step + (json.loads(line)["kind"] == "epoch")]
    checkpoint.atomic_write(path, lambda f: f.write("".join(k + "\n" for k in kept).encode()))
