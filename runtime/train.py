"""The Trainer: runs a RunConfig step by step, evaluates, records metrics, checkpoints.

    run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
    trainer = dsptrain.Trainer(run)
    trainer.fit()
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import checkpoint, data as datasets
from .algorithms import algorithm_module
from .backends import select as select_backends
from .cost import dsp_model_time
from .errors import DataError, LoweringError, UserError
from .execute import Executor, StepContext, StepStats
from .graph import lower
from .inputs.files import reap_stale_temps
from .images import as_images, as_labels
from .metrics import EpochTotals, epoch_energy
from .memory import (Arena, BudgetError, Schedule, StepRss, adopt_scratch, fix_malloc_threshold,
                     peak_rss_bytes as _peak_rss_bytes, rss_bytes as _rss_bytes,  # noqa: F401 (benches import them from here)
                     source_from_config)
from .numerics import QTensor
from .interchange import describe_model, frozen_layers, resolve_model, starting_state, with_head
from .models import build_model
from .plan import PlanCache, build
from .rescale import RescaleController


def lowerable_models(recipe, num_classes: int | None = 10) -> list[str]:
    """The zoo's models `recipe` can lower (for the suggestion when one cannot)."""
    from .models import MODELS

    names = []
    for name in sorted(MODELS):
        try:
            lower(build_model(name, num_classes or 10), recipe, 1)
        except LoweringError:
            continue
        names.append(name)
    return names


def _lowered_or_explained(model, run) -> None:
    """Lower `model` once so a model the recipe cannot lower fails before data loads, with
    the run file and key in the message and the models that recipe can lower."""
    try:
        lower(model, run.recipe, 1)
    except LoweringError as exc:
        where = f"{run.source}: model.name: {model.name!r}: " if run.source else f"model {model.name!r}: "
        can = lowerable_models(run.recipe, run.model.num_classes)
        hint = f"; {run.recipe.name} lowers {', '.join(can)}" if can else ""
        raise LoweringError(f"{where}{exc}{hint}") from None


