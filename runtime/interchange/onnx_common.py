"""What every ONNX operator handler shares: the import's state, the error naming the node,
and the checks and emitters handlers use (onnx_ops.py, onnx_branches.py, onnx_shapes.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..nn import INPUT


class ModelFileError(UserError):
    """An ONNX file dsptrain cannot import; the message names the file, node and op."""


@dataclass
class Activation:
    """An activation: the engine layer producing it and its ONNX shape (C, H, W) or (F,)."""

    layer: str  # engine layer name, or INPUT
    onnx_shape: tuple  # per sample, ONNX layout
    engine_shape: tuple  # per sample, engine layout
    flat_from: tuple | None = None  # (C, H, W) when the vector is a Flatten of that image


@dataclass
class ImportState:
    path: str
    bias: str
    layers: list = field(default_factory=list)
    weights: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    values: dict = field(default_factory=dict)  # ONNX tensor name -> Activation or np.ndarray
    pending_bias: dict = field(default_factory=dict)  # layer name -> (node label, bias vector)
    names: set = field(default_factory=set)
    consumers: dict = field(default_factory=dict)  # ONNX tensor name -> op types of the nodes reading it

    @property
    def last(self) -> str:
        return self.layers[-1].name if self.layers else INPUT

    def fail(self, node, message) -> ModelFileError:
        return ModelFileError(f"{self.path}: node {label(node)}: {message}")


def label(node) -> str:
    return f"{node.name or '(unnamed)'!r} ({node.op_type})"


def onnx_module():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401
    except ImportError as exc:  # a dependency in pyproject.toml; only a broken install lacks it
        raise UserError(f"ONNX import needs the onnx package ({exc}); pip install onnx") from None
    return onnx


def attrs_of(node) -> dict:
    helper = onnx_module().helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


# ---------------------------------------------------------------- helpers for handlers


def layer_name(state, node, hint: str | None) -> str:
    """A readable, unique layer name: the weight's name without '.weight' (PyTorch's module
    path), else the node's name without its op type ('/features/3/Relu' -> 'features.3'),
    else the op type and a number."""
    if hint and hint.endswith(".weight"):
        base = hint[: -len(".weight")]
    else:
        parts = [p for p in (node.name or "").split("/") if p]
        if len(parts) > 1 and parts[-1].split("_")[0] == node.op_type:
            parts = parts[:-1]
        base = ".".join(parts)
    base = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in base) or node.op_type.lower()
    name, n = base, 1
    while name in state.names or name == INPUT:
        n += 1
        name = f"{base}_{n}"
    state.names.add(name)
    return name


def act_of(state, node, index=0) -> Activation:
    value = state.values.get(node.input[index]) if index < len(node.input) else None
    if not isinstance(value, Activation):
        raise state.fail(
            node,
            f"input {index} ({node.input[index] if index < len(node.input) else 'missing'!r}) "
            f"must be an activation, got a constant or nothing",
        )
    return value


def const_of(state, node, index, what) -> np.ndarray:
    value = state.values.get(node.input[index]) if index < len(node.input) and node.input[index] else None
    if not isinstance(value, np.ndarray):
        raise state.fail(node, f"{what} (input {index}) must be an initializer or Constant")
    return value


def check_attrs(state, node, attrs, allowed: dict):
    """Refuse attributes this importer does not read, or values other than the allowed ones."""
    for key, value in attrs.items():
        if key not in allowed:
            raise state.fail(node, f"attribute {key}={value!r} is not supported")
        ok = allowed[key]
        if ok is not None and not ok(value):
            raise state.fail(node, f"attribute {key}={value!r} is not supported")


def emit(state, node, layer, shape_onnx, shape_engine, flat_from=None):
    """Append `layer`, reading the previous layer's output (checked), and bind the node's output."""
    state.layers.append(layer)
    state.values[node.output[0]] = Activation(layer.name, shape_onnx, shape_engine, flat_from)


def reads_previous(state, node, x: Activation):
    if x.layer != state.last:
        raise state.fail(
            node,
            f"reads {x.layer!r}, not the layer just before it ({state.last!r}); dsptrain "
            f"layers other than Conv and Add read the previous layer",
        )


def image_of(state, node, x: Activation):
    if len(x.onnx_shape) != 3:
        raise state.fail(node, f"expects an image (C, H, W), got shape {x.onnx_shape}")
    return x.onnx_shape


def square(state, node, key, values, allow_one=True):
    values = list(values)
    if len(values) != 2 or values[0] != values[1]:
        raise state.fail(node, f"{key}={values} is not supported: only square 2-D {key}")
    return int(values[0])


def pads_of(state, node, attrs) -> int:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
        raise state.fail(node, f"auto_pad={attrs['auto_pad']!r} is not supported (give explicit pads)")
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4 or len(set(pads)) != 1:
        raise state.fail(node, f"pads={pads} is not supported: only equal padding on every side")
    return int(pads[0])
