"""Where a run's model comes from: the zoo, an ONNX file, a YAML layer list or a Python
function, chosen by the run's `model:` section. Each gives the same `Model`; downstream
code never learns which.

    model: {name: lenet5, num_classes: 10}                 # the zoo
    model: {onnx: runs/pretrained.onnx, num_classes: 5}    # a file (new head: 5 classes)
    model: {layers: [...], input_shape: [28, 28, 1]}       # layer_spec.py
    model: {factory: "my_models:tiny_cnn"}                 # a function returning a Model

A `factory` module is looked up on sys.path plus the current directory and the run
file's directory; a bare name that is no zoo model is also looked up among the
`dsptrain.models` entry points of installed packages.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from ..errors import ConfigError, UserError
from ..nn import Linear, Model

SOURCES = ("name", "onnx", "layers", "factory")
ENTRY_POINT_GROUP = "dsptrain.models"
DEFAULT_MODEL = "lenet5"


def load_model(path, num_classes: int | None = None, bias: str = "fold", name: str | None = None) -> Model:
    """A Model (with its starting weights) from an ONNX file, e.g. `dsptrain.load_model("m.onnx")`.
    With `num_classes` unlike the file's, the last linear layer is replaced by a new head."""
    from .onnx_import import load_onnx

    model, notes = load_onnx(path, bias, name)
    for note in notes:
        print(f"dsptrain: {path}: {note}", file=sys.stderr)
    model, note = with_head(model, num_classes)
    if note:
        print(f"dsptrain: {path}: {note}", file=sys.stderr)
    return model


def with_head(model: Model, num_classes: int | None) -> tuple[Model, str | None]:
    """`model` with a new classifier head of `num_classes` outputs when that differs; the
    head keeps its layer's name, its weights start from the recipe's initialisation."""
    if num_classes is None or num_classes == model.num_classes:
        return model, None
    head = model.layers[-1]
    if not isinstance(head, Linear):
        raise UserError(
            f"{model.name}: cannot give a new head of {num_classes} classes: the last layer "
            f"{head.name!r} is a {type(head).__name__}, not a linear layer"
        )
    weights = {k: v for k, v in (model.initial_weights or {}).items() if not k.startswith(f"{head.name}.")}
    new = replace(
        model,
        num_classes=num_classes,
        layers=(*model.layers[:-1], Linear(head.name, head.in_features, num_classes)),
        initial_weights=weights or None,
    )
    new.shapes()
    return new, (
        f"new classifier head {head.name!r}: {head.out_features} -> {num_classes} classes, initialised by the recipe"
    )


def check_section(config, source="model") -> None:
    """One source at most, and no key the chosen source does not read (ConfigError)."""
    given = [key for key in SOURCES[1:] if getattr(config, key) is not None]  # `name` may label any
    if len(given) > 1:
        raise ConfigError(source, "model", f"give one of onnx, layers, factory (or a zoo name); got {', '.join(given)}")
    if config.input_shape is not None and config.layers is None:
        raise ConfigError(source, "model.input_shape", "is read only with model.layers")
    if config.bias != "fold" and config.onnx is None:
        raise ConfigError(source, "model.bias", "is read only with model.onnx")


def resolve(config, source="model") -> tuple[Model, list[str]]:
    """(Model, notes for the user) for a run's `model:` section (config.ModelConfig)."""
    check_section(config, source)
    notes = []
    if config.onnx is not None:
        from .onnx_import import load_onnx

        model, notes = load_onnx(config.onnx, config.bias, config.name)
    elif config.layers is not None:
        from .layer_spec import model_from_layers

        return model_from_layers(
            config.name or "custom", config.input_shape, config.layers, config.num_classes, source, "model.layers"
        ), []
    elif config.factory is not None:
        model = _from_factory(config.factory, source)
    else:
        model = _from_zoo(DEFAULT_MODEL if config.name is None else config.name, config.num_classes, source)
    model, note = with_head(model, config.num_classes)
    return model, notes + ([note] if note else [])


def _from_zoo(name, num_classes, source) -> Model:
    from ..models import MODELS

    if name in MODELS:
        model = MODELS[name](num_classes or 10)
        model.shapes()
        return model
    points = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if name in points:
        return _checked(points[name].load()(), f"entry point {name!r}", source, "model.name")
    known = sorted(MODELS) + sorted(points)
    close = difflib.get_close_matches(name, known, n=1)
    hint = (
        f" (did you mean {close[0]!r}?)"
        if close
        else " (or use model.factory: 'module:function', model.onnx, model.layers)"
    )
    raise ConfigError(source, "model.name", f"{name!r} is not one of {', '.join(known)}{hint}")


def _from_factory(spec, source) -> Model:
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise ConfigError(source, "model.factory", f"{spec!r} is not 'module:function'")
    extra = [str(Path.cwd()), str(Path(str(source)).resolve().parent)]
    saved = list(sys.path)
    sys.path[:0] = [p for p in extra if p not in sys.path]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(source, "model.factory", f"{spec!r}: cannot import {module_name!r} ({exc})") from None
    finally:
        sys.path[:] = saved
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ConfigError(source, "model.factory", f"{spec!r}: {module_name} has no function {function!r}")
    return _checked(fn(), spec, source, "model.factory")


def _checked(model, what, source, key) -> Model:
    if not isinstance(model, Model):
        raise ConfigError(source, key, f"{what} returned {type(model).__name__}, not a dsptrain.nn.Model")
    try:
        model.shapes()
    except UserError as exc:
        raise ConfigError(source, key, f"{what}: {exc}") from None
    return model


def frozen_layers(model: Model, patterns, source="train", key="train.freeze") -> frozenset:
    """Names of the layers `patterns` (names or fnmatch globs) select; a pattern selecting
    nothing is a ConfigError listing the layer names."""
    chosen = set()
    names = [layer.name for layer in model.layers]
    for index, pattern in enumerate(patterns or ()):
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ConfigError(
                source, f"{key}[{index}]", f"{pattern!r} matches no layer of {model.name} (layers: {', '.join(names)})"
            )
        chosen.update(hits)
    return frozenset(chosen)
