"""ONNX nodes of the mobile CNNs' layers for onnx_export.py (float exports; NITI does not
lower them): activations, the channel-scale Mul, Concat, a channel Slice and the
Reshape-Transpose-Reshape channel shuffle, the forms onnx_import.py reads back."""

from __future__ import annotations

import numpy as np

from ..nn import ChannelShuffle, Concat, Mul, Nonlinearity, SliceChannels

LAYERS = (Nonlinearity, Mul, Concat, SliceChannels, ChannelShuffle)


def export(g, layer, x, out_of, shape_of, out) -> str:
    """Append `layer`'s nodes reading `x` (its first input; `out_of` the others), writing `out`."""
    name = layer.name
    if isinstance(layer, Nonlinearity):
        f, p = layer.function, layer.params
        if f == "clip":
            low = g.const(f"{name}.min", np.float32(p[0]))
            high = g.const(f"{name}.max", np.float32(p[1]))
            return g.node("Clip", (x, low, high), out, name)
        if f == "hardsigmoid":
            return g.node("HardSigmoid", (x,), out, name, alpha=float(p[0]), beta=float(p[1]))
        if f == "silu":  # as PyTorch exports it: x * Sigmoid(x)
            return g.node("Mul", (x, g.node("Sigmoid", (x,), f"{name}.sigmoid", f"{name}.sigmoid")), out, name)
        op = {"hardswish": "HardSwish", "sigmoid": "Sigmoid", "tanh": "Tanh"}[f]
        return g.node(op, (x,), out, name)
    if isinstance(layer, Mul):
        return g.node("Mul", tuple(out_of[n] for n in layer.inputs), out, name)
    if isinstance(layer, Concat):
        return g.node("Concat", tuple(out_of[n] for n in layer.inputs), out, name, axis=1)
    if isinstance(layer, SliceChannels):
        bounds = [
            g.const(f"{name}.{k}", np.array([v], np.int64))
            for k, v in (("starts", layer.start), ("ends", layer.stop), ("axes", 1))
        ]
        return g.node("Slice", (x, *bounds), out, name)
    h, w, c = shape_of
    grouped = g.const(f"{name}.grouped", np.array([0, layer.groups, c // layer.groups, h, w], np.int64))
    flat = g.const(f"{name}.shape", np.array([0, c, h, w], np.int64))
    view = g.node("Reshape", (x, grouped), f"{name}.grouped_view", f"{name}.view")
    swapped = g.node("Transpose", (view,), f"{name}.swapped", f"{name}.transpose", perm=[0, 2, 1, 3, 4])
    return g.node("Reshape", (swapped, flat), out, name)
