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
from ..errors import ConfigError, DataError, LoweringError
from ..graph import lower
from ..interchange import frozen_layers, resolve_model, starting_state, with_head
from ..models import MODELS, build_model


@dataclass(frozen=True)
class Parts:
    algorithm: object  # the recipe's module (algorithms/<recipe>.py)
    model: object  # nn.Model
    frozen: frozenset  # names of layers that get no gradient and no update
    device: object  # config.DeviceProfile of the run's scheduler
    graph: object = None  # graph.TrainGraph: the model lowered for training at the run's batch size,
    # once: the Step plans this graph rather than lowering the model again


def assemble(run, model=None, progress: bool = True, notes: bool = True) -> Parts:
    """The parts of `run`; `model`: a Model built in Python (dsptrain.load_model,
    from_torch) instead of the run's model section. A model the recipe cannot lower
    fails here, before data loads. `notes`: print what import did and the frozen layers
    to stderr (`dsptrain plan` reports the frozen layers in its own output instead)."""
    algorithm = algorithm_module(run.recipe.module)
    model, frozen = _resolve_model(run, model, notes)
    graph = _lowered_or_explained(model, run, frozen)
    normalize = run.data.normalize
    problem = normalize.problem(model.input_shape[-1]) if normalize is not None else None
    if problem:  # the channel count is known only now, from the model
        raise ConfigError(run.source or run.name, f"data.normalize.{problem[0]}", problem[1])
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


@dataclass(frozen=True)
class Splits:
    train: datasets.Dataset
    val: datasets.Dataset | None  # data.val_fraction of train, held out (stratified, seeded)
    test: datasets.Dataset | None  # None: the run has no test data


def load_data(run, model, train=None, test=None, progress: bool = False) -> Splits:
    """The run's splits: `train` / `test` given in Python (a Dataset, or (images, labels)
    arrays) or else the run's `data:` section; `data.val_fraction` of train held out."""
    train = as_dataset(train, model, "train_data") if train is not None else load_split(run, model, "train", progress)
    if test is not None:
        test = as_dataset(test, model, "test_data")
    elif not isinstance(train, _Given):
        test = load_split(run, model, "test", progress)
    val = None
    if run.data.val_fraction:
        train, val = datasets.split_off(train, run.data.val_fraction, run.train.seed, "val")
    for split in (train, val, test):
        if split is not None:
            datasets.check_labels(split, model.num_classes, run.source or run.name)
    return Splits(train, val, test)


class _Given(datasets.Dataset):
    """Data handed to the Trainer in Python: the run's `data:` section is not read for it."""


def as_dataset(given, model, name: str) -> datasets.Dataset:
    """`given` (a Dataset, or an (images, labels) pair) checked by the input contract for `model`."""
    if isinstance(given, datasets.Dataset):
        images, labels, classes, label = given.images, given.labels, given.classes, given.name
    elif isinstance(given, (tuple, list)) and len(given) == 2:
        (images, labels), classes, label = given, None, name
    else:
        raise DataError(
            f"{name}: expected a dsptrain.data.Dataset or an (images, labels) pair, got {type(given).__name__}"
        )
    data = datasets.from_arrays(images, labels, model.input_shape, model.num_classes, label, name, classes)
    return _Given(data.images, data.labels, data.name, data.origin, data.classes)


def load_split(run, model, split: str, progress: bool = False) -> datasets.Dataset | None:
    """The run's `split` ("train" / "test"); None when it has no test data."""
    try:
        return datasets.load_dataset(run.data, split, model.input_shape, model.num_classes, progress)
    except DataError as exc:  # say which run file and key led there
        if not run.source:
            raise
        key = next(
            (f"data.{k}" for k in ("folder", "npz", "npy") if getattr(run.data, k, None)),
            "data.path" if run.data.path else "data.dataset",
        )
        raise DataError(f"{run.source}: {key}: {exc}") from None


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
        names = ", ".join(layer.name for layer in model.layers if layer.name in frozen)
        notes.append(f"frozen (no weight gradient, no update): {names}")
    for note in notes if print_notes else ():  # printed even when quiet: they change what trains
        print(f"{model.name}: {note}", file=sys.stderr)
    return model, frozen
