"""Checks that span fields (a field's own type and range are building.py's): a recipe's
formats, schedule and params (its module's check_recipe), a run's name, paths, data,
memory, device, energy and model sections. Each raises ConfigError naming the key."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ConfigError
from ..inputs import number_problem
from .devices import load_device
from .schema import Recipe, RunConfig

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")  # a run or recipe name: no way out of a directory


def check_recipe(recipe: Recipe, source) -> Recipe:
    for role in ("weights", "activations", "errors", "gradients", "updates"):
        getattr(recipe.tensors, role).check(source, f"tensors.{role}")
    for name in ("mu", "lr_factor"):
        starts = [s for s, _ in getattr(recipe.schedule, name)]
        if starts != sorted(starts) or any(s < 0 for s in starts):
            raise ConfigError(source, f"schedule.{name}", f"epochs {starts} must be >= 0 and ascending")
    for epoch, mu in recipe.schedule.mu:
        if not 1 <= mu <= 8:
            raise ConfigError(source, "schedule.mu", f"mu {mu} at epoch {epoch} is outside 1..8")
    for name in ("mu", "lr_factor"):
        for i, (start, value) in enumerate(getattr(recipe.schedule, name)):
            problem = number_problem(start, 0, 100_000) or (
                number_problem(value, 0.0, 1000.0, low_open=True) if name == "lr_factor" else None
            )
            if problem:
                raise ConfigError(source, f"schedule.{name}[{i}]", problem)
    for role in ("weights", "activations", "errors", "gradients", "updates"):
        rescale = getattr(recipe.tensors, role).rescale
        if rescale.min_interval > rescale.max_interval:
            raise ConfigError(
                source,
                f"tensors.{role}.rescale.min_interval",
                f"{rescale.min_interval} is above max_interval {rescale.max_interval}",
            )
    from ..algorithms import algorithm_module  # late: the algorithms import config

    module = algorithm_module(recipe.module, source)
    for key, value in recipe.params.items():  # every number finite and of sane size, whatever the module
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problem = number_problem(value, -(2**31), 2**31)
            if problem:
                raise ConfigError(source, f"params.{key}", problem)
    if hasattr(module, "check_recipe"):  # recipe-specific `params`, checked by their module
        module.check_recipe(recipe, source)
    elif recipe.params:
        key = sorted(recipe.params, key=str)[0]
        raise ConfigError(
            source, f"params.{key}", f"unknown for recipe {recipe.name!r} (module {recipe.module!r} takes no params)"
        )
    return recipe


def check_run(run: RunConfig, source) -> None:
    if not SAFE_NAME.match(run.name):
        raise ConfigError(
            source,
            "name",
            f"{run.name!r}: a run name is letters, digits and . _ + - (it names the output directory runs/<name>)",
        )
    if run.out_dir is not None:
        from ..inputs import check_regular

        if not run.out_dir.strip() or "\x00" in run.out_dir:
            raise ConfigError(source, "out_dir", f"{run.out_dir!r} is not a directory path")
        problem = check_regular(run.out_dir, "output")
        if problem is None:
            problem = "is a file"
        if problem != "does not exist" and not Path(run.out_dir).is_dir():
            raise ConfigError(source, "out_dir", f"{run.out_dir!r} {problem.split(':')[0]}: expected a directory")
    t = run.train
    for key, value, low in (
        ("train.epochs", t.epochs, 1),
        ("train.batch_size", t.batch_size, 1),
        ("train.eval_batch_size", t.eval_batch_size, 1),
        ("train.checkpoint_every_steps", t.checkpoint_every_steps, 0),
    ):
        if value < low:
            raise ConfigError(source, key, f"{value} must be >= {low}")
    classes = run.data.classes
    if classes is not None and (not classes or len(set(classes)) != len(classes) or min(classes) < 0):
        raise ConfigError(source, "data.classes", f"{list(classes)} must be distinct labels >= 0")
    check_data(run.data, source)
    if run.data.dataset == "cifar10" and not run.data.path:
        raise ConfigError(
            source,
            "data.path",
            "dataset cifar10 needs a directory with data_batch_1.bin .. "
            "data_batch_5.bin and test_batch.bin (CIFAR-10's binary version)",
        )
    for key, value in (("data.train_limit", run.data.train_limit), ("data.test_limit", run.data.test_limit)):
        if value is not None and value < 1:
            raise ConfigError(source, key, f"{value} must be >= 1")
    from ..memory import source_from_config  # late: the memory layer is not needed to read YAML

    source_from_config(run.memory, source)
    try:
        load_device(run.scheduler.device)
    except ConfigError as exc:
        raise ConfigError(source, "scheduler.device", f"{run.scheduler.device!r}: {exc}") from None
    if run.scheduler.micro_batches != "auto" and run.scheduler.micro_batches < 1:
        raise ConfigError(source, "scheduler.micro_batches", f"{run.scheduler.micro_batches} must be >= 1 or auto")
    from ..energy import spec_problem  # late: energy imports errors only

    if spec_problem(run.energy):
        raise ConfigError(source, "energy", spec_problem(run.energy))
    check_model(run, source)


def check_data(data, source) -> None:
    """One source at a time, and the keys that go with it."""

    def own(section):
        return [key for key in ("folder", "npz", "npy") if getattr(section, key)]

    mine = own(data)
    if len(mine) > 1:
        raise ConfigError(source, f"data.{mine[1]}", f"give one of data.folder, data.npz, data.npy (also {mine[0]})")
    if mine and (data.dataset or data.path):
        key = "data.dataset" if data.dataset else "data.path"
        raise ConfigError(source, key, f"is for a stored dataset; data.{mine[0]} names your own data")
    if data.test is not None:
        if not mine:
            raise ConfigError(source, "data.test", "a test source goes with data.folder, data.npz or data.npy")
        if len(own(data.test)) != 1:
            raise ConfigError(source, "data.test", "give one of folder, npz, npy")
        if data.test_fraction:
            raise ConfigError(source, "data.test_fraction", "the test data is data.test; give one of the two")
    if data.test_fraction and not mine:
        raise ConfigError(
            source,
            "data.test_fraction",
            f"{data.dataset or 'fashion-mnist'} has its own test "
            "split; test_fraction splits your own data (data.folder, npz, npy)",
        )
    if (data.test_fraction or 0) + (data.val_fraction or 0) >= 1:
        raise ConfigError(
            source,
            "data.val_fraction",
            f"{data.val_fraction} with test_fraction {data.test_fraction} leaves nothing to train on",
        )
    problem = data.augment.problem()
    if problem:
        raise ConfigError(source, f"data.augment.{problem[0]}", problem[1])
    if data.normalize is not None:
        problem = data.normalize.problem()
        if problem:
            raise ConfigError(source, f"data.normalize.{problem[0]}", problem[1])


def check_model(run: RunConfig, source) -> None:
    """The model section builds a model and train.freeze names its layers (else ConfigError).
    A model file (model.onnx) is read when the Trainer starts, before any data loads: a run
    config may name a file an earlier step of a workflow writes."""
    from ..interchange import check_section, frozen_layers  # late: it reads model files
    from ..interchange import resolve_model as resolve

    if run.model.num_classes is not None and run.model.num_classes < 1:
        raise ConfigError(source, "model.num_classes", f"{run.model.num_classes} must be >= 1")
    check_section(run.model, source)
    if run.model.onnx is None:
        model, _ = resolve(run.model, source)
        frozen_layers(model, run.train.freeze, source)
