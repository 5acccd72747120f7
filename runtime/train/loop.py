"""The Trainer: the loop around the step. It runs a RunConfig's epochs batch by batch,
evaluates, records metrics and checkpoints; its parts come from train/assembly.py.

    run = dsptrain.load_run("configs/runs/lenet-fmnist-niti.yaml")
    trainer = dsptrain.Trainer(run)
    trainer.fit()

Each batch runs on the execute.Step the Trainer holds (`self.steps`: the Planner with the
backends, the plans, the memory budget and its arena), called directly: `self.steps.train(...)`
for a batch, `self.steps.predict(...)` for scores. The Trainer makes its Step from the
run (train/step.py) unless it is handed one (the command line makes it from --backend).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from .. import data as datasets
from ..data import Loader, as_images, as_labels
from ..errors import UserError
from ..inputs import check_environment, check_regular, reap_stale_temps
from ..inputs.run_lock import RunLock
from ..metrics import EpochTotals, realign_energy, step_record
from ..profile.logs import RunLog, rebuild_csv
from . import checkpoints
from .assembly import assemble, initial_state, load_data
from .assembly import energy_meter as make_energy_meter
from .divergence import Watch
from .recalibrate import recalibrate, recalibrates
from .schedule import lr_factor
from .step import RescaleController, own_step
from .validation import Monitor, Tally, accuracy_line, check_monitor


class Trainer:
    """Trains one run. `backend` overrides the run's; `out_dir` where metrics and checkpoints go.
    `parts` (train/assembly.assemble of `run`): what the caller assembled already.
    `planner` (a plan.Planner): the plans to run on, else one of `backend` or the run's.
    `step` (an execute.Step of `run` and `parts`): the step to run, made by the caller
    (cli/train.py); the Trainer closes it with itself either way.
    `train_data`, `test_data`: a dsptrain.data.Dataset or an (images, labels) pair, instead
    of the run's `data:` section (which is then not read; no test data unless given)."""

    def __init__(
        self,
        run,
        backend: str | None = None,
        out_dir: str | Path | None = None,
        progress: bool = True,
        energy_meter=None,
        model=None,
        parts=None,
        planner=None,
        step=None,
        train_data=None,
        test_data=None,
    ):
        check_environment()  # a bad DSPTRAIN_* value fails here, naming it, before a backend reads it
        self.run = run
        self.recipe = run.recipe
        # `model`: a Model built in Python (dsptrain.load_model, from_torch) instead of run.model
        if parts is None:
            parts = assemble(run, model)  # a model the recipe cannot lower fails here, before data loads
        self.algorithm, self.model, self.frozen, self.device = parts.algorithm, parts.model, parts.frozen, parts.device
        self.steps = step if step is not None else own_step(run, parts, backend, planner)
        # adaptive rescaling's state is the Trainer's: it goes into the checkpoint
        self.rescale = RescaleController(self.recipe, run.scheduler.adaptive_rescale)
        self.scheduler = run.scheduler
        self.out_dir = Path(out_dir or run.out_dir or Path("runs") / run.name)
        self.progress = progress
        self.energy_meter = energy_meter if energy_meter is not None else make_energy_meter(run, progress)
        self._metered_steps: list[int] = []  # global step of each meter window, in order
        self.seed = run.train.seed
        self.state = initial_state(parts, self.recipe, self.seed)
        self.epoch, self.batch_in_epoch, self.global_step = 0, 0, 0
        self._epoch_sums = (0, 0.0, 0)  # samples, loss sum, correct so far in this epoch (resume)
        self._epoch_totals = EpochTotals()
        self._given = (train_data, test_data)
        self._splits = None
        t = run.train
        self.watch = Watch(t.on_divergence, t.saturation_steps)
        stopping = t.early_stopping
        self.monitor = Monitor(
            t.checkpoint_best,
            stopping.metric if stopping else None,
            stopping.patience if stopping else 0,
            stopping.min_delta if stopping else 0.0,
        )
        self._saved_step = None  # the global step of the last checkpoint this process wrote or loaded
        self._total_steps = 0  # of the fit() under way: the lr schedule's horizon

    # ------------------------------------------------------------ the step's parts, by their old names
    @property
    def backends(self) -> dict:
        return self.steps.backends

    @backends.setter
    def backends(self, value: dict) -> None:
        self.steps.backends = value

    @property
    def executor(self):
        return self.steps.executor

    @property
    def plans(self):
        return self.steps.plans

    @property
    def budget(self):
        return self.steps.budget

    @property
    def use_arena(self) -> bool:
        return self.steps.use_arena

    @property
    def _arena(self):
        return self.steps.arena

    @property
    def _held_scratch(self) -> dict:
        return self.steps.held_scratch

    @_held_scratch.setter
    def _held_scratch(self, value: dict) -> None:
        self.steps.held_scratch = value

    @property
    def backend_names(self) -> list[str]:
        return self.steps.backend_names()

    def memory_option(self, plan):
        """(the memory.fit.Option for the next step, the budget it was chosen under); (None, None) without the arena."""
        return self.steps.memory_option(plan, self.global_step)

    def check_budget(self, batch: int) -> None:
        """Fail before training when a fixed or scheduled budget fits no plan at `batch`."""
        self.steps.check_budget(batch)

    def close(self):
        """Close the Step (its backends) and the energy meter; the Trainer is also a context manager."""
        try:
            self.steps.close()
        finally:
            self.energy_meter.close()
            self.release_out_dir()

    def hold_out_dir(self) -> bool:
        """Lock the output directory for this Trainer (inputs/run_lock.py): a second run on it
        is refused by name. True if this call took the lock, False if it was held already."""
        if getattr(self, "_run_lock", None) is not None:
            return False
        _make_out_dir(self.out_dir)
        self._run_lock = RunLock.acquire(self.out_dir)
        return True

    def release_out_dir(self) -> None:
        lock, self._run_lock = getattr(self, "_run_lock", None), None
        if lock is not None:
            lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------ data
    @property
    def splits(self):
        """The run's data (assembly.Splits: train, val, test), loaded and checked once."""
        if self._splits is None:
            self._splits = load_data(self.run, self.model, *self._given, progress=self.progress)
        return self._splits

    @property
    def train_data(self) -> datasets.Dataset:
        """The run's training split: `images, labels = trainer.train_data[:64]` is a batch
        (uint8 NHWC, int64); `trainer.train_data.batches(64)` iterates over all of them."""
        return self.splits.train

    @property
    def val_data(self) -> datasets.Dataset | None:
        """`data.val_fraction` of the training data, held out (None without it)."""
        return self.splits.val

    @property
    def test_data(self) -> datasets.Dataset | None:
        """The test split; None when the run has none (its own data without `data.test`)."""
        return self.splits.test

    @property
    def classes(self) -> tuple[str, ...] | None:
        """The class names by label, when the data has them (an image folder's subfolders).
        None while no data is loaded: saving a trainer that was only handed batches
        (`step()`) must not load, and check, the run's `data:` section."""
        return self._splits.train.classes if self._splits is not None else None

    def check_data(self) -> None:
        """Load and check both splits now: a corrupt test file fails before the first
        step, not after an epoch; labels must fit the model's classes."""
        _ = self.train_data, self.test_data  # loading a split checks its labels

    # ------------------------------------------------------------ one step
    def step(self, images: np.ndarray, labels: np.ndarray):
        """One training step on a batch; updates the weights; returns its execute.StepStats.
        `images`: uint8 NHWC (the model's input shape), or floats in [0, 1], converted
        (images.py has the contract); `labels`: integers 0..classes-1."""
        images = as_images(images, self.model.input_shape)
        labels = as_labels(labels, len(images), self.model.num_classes)
        lr_scale = lr_factor(self.run.train.lr_schedule, self.global_step, self._total_steps) * self.watch.lr_scale
        self.state, stats = self.steps.train(
            self.state,
            images,
            labels,
            self.global_step,
            self.epoch,
            self.seed,
            self.energy_meter,
            self.rescale,
            lr_scale,
        )
        self._metered_steps.append(self.global_step)
        self.global_step += 1
        return stats

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Float class scores (N, classes) of `images` (the same contract as step())."""
        images = as_images(images, self.model.input_shape)
        return self.steps.predict(self.state, images, self.global_step, self.epoch, self.seed)

    def evaluate(self, dataset=None) -> float:
        """Accuracy on `dataset` (default: the run's test split)."""
        tally = self.tally(dataset or self.test_data)
        return tally.correct / tally.count

    def tally(self, dataset):
        """Accuracy and loss on `dataset` (validation.Tally)."""
        if dataset is None:
            raise UserError(
                "evaluate: this run has no test data; pass a dataset, or give data.test, "
                "data.test_fraction or Trainer(..., test_data=...)"
            )
        tally = Tally()
        for images, labels in datasets.batches(dataset, self.run.train.eval_batch_size, seed=None):
            tally.add(self.predict(images), labels)
        self.steps.after_evaluation()  # under a budget: the scratch the evaluation grew goes back
        return tally

    def _recalibrate_batch_norm(self) -> None:
        """train.bn_recalibration: the batch norms' statistics re-estimated for the weights
        as they are, before the epoch's evaluation (train/recalibrate.py)."""
        batches = self.run.train.bn_recalibration
        if recalibrates(self.model, self.frozen, batches):
            bs = self.run.train.batch_size
            self.state = recalibrate(
                self.steps, self.state, self.train_data, bs, batches, self.global_step, self.epoch, self.seed
            )

    # ------------------------------------------------------------ the loop
    def fit(self, epochs: int | None = None, on_epoch=None) -> list[dict]:
        """Train to `epochs` (default: the run's), evaluating and checkpointing each epoch;
        returns the epochs' records."""
        epochs = epochs or self.run.train.epochs
        bs = self.run.train.batch_size
        history = []
        took_lock, metrics = self._open_fit(bs)
        try:
            loader = Loader(self.train_data, bs, self.seed, self.run.data.augment)
            self._total_steps = epochs * datasets.batch_count(self.train_data, bs)
            while self.epoch < epochs and not self.monitor.stopped:
                started = time.perf_counter()
                seen, loss_sum, correct, totals = self._train_epoch(loader, epochs, metrics)
                record = self._end_epoch(seen, loss_sum, correct, totals, time.perf_counter() - started, metrics)
                history.append(record)
                if on_epoch is not None:
                    on_epoch(record)
        finally:
            metrics.close()
            if hasattr(self.energy_meter, "readings"):
                self.realign_energy()
            if took_lock:
                self.release_out_dir()
        return history

    def _train_epoch(self, loader: Loader, epochs: int, metrics: RunLog) -> tuple[int, float, int, EpochTotals]:
        """The rest of the current epoch's batches, from `batch_in_epoch` (a resumed run's
        sums so far come from its checkpoint): each step recorded, undone if it diverged, and
        a checkpoint every train.checkpoint_every_steps. Returns the epoch's (samples, loss
        sum, correct answers, totals)."""
        from tqdm import tqdm

        bs = self.run.train.batch_size
        resumed = self.batch_in_epoch > 0  # mid-epoch: the epoch's sums so far come from the checkpoint
        seen, loss_sum, correct = self._epoch_sums if resumed else (0, 0.0, 0)
        totals = self._epoch_totals if resumed else EpochTotals()
        self._epoch_totals = totals
        total = datasets.batch_count(self.train_data, bs)
        bar = tqdm(
            total=total,
            initial=self.batch_in_epoch,
            desc=f"epoch {self.epoch + 1}/{epochs}",
            disable=not self.progress,
            unit="batch",
            leave=True,
            dynamic_ncols=True,
        )
        for images, labels in loader.epoch(self.epoch, self.batch_in_epoch):
            saved = self.watch.keep(self.state)  # None under on_divergence: stop (nothing to undo)
            stats = self.step(images, labels)
            self.batch_in_epoch += 1
            undone = self._diverged(stats, saved)
            metrics.write({**step_record(stats), **({"diverged": undone} if undone else {})})
            if not undone:
                seen, loss_sum, correct = (
                    seen + stats.batch,
                    loss_sum + stats.loss * stats.batch,
                    correct + stats.correct,
                )
                self._epoch_sums = (seen, loss_sum, correct)
                totals.add(stats)
            postfix = {
                "loss": f"{loss_sum / max(seen, 1):.3f}",
                "acc": f"{correct / max(seen, 1):.3f}",
                "samples/s": f"{totals.smoothed_rate:.0f}",
            }
            if stats.energy_j is not None:
                postfix["J/batch"] = f"{stats.energy_j:.3g}"
            bar.set_postfix(postfix, refresh=False)
            bar.update()
            every = self.run.train.checkpoint_every_steps
            if every and self.global_step % every == 0:
                metrics.flush()
                self.save()
        bar.close()
        return seen, loss_sum, correct, totals

    def _end_epoch(
        self, seen: int, loss_sum: float, correct: int, totals: EpochTotals, seconds: float, metrics: RunLog
    ) -> dict:
        """After an epoch's batches: batch norms recalibrated, the evaluation, the epoch's
        record written, the next epoch begun and checkpointed (and the best one kept), early
        stopping announced. Returns the record."""
        self._recalibrate_batch_norm()
        record = self._epoch_record(seen, loss_sum, correct, totals, seconds)
        best, stop = self.monitor.epoch(record)
        metrics.write(record)
        metrics.flush()
        if self.progress:
            print(
                f"epoch {self.epoch + 1}: {accuracy_line(record)} "
                f"({seconds:.1f} s, {seen / max(seconds, 1e-9):.0f} samples/s)",
                file=sys.stderr,
            )
        self.epoch, self.batch_in_epoch, self._epoch_sums = self.epoch + 1, 0, (0, 0.0, 0)
        self.save()
        if best:
            self.save(self.out_dir / BEST_CHECKPOINT)
        if stop and self.progress:
            print(
                f"early stopping: {self.monitor.stop_metric} has not improved for "
                f"{self.monitor.waited} epochs (train.early_stopping.patience)",
                file=sys.stderr,
            )
        return record

    def _open_fit(self, bs: int) -> tuple[bool, RunLog]:
        """Before the first step of fit: the output directory made and held (unless the command
        holds it already), and what would otherwise fail late checked -- the memory budget,
        the data, the early-stopping metric, the metrics file. Returns whether this call took
        the directory's lock, and the metrics log."""
        _make_out_dir(self.out_dir)
        took_lock = self.hold_out_dir()  # held already when the command took it before checking for a checkpoint
        try:
            reap_stale_temps(self.out_dir, ("checkpoint.npz", "metrics.jsonl"))
            if hasattr(self.energy_meter, "measure_baseline") and not getattr(self.energy_meter, "baseline_w", 0):
                self.energy_meter.measure_baseline(3.0)  # battery: idle power, subtracted from every batch
            self.check_budget(bs)
            self.check_data()
            check_monitor(self.monitor, self.splits, self.run.source or self.run.name)
            _check_metrics_file(self.out_dir / "metrics.jsonl")
            fresh = self.epoch == self.batch_in_epoch == self.global_step == 0
            # a run from step 0 owns its metrics: lines of an earlier run killed before its first checkpoint go
            return took_lock, RunLog(self.out_dir, self.run.name, fresh, self.global_step)
        except BaseException:
            if took_lock:
                self.release_out_dir()
            raise

    def _epoch_record(self, seen: int, loss_sum: float, correct: int, totals: EpochTotals, seconds: float) -> dict:
        """The epoch's metrics record: training loss and accuracy, the val and test tallies,
        time, backends and the epoch's totals."""
        record = {
            "kind": "epoch",
            "epoch": self.epoch + 1,
            "step": self.global_step,
            "train_loss": loss_sum / max(seen, 1),
            "train_accuracy": correct / max(seen, 1),
        }
        for name, split in (("val", self.val_data), ("test", self.test_data)):
            if split is not None:
                record.update(self.tally(split).record(name))
        record.update({"seconds": seconds, "backends": self.steps.backend_names(), **totals.record(seen, seconds)})
        return record

    def _diverged(self, stats, saved) -> str | None:
        """After a step: None if it is sound; else, by train.on_divergence, DivergedError
        (stop), or the step undone (`saved` back) and what diverged returned."""
        problem = self.watch.problem(stats.loss, self.state)
        if problem is None:
            self.watch.good_step()
            return None
        where = f"{self.run.source or self.run.name}: epoch {self.epoch + 1}, step {self.global_step - 1}"
        last_good = (
            f"the last good weights are in {self.checkpoint_path} (step {self._saved_step})"
            if self._saved_step is not None
            else "no checkpoint was written before it (train.checkpoint_every_steps saves more often)"
        )
        action = self.watch.act(problem, where, last_good)
        self.state = saved
        if self.progress:
            print(
                f"{where}: {problem}: step undone" + (", learning rate halved" if action == "halve" else ""),
                file=sys.stderr,
            )
        return problem

    def realign_energy(self) -> int:
        """Align every metered step of this process with the power monitor's trace as it is
        now and rewrite their energy in metrics.jsonl (metrics.realign_energy)."""
        aligned = realign_energy(self.energy_meter, self._metered_steps, self.out_dir / "metrics.jsonl")
        if aligned:
            rebuild_csv(self.out_dir)  # the CSV files show the figures metrics.jsonl now holds
        return aligned

    # ------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / "checkpoint.npz"

    def save(self, path: str | Path | None = None) -> Path:
        path = Path(path or self.checkpoint_path)
        checkpoints.save(self, path)
        if path == self.checkpoint_path:
            self._saved_step = self.global_step
        return path

    def load(self, path: str | Path | None = None) -> None:
        """Continue from a checkpoint: every array and field checked against this run
        (resume.py) before anything is replaced; metrics after it are dropped."""
        checkpoints.load(self, Path(path or self.checkpoint_path))
        self._saved_step = self.global_step


BEST_CHECKPOINT = "checkpoint_best.npz"  # train.checkpoint_best: the best epoch's weights


def _make_out_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"output directory {path}: a file is in the way") from None
    except OSError as exc:
        raise UserError(f"output directory {path}: cannot create it ({exc.strerror})") from None


def _check_metrics_file(path: Path) -> None:
    """metrics.jsonl must be a regular file if it is there (opening a FIFO to append blocks)."""
    if os.path.lexists(path):
        problem = check_regular(path, "metrics")
        if problem:
            raise UserError(f"{path}: {problem}")
