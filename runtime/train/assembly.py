"""A run config's parts, assembled: the recipe's algorithm, the model (with its frozen
layers and starting weights), the device profile, the energy meter and the data splits.

What the Trainer (train/loop.py) is made of, before any step runs; every failure here
names the run file and key that led to it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .. import data as datasets
from ..algorithms import algorithm_module
from ..config import load_device
from ..errors import DataError, LoweringError
from ..graph import lower
from ..interchange import frozen_layers, resolve_model, starting_state, with_head
from ..models import MODELS, build_model


@dataclass(frozen=True)
class Parts:
    algorithm: object          # the recipe's module (algorithms/<recipe>.py)
    model: object              # nn.Model
    frozen: frozenset          # names of layers that get no gradient and no update
    device: object             # config.DeviceProfile of the run's scheduler
    graph: object = None       # graph.TrainGraph: the model lowered for training at the run's batch size,
                               # once: the Step plans this graph rather than lowering the model again


def assemble(run, model=None, progress: bool = True, notes: bool = True) -> Parts:
    """The parts of `run`; `model`: a Model built in Python (dsptrain.load_model,
    from_torch) instead of the run's model section. A model the recipe cannot lower
    fails here, before data loads. `notes`: print what import did and the frozen layers
    to stderr (`dsptrain plan` reports the frozen layers in its own output instead)."""
    algorithm = algorithm_module(run.recipe.module)
    model, frozen = _resolve_model(run, model, notes)
    graph = _lowered_or_explained(model, run, frozen)
    return Parts(algorithm, model, frozen, load_device(run.scheduler.device), graph)


def initial_state(parts: Parts, recipe, seed: int) -> dict:
    """The weights and optimizer state a run starts from (the model file's, else the recipe's initialisation)."""
    return starting_state(parts.algorithm, parts.model, recipe, np.random.default_rng(seed))


def energy_meter(run, progress: bool):
    """The run's energy meter; the reason it was chosen goes to stderr."""
    from ..energy import make_meter

    meter, why = make_meter(run.energy)
    if progress:
        print(f"energy: {why}", file=sys.stderr)
    return meter


def load_split(run, model, split: str) -> datasets.Dataset:
    """The run's `split` ("train" / "test"), its labels checked against the model's classes."""
    try:
        data = datasets.load_dataset(run.data, split, model.input_shape)
    except DataError as exc:   # say which run file and key led there
        if not run.source:
            raise
        key = "data.path" if run.data.path else "data.dataset"
        raise DataError(f"{run.source}: {key}: {exc}") from None
    datasets.check_labels(data, model.num_classes, run.source or run.name)
    return data


def lowerable_models(recipe, num_classes: int | None = 10) -> list[str]:
    """The zoo's models `recipe` can lower (for the suggestion when one cannot)."""
    names = []
    for name in sorted(MODELS):
        try:
            lower(build_model(name, num_classes or 10), recipe, 1)
        except LoweringError:
            continue
        names.append(name)
    return names


def _lowered_or_explained(model, run, frozen):
    """`model` lowered for training at the run's batch size (the graph the first plan is
    built on), so a model the recipe cannot lower fails before data loads, with the run
    file and key in the message and the models that recipe can lower."""
    try:
        return lower(model, run.recipe, run.train.batch_size, True, frozen)
    except LoweringError as exc:
        where = f"{run.source}: model.name: {model.name!r}: " if run.source else f"model {model.name!r}: "
        can = lowerable_models(run.recipe, run.model.num_classes)
        hint = f"; {run.recipe.name} lowers {', '.join(can)}" if can else ""
        raise LoweringError(f"{where}{exc}{hint}") from None


def _resolve_model(run, model, print_notes: bool = True):
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
    for note in notes if print_notes else ():   # printed even when quiet: they change what trains
        print(f"{model.name}: {note}", file=sys.stderr)
    return model, frozen
