"""A checkpoint (or the run directory holding one) as the trained model: the Model
rebuilt from the layer list the trainer stored beside the weights, and the state.
Export reads only this, never a live trainer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, DataError
from ..nn import BatchNorm2d, Model, has_bias

CHECKPOINT_NAME = "checkpoint.npz"


@dataclass
class TrainedModel:
    model: Model
    state: dict  # tensor name -> QTensor (integer recipes) or ndarray
    recipe: str
    path: Path
    meta: dict
    settings: dict | None = None  # the recipe's resolved settings (None: an older checkpoint)


def read_checkpoint(path) -> TrainedModel:
    from .. import checkpoint
    from .layer_spec import from_description

    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise DataError(f"{path}: no such checkpoint (give a checkpoint.npz or the run directory holding one)")
    state, meta = checkpoint.load(path)
    spec = meta.get("model_spec")
    if spec is not None:
        model = from_description(spec, path)
    else:  # written before checkpoints described their model: a zoo model by name
        from ..models import MODELS

        if meta.get("model") not in MODELS:
            raise DataError(f"{path}: the checkpoint names model {meta.get('model')!r} and has no layer list")
        head = [k for k in state if k.endswith(".w")][-1]
        model = MODELS[meta["model"]](int(np.shape(getattr(state[head], "q", state[head]))[0]))
    for layer in model.layers:
        needed = (
            [f"{layer.name}.{k}" for k in ("gamma", "beta", "mean", "var")]
            if isinstance(layer, BatchNorm2d)
            else [f"{layer.name}.w", *([f"{layer.name}.b"] if has_bias(layer) else [])]
            if hasattr(layer, "weight_shape")
            else []
        )
        for name in needed:
            if name not in state:
                raise DataError(f"{path}: checkpoint lacks {name} (layer {layer.name} of {model.name})")
    settings = meta.get("recipe_settings")
    if settings is not None and not (isinstance(settings, dict) and settings.get("name") == meta.get("recipe")):
        raise CheckpointError(
            path, "recipe_settings", f"{_short(settings)} is not the settings of recipe {meta.get('recipe')!r}"
        )
    return TrainedModel(model, state, meta.get("recipe", "?"), path, meta, settings)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
