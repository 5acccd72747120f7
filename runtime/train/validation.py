"""What each epoch is judged by: accuracy and loss on a held-out split, the best epoch
so far (`train.checkpoint_best`: checkpoint_best.npz) and early stopping
(`train.early_stopping`: no better value of its metric for `patience` epochs).

A metric is a key of the epoch record: train_loss, train_accuracy, val_loss,
val_accuracy, test_loss, test_accuracy; losses are better lower, accuracies higher.
"""

from __future__ import annotations

import math

import numpy as np

from .step import cross_entropy

METRICS = ("val_accuracy", "val_loss", "test_accuracy", "test_loss", "train_accuracy", "train_loss")


def higher_is_better(metric: str) -> bool:
    return metric.endswith("accuracy")


def accuracy_line(record: dict) -> str:
    """ "val accuracy 0.91, test accuracy 0.90" of an epoch record (train accuracy without either)."""
    parts = [
        f"{name} accuracy {record[name + '_accuracy']:.4f}" for name in ("val", "test") if name + "_accuracy" in record
    ]
    return ", ".join(parts) or f"train accuracy {record['train_accuracy']:.4f}"


class Tally:
    """Accuracy and mean loss over the batches of one evaluation."""

    def __init__(self):
        self.count, self.correct, self.loss_sum = 0, 0, 0.0

    def add(self, scores: np.ndarray, labels: np.ndarray) -> None:
        self.count += len(labels)
        self.correct += int((scores.argmax(axis=1) == labels).sum())
        self.loss_sum += cross_entropy(scores, labels) * len(labels)

    def record(self, prefix: str) -> dict:
        return {
            f"{prefix}_accuracy": self.correct / max(self.count, 1),
            f"{prefix}_loss": self.loss_sum / max(self.count, 1),
        }


class Monitor:
    """The best value of `best_metric` (checkpoint_best) and early stopping on `stop_metric`."""

    def __init__(
        self, best_metric: str | None, stop_metric: str | None = None, patience: int = 0, min_delta: float = 0.0
    ):
        self.best_metric, self.stop_metric = best_metric, stop_metric
        self.patience, self.min_delta = patience, min_delta
        self.best = None  # best value of best_metric so far
        self.stop_best = None  # best value of stop_metric so far
        self.waited = 0  # epochs since stop_metric last improved

    @staticmethod
    def _better(metric: str, value: float, than: float | None, delta: float = 0.0) -> bool:
        if than is None:
            return math.isfinite(value)
        return value > than + delta if higher_is_better(metric) else value < than - delta

    def epoch(self, record: dict) -> tuple[bool, bool]:
        """(is this epoch the best so far, should training stop) after `record`."""
        best = False
        if self.best_metric is not None and self._better(self.best_metric, record[self.best_metric], self.best):
            self.best, best = record[self.best_metric], True
        stop = False
        if self.stop_metric is not None:
            value = record[self.stop_metric]
            if self._better(self.stop_metric, value, self.stop_best, self.min_delta):
                self.stop_best, self.waited = value, 0
            else:
                self.waited += 1
                stop = self.waited >= self.patience
        return best, stop

    @property
    def stopped(self) -> bool:
        """Early stopping has ended the run (also after a resume of a stopped run)."""
        return self.stop_metric is not None and self.waited >= self.patience

    def state(self) -> list:
        return [self.best, self.stop_best, self.waited]

    def restore(self, values) -> None:
        self.best, self.stop_best, self.waited = values[0], values[1], int(values[2])


def check_monitor(monitor: Monitor, splits, source) -> None:
    """The monitored metrics must be measured: val_* needs data.val_fraction, test_* test data."""
    from ..errors import ConfigError

    have = {"train"} | {name for name in ("val", "test") if getattr(splits, name) is not None}
    for key, metric in (
        ("train.checkpoint_best", monitor.best_metric),
        ("train.early_stopping.metric", monitor.stop_metric),
    ):
        if metric is not None and metric.split("_")[0] not in have:
            need = "data.val_fraction" if metric.startswith("val") else "test data (data.test or data.test_fraction)"
            raise ConfigError(source, key, f"{metric!r} is not measured: this run has no {need}")