class Trainer:
    """Trains one run. `backend` overrides the run's; `out_dir` where metrics and checkpoints go."""

    def __init__(self, run, backend: str | None = None, out_dir: str | Path | None = None,
                 progress: bool = True, energy_meter=None, model=None):
        from .inputs import env

        env.check_all()   # a bad DSPTRAIN_* value fails here, naming it, before a backend reads it
        self.run = run
        self.recipe = run.recipe
        self.algorithm = algorithm_module(self.recipe.module)
        # `model`: a Model built in Python (dsptrain.load_model, from_torch) instead of run.model
        self.model, self.frozen = self._resolve_model(run, model, progress)
        _lowered_or_explained(self.model, run)   # before data loads
        self.backends = select_backends(backend or run.backend)
        self.executor = Executor(self.backends, self.algorithm)
        self.plans = PlanCache(self._build_plan)
        from .config import load_device

        self.scheduler = run.scheduler
        self.device = load_device(run.scheduler.device)
        self.rescale = RescaleController(self.recipe, run.scheduler.adaptive_rescale)
        self.out_dir = Path(out_dir or run.out_dir or Path("runs") / run.name)
        self.progress = progress
        if energy_meter is None:
            from .energy import make_meter

            energy_meter, why = make_meter(run.energy)
            if progress:
                print(f"energy: {why}", file=sys.stderr)
        self.energy_meter = energy_meter
        self._metered_steps: list[int] = []   # global step of each meter window, in order
        self.seed = run.train.seed
        self.state = starting_state(self.algorithm, self.model, self.recipe, np.random.default_rng(self.seed))
        self.epoch, self.batch_in_epoch, self.global_step = 0, 0, 0
        self._epoch_sums = (0, 0.0, 0)   # samples, loss sum, correct so far in this epoch (resume)
        self._epoch_totals = EpochTotals()
        self._train = self._test = None
        # The memory-budget layer: a budget source read between steps, and the arena of
        # the plan in use (weights and optimizer state live in it as views).
        self.budget = source_from_config(run.memory, run.source or "memory")
        self.use_arena = run.memory.arena if run.memory.arena is not None else self.budget is not None
        if self.budget is not None or self.use_arena:
            # Under a budget, memory a step frees goes back to the system (memory/arena.py:
            # glibc's mmap threshold pinned), so the plan's peak bounds the process and each
            # step's RSS growth measures that step. Not otherwise: every large block a step
            # allocates is then a fresh mmap whose pages fault in again, measured at 25-40 %
            # of LeNet-5's CPU step time (FP32 9.5 vs 14.0 ms, NITI 4.9 vs 7.1 ms, one thread).
            fix_malloc_threshold()
        self._arena, self._arena_memory, self._planned_peak = None, None, 0
        self._held_scratch: dict[str, int] = {}   # backend scratch buffers the plans so far grew

    # ------------------------------------------------------------ plumbing
    @staticmethod
    def _resolve_model(run, model, progress):
        """(model, frozen layer names): the given Model, else the run's model section; notes
        on what import did (biases, a new head) and the frozen layers go to stderr."""
        notes = []
        if model is None:
            model, notes = resolve_model(run.model, run.source or "model")
        else:
            model, note = with_head(model, run.model.num_classes)
            notes += [note] if note else []
        frozen = frozen_layers(model, run.train.freeze, run.source or "train")
        if frozen:
            notes.append(f"frozen (no weight gradient, no update): {', '.join(l.name for l in model.layers if l.name in frozen)}")
        for note in notes:   # printed even when quiet: they change what trains
            print(f"{model.name}: {note}", file=sys.stderr)
        return model, frozen

    def _build_plan(self, batch: int, training: bool):
        graph = lower(self.model, self.recipe, batch, training, self.frozen)
        plan = build(graph, self.backends, self.device, self.scheduler)
        if hasattr(self.backends.get("dsp"), "hvx_threads"):   # the profile's HVX contexts
            self.backends["dsp"].hvx_threads = self.device.dsp.hvx_threads
        for name, backend in self.backends.items():
            backend.prepare(graph, [op for op in graph.ops if plan.backend_of(op) == name])
        return plan

    @property
    def train_data(self) -> datasets.Dataset:
        """The run's training split: `images, labels = trainer.train_data[:64]` is a batch
        (uint8 NHWC, int64); `trainer.train_data.batches(64)` iterates over all of them."""
        if self._train is None:
            self._train = self._checked_labels(self._load_split("train"))
        return self._train

    @property
    def test_data(self) -> datasets.Dataset:
        if self._test is None:
            self._test = self._checked_labels(self._load_split("test"))
        return self._test

    def _checked_labels(self, data):
        datasets.check_labels(data, self.model.num_classes, self.run.source or self.run.name)
        return data

    def _load_split(self, split: str):
        try:
            return datasets.load_dataset(self.run.data, split, self.model.input_shape)
        except DataError as exc:   # say which run file and key led there
            if not self.run.source:
                raise
            key = "data.path" if self.run.data.path else "data.dataset"
            raise DataError(f"{self.run.source}: {key}: {exc}") from None

    @property
    def backend_names(self) -> list[str]:
        return list(self.backends)

    def close(self):
        self.executor.close()
        for backend in self.backends.values():
            backend.close()
        self.energy_meter.close()

    # ------------------------------------------------------------ memory plans
    def memory_option(self, plan):
        """(the memory.fit.Option for this step, the budget it was chosen under); (None, None)
        without the arena. The budget is read here, between steps; a changed budget picks
        another option from the plan's fitter (cached), so nothing is planned twice."""
        if not self.use_arena:
            return None, None
        limit = self.budget.at(self.global_step, self._planned_peak) if self.budget is not None else None
        memory = self.run.memory
        return plan.fitter(memory.micro_batch, memory.recompute).choose(limit), limit

    def _arena_for(self, option) -> Arena:
        """The arena of `option`'s memory plan. On a change the weights and state are copied
        out of the old arena first, so the old buffer is freed before the new one fills."""
        if option.memory is not self._arena_memory:
            if self._arena is not None:
                self.state = {k: QTensor(v.q.copy(), v.e) if isinstance(v, QTensor) else np.array(v)
                              for k, v in self.state.items()}
            self._arena = None
            self._arena = Arena(option.memory.arena_bytes)
            self._arena_memory = option.memory
        return self._arena

    def check_budget(self, batch: int) -> None:
        """Fail before training when a fixed or scheduled budget fits no plan at `batch`."""
        if not self.use_arena or self.budget is None:
            return
        points = [v for _, v in self.budget.points] if isinstance(self.budget, Schedule) else [self.budget.at(0)]
        plan = self.plans.get(batch, True)
        memory = self.run.memory
        for limit in points:
            try:
                plan.fitter(memory.micro_batch, memory.recompute).choose(limit)
            except BudgetError as exc:
                if not self.run.source:
                    raise
                raise BudgetError(f"{self.run.source}: memory.budget: {exc}") from None

    # ------------------------------------------------------------ one step
    def step(self, images: np.ndarray, labels: np.ndarray) -> StepStats:
        """One training step on a batch; updates the weights. `images`: uint8 NHWC (the
        model's input shape), or floats in [0, 1], converted (images.py has the contract);
        `labels`: integers 0..classes-1."""
        images = as_images(images, self.model.input_shape)
        labels = as_labels(labels, len(images), self.model.num_classes)
        batch = len(labels)
        plan = self.plans.get(batch, True)
        given = self.rescale.shifts_for(self.global_step, plan.graph)
        ctx = StepContext(self.recipe, plan.graph, self.seed, self.global_step, self.epoch, batch, shifts=given)
        stats = StepStats(self.global_step, self.epoch, batch)
        stats.given_shifts = len(given or ())
        option, stats.budget_bytes = self.memory_option(plan)
        if option is not None:
            stats.micro_batch, stats.memory_plan = option.micro_batch, option.label
            stats.planned_peak_bytes, stats.arena_bytes = option.peak, option.memory.arena_bytes
            self._planned_peak = option.peak
            # a plan that keeps a buffer smaller than an earlier one grew: free it first
            self._held_scratch = adopt_scratch(self._held_scratch, option, self.backends.values())
        arena = self._arena_for(option) if option is not None else None
        env = dict(self.state)
        env["input"] = self.algorithm.prepare_input(images)
        env["labels"] = np.asarray(labels, np.int64)
        dsp_log = getattr(self.backends.get("dsp"), "take_cost_log", None)
        if dsp_log is not None:
            dsp_log()   # what ran before this step (an evaluation) is not its cost
        rss = StepRss()
        rss.begin()
        self.energy_meter.start()
        started = time.perf_counter()
        self.executor.run(plan, env, ctx, stats=stats, memory=option, arena=arena)
        stats.time_s = time.perf_counter() - started
        if dsp_log is not None:
            stats.dsp_model_s = dsp_model_time(self.device, *dsp_log()).seconds
        stats.rss_growth_bytes, stats.step_peak_rss_bytes, stats.peak_rss_bytes = rss.end()
        self.rescale.observe(self.global_step, plan.graph, stats.shifts, given)
        reading = self.energy_meter.stop(stats)
        self._metered_steps.append(self.global_step)
        stats.energy_j, stats.energy_meter = reading.joules, reading.meter
        self.state = {name: env[name] for name in self.state}
        logits = self.algorithm.logits_to_float(env[plan.graph.logits])
        stats.loss = cross_entropy(logits, labels)
        stats.correct = int((logits.argmax(axis=1) == labels).sum())
        stats.rss_bytes = _rss_bytes()
        self.global_step += 1
        return stats

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Float class scores (N, classes) of `images` (the same contract as step())."""
        images = as_images(images, self.model.input_shape)
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
        if self.budget is not None:
            # the evaluation batch grew the kernels' scratch outside the memory plan: give
            # it back, so training resumes within its budget
            for backend in self.backends.values():
                backend.release_scratch()
            self._held_scratch = {}
        return correct / len(dataset)

    # ------------------------------------------------------------ the loop
    def fit(self, epochs: int | None = None, on_epoch=None) -> list[dict]:
        """Train to `epochs` (default: the run's), evaluating and checkpointing each epoch."""
        from tqdm import tqdm

        epochs = epochs or self.run.train.epochs
        bs = self.run.train.batch_size
        history = []
        _make_out_dir(self.out_dir)
        reap_stale_temps(self.out_dir, ("checkpoint.npz", "metrics.jsonl"))
        if hasattr(self.energy_meter, "measure_baseline") and not getattr(self.energy_meter, "baseline_w", 0):
            self.energy_meter.measure_baseline(3.0)   # battery: idle power, subtracted from every batch
        self.check_budget(bs)
        self.check_data()
        _check_metrics_file(self.out_dir / "metrics.jsonl")
        fresh = self.epoch == self.batch_in_epoch == self.global_step == 0
        # a run from step 0 owns its metrics: lines of an earlier run killed before its first checkpoint go
        metrics = open(self.out_dir / "metrics.jsonl", "w" if fresh else "a")
        try:
            while self.epoch < epochs:
                started = time.perf_counter()
                resumed = self.batch_in_epoch > 0   # mid-epoch: the epoch's sums so far come from the checkpoint
                seen, loss_sum, correct = self._epoch_sums if resumed else (0, 0.0, 0)
                totals = self._epoch_totals if resumed else EpochTotals()
                self._epoch_totals = totals
                total = datasets.batch_count(self.train_data, bs)
                bar = tqdm(total=total, initial=self.batch_in_epoch, desc=f"epoch {self.epoch + 1}/{epochs}",
                           disable=not self.progress, unit="batch", leave=True, dynamic_ncols=True)
                for images, labels in datasets.batches(self.train_data, bs, self.seed, self.epoch, self.batch_in_epoch):
                    stats = self.step(images, labels)
                    self.batch_in_epoch += 1
                    seen, loss_sum, correct = seen + stats.batch, loss_sum + stats.loss * stats.batch, correct + stats.correct
                    self._epoch_sums = (seen, loss_sum, correct)
                    metrics.write(json.dumps(_step_record(stats)) + "\n")
                    totals.add(stats)
                    postfix = {"loss": f"{loss_sum / seen:.3f}", "acc": f"{correct / seen:.3f}",
                               "samples/s": f"{totals.smoothed_rate:.0f}"}
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
                          "test_accuracy": test_accuracy, "seconds": seconds, "backends": self.backend_names,
                          **totals.record(seen, seconds)}
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
                history.append(record)
                if self.progress:
                    print(f"epoch {self.epoch + 1}: test accuracy {test_accuracy:.4f} "
                          f"({seconds:.1f} s, {seen / max(seconds, 1e-9):.0f} samples/s)", file=sys.stderr)
                self.epoch, self.batch_in_epoch, self._epoch_sums = self.epoch + 1, 0, (0, 0.0, 0)
                self.save()
                if on_epoch is not None:
                    on_epoch(record)
        finally:
            metrics.close()
            if hasattr(self.energy_meter, "readings"):
                self.realign_energy()
        return history

    def realign_energy(self) -> int:
        """A power monitor's trace is often complete only after the run: align every
        metered step of this process with the trace as it is now and rewrite their energy
        in metrics.jsonl. Returns how many steps got a figure; warns when the trace is unreadable."""
        from .energy import MeterError

        try:
            readings = self.energy_meter.readings()
        except MeterError as exc:
            warnings.warn(f"energy trace not aligned: {exc}", RuntimeWarning, stacklevel=2)
            return 0
        by_step = {step: r for step, r in zip(self._metered_steps, readings)}
        path = self.out_dir / "metrics.jsonl"
        if not by_step or not path.exists():
            return 0
        lines = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            reading = by_step.get(record.get("step")) if record.get("kind") == "step" else None
            if reading is not None:
                record["energy_j"] = reading.joules if reading.ok else None
                record["energy_meter"] = reading.meter
            lines.append(record)
        lines = [json.dumps(record) for record in epoch_energy(lines)]   # the epochs' totals follow
        checkpoint.atomic_write(path, lambda f: f.write("".join(l + "\n" for l in lines).encode()))
        return sum(r.ok for r in by_step.values())

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
            "rescale": self.rescale.state(), "epoch_sums": list(self._epoch_sums),
            "epoch_energy": [self._epoch_totals.energy_j, self._epoch_totals.energy_steps,
                             sorted(self._epoch_totals.meters)],
            "model_spec": describe_model(self.model),   # export rebuilds the model from this
        })
        return path

    def check_data(self) -> None:
        """Load and check both splits now: a corrupt test file fails before the first
        step, not after an epoch; labels must fit the model's classes."""
        _ = self.train_data, self.test_data   # loading a split checks its labels

    def load(self, path: str | Path | None = None) -> None:
        """Continue from a checkpoint: every array and field checked against this run
        (resume.py) before anything is replaced; metrics after it are dropped."""
        from .resume import check_meta, repair_metrics

        path = Path(path or self.checkpoint_path)
        state, meta = checkpoint.load(path, expect=self.state,
                                      identity={"model": self.model.name, "recipe": self.recipe.name})
        meta = check_meta(path, meta, self)
        self.state = {name: state[name] for name in self.state}
        self.epoch, self.batch_in_epoch = meta["epoch"], meta["batch_in_epoch"]
        self.global_step, self.seed = meta["global_step"], meta["seed"]
        self.rescale.restore(meta.get("rescale") or {})
        self._epoch_sums = repair_metrics(self.out_dir / "metrics.jsonl", self.global_step, self.epoch,
                                          meta.get("epoch_sums"))
        self._epoch_totals = EpochTotals()
        energy = meta.get("epoch_energy")
        if energy:   # the energy the epoch's steps so far added up to (the epoch record's total)
            self._epoch_totals.energy_j, self._epoch_totals.energy_steps = float(energy[0]), energy[1]
            self._epoch_totals.meters = set(energy[2])


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy of float logits (for printing; never fed back)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_sum - shifted[np.arange(len(labels)), labels]))


