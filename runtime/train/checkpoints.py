"""A Trainer's checkpoint: what it writes (weights, optimizer state, its position, the
epoch's running sums, adaptive rescaling's state, the divergence watch's and the best-epoch
monitor's state, the class names, the model's layer list, the recipe's resolved settings) and how it
continues from one (every field checked against the run by resume.py first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import checkpoint
from ..config.settings import recipe_settings
from ..errors import DivergedError
from ..interchange import describe_model
from ..metrics import EpochTotals
from ..resume import check_meta, repair_metrics


def save(trainer, path: Path) -> Path:
    """Write `trainer`'s checkpoint to `path` (atomically). Weights that went non-finite are
    refused (DivergedError): a checkpoint export and --resume cannot read never replaces a good one."""
    bad = [
        name
        for name, value in trainer.state.items()
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all()
    ]
    if bad:
        more = f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else ""
        raise DivergedError(
            f"{path}: not written: {bad[0]} holds non-finite values{more}; the file there, if any, is kept"
        )
    checkpoint.save(
        path,
        trainer.state,
        {
            "run": trainer.run.name,
            "recipe": trainer.recipe.name,
            "recipe_settings": recipe_settings(trainer.recipe),  # resume checks, export writes these
            "model": trainer.model.name,
            "epoch": trainer.epoch,
            "batch_in_epoch": trainer.batch_in_epoch,
            "global_step": trainer.global_step,
            "seed": trainer.seed,
            "rescale": trainer.rescale.state(),
            "epoch_sums": list(trainer._epoch_sums),
            "epoch_energy": [
                trainer._epoch_totals.energy_j,
                trainer._epoch_totals.energy_steps,
                sorted(trainer._epoch_totals.meters),
            ],
            "model_spec": describe_model(trainer.model),  # export rebuilds the model from this
            "divergence": trainer.watch.state(),
            "monitor": trainer.monitor.state(),
            "classes": list(trainer.classes) if trainer.classes else None,  # label -> name, for export
        },
    )
    return path


def load(trainer, path: Path) -> None:
    """Continue `trainer` from the checkpoint at `path`: every array and field checked
    against its run before anything is replaced; metrics after it are dropped."""
    state, meta = checkpoint.load(
        path, expect=trainer.state, identity={"model": trainer.model.name, "recipe": trainer.recipe.name}
    )
    meta = check_meta(path, meta, trainer)
    trainer.state = {name: state[name] for name in trainer.state}
    trainer.epoch, trainer.batch_in_epoch = meta["epoch"], meta["batch_in_epoch"]
    trainer.global_step, trainer.seed = meta["global_step"], meta["seed"]
    trainer.rescale.restore(meta.get("rescale") or {})
    trainer._epoch_sums = repair_metrics(
        trainer.out_dir / "metrics.jsonl", trainer.global_step, trainer.epoch, meta.get("epoch_sums")
    )
    trainer._epoch_totals = EpochTotals()
    trainer.watch.restore(meta.get("divergence") or [0, 0, 0])
    trainer.monitor.restore(meta.get("monitor") or [None, None, 0])
    energy = meta.get("epoch_energy")
    if energy:  # the energy the epoch's steps so far added up to (the epoch record's total)
        trainer._epoch_totals.energy_j, trainer._epoch_totals.energy_steps = float(energy[0]), energy[1]
        trainer._epoch_totals.meters = set(energy[2])
