"""The recipe settings an export writes into its graph, against the ones the checkpoint was
trained with (train/checkpoints.py stores them resolved). FP8's chunk size, FP16 edge layers
and chunk sums are read from the checkpoint (onnx_emulated.Grids); the settings below are
fixed in the graphs (onnx_emulated.py, onnx_mls.py, onnx_niti.py), so a checkpoint trained
with another value is refused by name rather than exported wrongly. A checkpoint written
before checkpoints kept their settings exports with the recipe's defaults, and says so.
tests/interchange/test_recipe_settings.py keeps this table equal to configs/algorithms/."""

from __future__ import annotations

import warnings

from ..errors import CheckpointError

#: recipe -> dotted setting -> the value the export's graph computes with
FIXED = {
    "niti": {"tensors.activations.bits": 8, "tensors.weights.bits": 8, "tensors.activations.rounding": "round"},
    "octo": {"tensors.activations.bits": 8, "tensors.weights.bits": 8},
    "afp": {"tensors.activations.bits": 8, "tensors.weights.bits": 8},
    "wageubn": {"tensors.activations.bits": 8, "tensors.weights.bits": 8, "params.first_last": "int8"},
    "mls": {
        "tensors.activations.bits": 8,
        "tensors.weights.bits": 8,
        "tensors.activations.group_size": 16,
        "tensors.weights.group_size": 16,
        "params.group_bits": 2,
    },
    "fp8": {"tensors.activations.bits": 8, "tensors.activations.exponent_bits": 5},
}
#: FP8's settings the export reads, with the recipe file's defaults (for older checkpoints)
FP8_DEFAULTS = {"chunk_size": 64, "first_last_fp16": True, "chunk_sum": "fp16"}


def dotted(settings: dict, key: str):
    value = settings
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_export_settings(trained) -> None:
    """Refuse (CheckpointError naming the file, key and value) a checkpoint whose recipe settings
    differ from what the export writes; warn when it has none stored."""
    settings = trained.settings
    if settings is None:
        warnings.warn(
            f"{trained.path}: written before checkpoints kept their recipe's settings; exporting with "
            f"{trained.recipe}'s defaults",
            UserWarning,
            stacklevel=3,
        )
        return
    for key, value in FIXED.get(trained.recipe, {}).items():
        found = dotted(settings, key)
        if found != value:
            raise CheckpointError(
                trained.path,
                f"recipe_settings.{key}",
                f"{found!r}: the export writes {trained.recipe} with {value!r} only",
            )


def fp8_settings(trained) -> dict:
    """FP8's chunk_size, first_last_fp16 and chunk_sum as trained (the defaults for an older checkpoint)."""
    params = dotted(trained.settings or {}, "params") or {}
    return {k: params.get(k, default) for k, default in FP8_DEFAULTS.items()}
