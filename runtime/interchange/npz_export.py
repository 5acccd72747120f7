"""A trained checkpoint as a plain npz that any NumPy reads (np.load, no pickle).

Layout, version 1:

| key | dtype, shape | holds |
|---|---|---|
| `__model__` | str, () | JSON: format "dsptrain-npz", version 1, name, recipe, input_shape [H, W, C], input ("(pixel - 128) / 128, NHWC"), num_classes, bn_epsilon (the default; a batchnorm item of `layers` with its own `eps` uses that), layers (the flat list of `layer_spec.layers_of`: kind, name and parameters of each layer, in order), classes (the class names by label, when the data had them: an image folder's subfolders) |
| `<layer>.weight` | float32 | conv: (out, kh, kw, in) OHWI; linear: (out, in), a flattened input's features in (H, W, C) order |
| `<layer>.bias` | float32, (out,) | only for a conv or linear layer with a bias (float recipes): added to its output |
| `<layer>.weight_q` | int8 | only for recipes that keep int8 weights (NITI): the stored integers |
| `<layer>.weight_exponent` | int32, () | with `weight_q`: weight = weight_q * 2**weight_exponent, exactly |
| `<bn>.gamma`, `<bn>.beta`, `<bn>.running_mean`, `<bn>.running_var` | float32, (C,) | batch norm: y = gamma * (x - mean) / sqrt(var + eps) + beta |

Layers read the previous layer's output, except a conv with `source` (it reads that
layer's output) and an add (previous output + the output of `skip_from`); `input` names
the model input. Activations are NHWC.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from ..algorithms._float_layers import BN_EPS
from ..checkpoint import atomic_write
from ..nn import BatchNorm2d, has_bias
from ..numerics import QTensor
from .layer_spec import layers_of
from .weights import float_weights

FORMAT, VERSION = "dsptrain-npz", 1


def npz_arrays(trained) -> dict:
    model, state = trained.model, trained.state
    floats = float_weights(state)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": model.name,
        "recipe": trained.recipe,
        "input_shape": list(model.input_shape),
        "input": "(pixel - 128) / 128, NHWC float32",
        "num_classes": model.num_classes,
        "bn_epsilon": BN_EPS,
        "layers": layers_of(model),
    }
    if trained.meta.get("classes"):
        header["classes"] = list(trained.meta["classes"])
    arrays = {"__model__": np.array(json.dumps(header))}
    for layer in model.layers:
        if hasattr(layer, "weight_shape"):
            arrays[f"{layer.name}.weight"] = floats[f"{layer.name}.w"]
            if has_bias(layer):
                arrays[f"{layer.name}.bias"] = floats[f"{layer.name}.b"]
            value = state[f"{layer.name}.w"]
            if isinstance(value, QTensor) and value.q.dtype == np.int8:
                arrays[f"{layer.name}.weight_q"] = value.q
                arrays[f"{layer.name}.weight_exponent"] = np.array(value.e, np.int32)
        elif isinstance(layer, BatchNorm2d):
            for key, out in (("gamma", "gamma"), ("beta", "beta"), ("mean", "running_mean"), ("var", "running_var")):
                arrays[f"{layer.name}.{out}"] = floats[f"{layer.name}.{key}"]
    return arrays


def write_npz(trained, out) -> str:
    arrays = npz_arrays(trained)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write(Path(out), lambda f: f.write(buffer.getvalue()))
    return f"wrote {out}: {trained.model.name} ({trained.recipe}) as npz v{VERSION}, {len(arrays) - 1} arrays"