def _step_record(stats: StepStats) -> dict:
    return {"kind": "step", "epoch": stats.epoch + 1, "step": stats.step, "batch": stats.batch,
            "loss": stats.loss, "accuracy": stats.accuracy, "time_s": stats.time_s,
            "dsp_model_s": stats.dsp_model_s,
            "energy_j": stats.energy_j, "energy_meter": stats.energy_meter,
            "peak_rss_bytes": stats.peak_rss_bytes, "rss_bytes": stats.rss_bytes,
            "rss_growth_bytes": stats.rss_growth_bytes, "step_peak_rss_bytes": stats.step_peak_rss_bytes,
            "budget_bytes": stats.budget_bytes, "planned_peak_bytes": stats.planned_peak_bytes,
            "arena_high_water_bytes": stats.arena_high_water_bytes, "micro_batch": stats.micro_batch,
            "recomputed_ops": stats.recomputed_ops, "memory_plan": stats.memory_plan, "ops_on": stats.ops_on,
            "given_shifts": stats.given_shifts, "estimated_shifts": len(stats.shifts) - stats.given_shifts,
            "pipeline": stats.pipeline, "split_ops": stats.split_ops,
            "fallbacks": stats.fallbacks or None}


def _make_out_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"output directory {path}: a file is in the way") from None
    except OSError as exc:
        raise UserError(f"output directory {path}: cannot create it ({exc.strerror})") from None


def _check_metrics_file(path: Path) -> None:
    """metrics.jsonl must be a regular file if it is there (opening a FIFO to append blocks)."""
    from .inputs.files import check_regular

    if os.path.lexists(path):
        problem = check_regular(path, "metrics")
        if problem:
            raise UserError(f"{path}: {problem}")
