"""Continuing a killed run exactly: the checkpoint's fields checked against the run, and
metrics.jsonl repaired to what it held when the checkpoint was written.

A kill -9 can land anywhere: between a step record and the next checkpoint (records
of steps the checkpoint does not hold), inside a line (a partial last line), or
between an epoch's record and its checkpoint. `repair_metrics` keeps the step records
before the checkpoint's step and the epoch records of epochs it completed; the epoch's
running loss and accuracy come back from the checkpoint (or, for an older one, from
the kept records), so the resumed epoch's record equals the uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

from . import checkpoint
from . import data as datasets
from .config.settings import first_difference, recipe_settings
from .errors import CheckpointError
from .inputs.files import read_limited

MAX_METRICS_BYTES = 4 << 30  # one record per step: millions of steps

_INT_FIELDS = {
    "epoch": (0, 100_000),
    "batch_in_epoch": (0, 1 << 40),
    "global_step": (0, 1 << 50),
    "seed": (0, 2**32 - 1),
}


def _int(value, low, high) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def check_meta(path: Path, meta: dict, trainer) -> dict:
    """The checkpoint's fields, each checked against `trainer`'s run; CheckpointError else."""

    def fail(key, message):
        raise CheckpointError(path, key, message)

    for key, want in (("model", trainer.model.name), ("recipe", trainer.recipe.name)):
        if meta.get(key) != want:
            fail(key, f"{meta.get(key)!r}: this checkpoint is of another {key}; this run's is {want!r}")
    check_recipe_settings(path, meta.get("recipe_settings", ABSENT), trainer.recipe)
    for key, (low, high) in _INT_FIELDS.items():
        if not _int(meta.get(key), low, high):
            fail(key, f"{meta.get(key)!r} is not a whole number in {low}..{high}")
    per_epoch = datasets.batch_count(trainer.train_data, trainer.run.train.batch_size)
    if meta["batch_in_epoch"] > per_epoch:
        fail("batch_in_epoch", f"{meta['batch_in_epoch']} is beyond this run's {per_epoch} batches per epoch")
    if meta["global_step"] != meta["epoch"] * per_epoch + meta["batch_in_epoch"]:
        fail(
            "global_step",
            f"{meta['global_step']} does not match epoch {meta['epoch']}, batch "
            f"{meta['batch_in_epoch']} at this run's {per_epoch} batches per epoch "
            f"(another data size or batch size?)",
        )
    rescale = meta.get("rescale") or {}
    if not isinstance(rescale, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and len(v) == 6 and all(_int(x, -(1 << 50), 1 << 50) for x in v)
        for k, v in rescale.items()
    ):
        fail("rescale", "is not a map of op name to six whole numbers")
    sums = meta.get("epoch_sums")
    if sums is not None and not (
        isinstance(sums, list)
        and len(sums) == 3
        and _int(sums[0], 0, 1 << 50)
        and isinstance(sums[1], (int, float))
        and not isinstance(sums[1], bool)
        and math.isfinite(sums[1])
        and sums[1] >= 0
        and _int(sums[2], 0, sums[0])
    ):
        fail("epoch_sums", f"{sums!r} is not [samples, loss sum, correct]")
    energy = meta.get("epoch_energy")
    if energy is not None and not (
        isinstance(energy, list)
        and len(energy) == 3
        and isinstance(energy[0], (int, float))
        and not isinstance(energy[0], bool)
        and math.isfinite(energy[0])
        and _int(energy[1], 0, 1 << 50)
        and isinstance(energy[2], list)
        and all(isinstance(m, str) for m in energy[2])
    ):
        fail("epoch_energy", f"{energy!r} is not [joules, steps, [meters]]")
    watch = meta.get("divergence")
    if watch is not None and not (
        isinstance(watch, list) and len(watch) == 3 and all(_int(v, 0, 1 << 50) for v in watch)
    ):
        fail("divergence", f"{watch!r} is not [saturated steps, halvings, events in a row]")
    monitor = meta.get("monitor")
    if monitor is not None and not (
        isinstance(monitor, list)
        and len(monitor) == 3
        and _int(monitor[2], 0, 100_000)
        and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
            for v in monitor[:2]
        )
    ):
        fail("monitor", f"{monitor!r} is not [best value, early stopping's best, epochs waited]")
    classes = meta.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        fail("classes", f"{classes!r} is not a list of class names")
    return meta


ABSENT = object()  # a checkpoint meta without the key (written before it was stored)


def check_recipe_settings(path: Path, stored, recipe, stacklevel: int = 4) -> None:
    """The recipe settings the checkpoint was trained with must be this run's: a checkpoint
    continued under other settings would train on as another recipe. One written before
    checkpoints kept them continues with this run's settings, and says so. The trainer's resume
    (above) and the federated server's (fl/server.py) both hold their checkpoints to it."""
    if stored is ABSENT:
        warnings.warn(
            f"{path}: written before checkpoints kept their recipe's settings; continuing with this "
            f"run's {recipe.name} settings",
            UserWarning,
            stacklevel=stacklevel,
        )
        return
    if not isinstance(stored, dict):
        raise CheckpointError(path, "recipe_settings", f"{stored!r} is not a mapping of the recipe's settings")
    found = first_difference(stored, recipe_settings(recipe))
    if found:
        key, value, want = found
        raise CheckpointError(
            path,
            f"recipe_settings.{key}",
            f"{value!r}: the checkpoint was trained with this; this run's recipe has {want!r} "
            f"(resume with the run's original recipe settings)",
        )


def _records(path: Path) -> tuple[list[dict], int]:
    """The parseable records of metrics.jsonl and how many lines were not (a partial last
    line after a kill; anything else is warned about)."""
    records, bad = [], 0
    raw = read_limited(
        path, "metrics", MAX_METRICS_BYTES, lambda m: CheckpointError(path, None, m.removeprefix(f"{path}: "))
    )
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError):
            bad += 1
            if i != len(lines) - 1:
                warnings.warn(f"{path}: line {i + 1} is not a JSON record; dropped", RuntimeWarning, stacklevel=3)
            continue
        records.append(record)
    return records, bad


def _kept(record: dict, step: int, epochs_done: int) -> bool:
    if record.get("kind") == "epoch":
        return _int(record.get("epoch"), 0, 1 << 40) and record["epoch"] <= epochs_done
    at = record.get("step")
    return not _int(at, 0, 1 << 50) or at < step


def repair_metrics(path: Path, step: int, epochs_done: int, sums) -> tuple:
    """Rewrite metrics.jsonl (atomically) as it was at the checkpoint: global step `step`,
    `epochs_done` epochs complete. Returns the current epoch's running sums."""
    if not os.path.lexists(path):
        return tuple(sums) if sums else (0, 0.0, 0)
    records, bad = _records(path)
    kept = [r for r in records if _kept(r, step, epochs_done)]
    if bad or len(kept) != len(records):
        text = "".join(json.dumps(r) + "\n" for r in kept)
        checkpoint.atomic_write(path, lambda f: f.write(text.encode()))
    if sums:
        return sums[0], float(sums[1]), sums[2]
    seen, loss_sum, correct = 0, 0.0, 0  # an older checkpoint: rebuild from this epoch's records
    for r in kept:
        if r.get("kind") == "step" and r.get("epoch") == epochs_done + 1:
            seen, loss_sum = seen + r["batch"], loss_sum + r["loss"] * r["batch"]
            correct += round(r["accuracy"] * r["batch"])
    return seen, loss_sum, correct
