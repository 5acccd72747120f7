"""The float layers of mobile CNNs that are neither products nor FP32's chain layers:
element-wise nonlinearities (ReLU6 / clip, hard-swish, hard-sigmoid, sigmoid, SiLU,
tanh), the channel-broadcast product of squeeze-excitation (`Mul`), channel concat,
slice and shuffle, and max-pool with padding or ceil_mode. FP32 and the emulated
recipes lower them alike (their activations between products are float32). Not a recipe.

Each op is a plain function `fn(backend, op, env, ctx) -> {tensor: value}` calling the
backend's hooks (backends/base.py declares them, ops_ref.py is their judge); the op's
`hooks` name them so placement asks the backend first. Grouped and dilated convolutions'
weights for the dense product hooks are built here too (`dense_weight`, `grouped_part`).
"""

from __future__ import annotations

import numpy as np

from ..nn import ChannelShuffle, Concat, MaxPool2d, Mul, Nonlinearity, SliceChannels

LAYERS = (Nonlinearity, Mul, Concat, SliceChannels, ChannelShuffle)
_MOVE = ("concat_channels", "slice_channels", "pad_channels", "channel_shuffle")


def is_padded_pool(layer) -> bool:
    """A max-pool this module lowers (padding or ceil_mode), not FP32's plain one."""
    return isinstance(layer, MaxPool2d) and bool(layer.padding or layer.ceil_mode)


# ---------------------------------------------------------------- lowering


def forward(b, layer, x, shape, prefix) -> str | None:
    """The output of `layer`'s forward op under kinds `prefix.*`, or None for a layer of another module."""
    if not (isinstance(layer, LAYERS) or is_padded_pool(layer)):
        return None
    name = layer.name
    out = b.tensor(f"{name}.out", shape, "float32", "activation")
    if isinstance(layer, Nonlinearity):
        b.op(
            f"{name}.fwd",
            f"{prefix}.act_fwd",
            name,
            "forward",
            (x,),
            (out,),
            ("act_f32",),
            function=layer.function,
            params=tuple(layer.params),
        )
    elif isinstance(layer, Mul):
        b.op(f"{name}.fwd", f"{prefix}.mul_fwd", name, "forward", b.layer_inputs[name], (out,), ("mul_f32",))
    elif isinstance(layer, Concat):
        b.op(f"{name}.fwd", f"{prefix}.concat_fwd", name, "forward", b.layer_inputs[name], (out,), ("concat_channels",))
    elif isinstance(layer, SliceChannels):
        b.op(
            f"{name}.fwd",
            f"{prefix}.slice_fwd",
            name,
            "forward",
            (x,),
            (out,),
            ("slice_channels",),
            start=layer.start,
            stop=layer.stop,
        )
    elif isinstance(layer, ChannelShuffle):
        b.op(
            f"{name}.fwd", f"{prefix}.shuffle", name, "forward", (x,), (out,), ("channel_shuffle",), groups=layer.groups
        )
    else:
        b.tensor(f"{name}.argmax", shape, "uint8", "saved")
        b.op(
            f"{name}.fwd",
            f"{prefix}.maxpool_pad_fwd",
            name,
            "forward",
            (x,),
            (out, f"{name}.argmax"),
            ("maxpool_pad_f32",),
            **_pool_attrs(layer, b.tensors[x].shape),
        )
    return out


def backward(b, layer, err, needs_input_error, prefix):
    """The error of the layer's input (a tuple, one per input, for Mul and Concat; None where
    none is needed), or NotImplemented for a layer of another module."""
    if not (isinstance(layer, LAYERS) or is_padded_pool(layer)):
        return NotImplemented
    name = layer.name
    x, out = b.layer_io[name]
    if isinstance(layer, (Mul, Concat)):
        inputs = b.layer_inputs[name]
        errs = tuple(
            b.tensor(f"err.{name}.{i}", b.tensors[t].shape, "float32", "error") if needed else None
            for i, (t, needed) in enumerate(zip(inputs, needs_input_error))
        )
        outputs = tuple(e for e in errs if e is not None)
        if isinstance(layer, Mul):
            b.op(
                f"{name}.bwd",
                f"{prefix}.mul_bwd",
                name,
                "backward",
                (err, *inputs),
                outputs,
                ("mul_bwd_f32",),
                wanted=needs_input_error,
            )
        else:
            b.op(
                f"{name}.bwd",
                f"{prefix}.concat_bwd",
                name,
                "backward",
                (err,),
                outputs,
                ("slice_channels",),
                bounds=_concat_bounds(b, inputs),
                wanted=needs_input_error,
            )
        return errs
    err_in = b.tensor(f"err.{name}", b.tensors[x].shape, "float32", "error")
    if isinstance(layer, Nonlinearity):
        b.op(
            f"{name}.bwd",
            f"{prefix}.act_bwd",
            name,
            "backward",
            (err, x),
            (err_in,),
            ("act_bwd_f32",),
            function=layer.function,
            params=tuple(layer.params),
        )
    elif isinstance(layer, SliceChannels):
        b.op(
            f"{name}.bwd",
            f"{prefix}.slice_bwd",
            name,
            "backward",
            (err,),
            (err_in,),
            ("pad_channels",),
            start=layer.start,
            channels=b.tensors[x].shape[-1],
        )
    elif isinstance(layer, ChannelShuffle):  # the inverse shuffle: C / groups groups
        b.op(
            f"{name}.bwd",
            f"{prefix}.shuffle",
            name,
            "backward",
            (err,),
            (err_in,),
            ("channel_shuffle",),
            groups=b.tensors[x].shape[-1] // layer.groups,
        )
    else:
        b.op(
            f"{name}.bwd",
            f"{prefix}.maxpool_pad_bwd",
            name,
            "backward",
            (err, f"{name}.argmax"),
            (err_in,),
            ("maxpool_pad_bwd_f32",),
            **_pool_attrs(layer, b.tensors[x].shape),
        )
    return err_in


def _concat_bounds(b, inputs) -> tuple:
    bounds, start = [], 0
    for t in inputs:
        stop = start + b.tensors[t].shape[-1]
        bounds.append((start, stop))
        start = stop
    return tuple(bounds)


def _pool_attrs(layer, x_shape) -> dict:
    """The pool's windows over an input padded with -inf (`pad` cells before each axis, and
    after it as many as the out_hw windows reach: ceil_mode's partial windows)."""
    h, w = x_shape[1:3]
    oh, ow = layer.out_shape((h, w, x_shape[3]))[:2]
    return dict(kernel=layer.kernel, stride=layer.stride, pad=layer.padding, in_hw=(h, w), out_hw=(oh, ow))


# ---------------------------------------------------------------- running ops


def act_fwd(backend, op, env, ctx):
    return {op.outputs[0]: backend.act_f32(env[op.inputs[0]], op.attrs["function"], op.attrs["params"])}


def act_bwd(backend, op, env, ctx):
    err, x = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.act_bwd_f32(err, x, op.attrs["function"], op.attrs["params"])}


def mul_fwd(backend, op, env, ctx):
    return {op.outputs[0]: backend.mul_f32(env[op.inputs[0]], env[op.inputs[1]])}


def mul_bwd(backend, op, env, ctx):
    dx, dg = backend.mul_bwd_f32(env[op.inputs[0]], env[op.inputs[1]], env[op.inputs[2]])
    return dict(zip(op.outputs, (d for d, wanted in zip((dx, dg), op.attrs["wanted"]) if wanted)))


def concat_fwd(backend, op, env, ctx):
    return {op.outputs[0]: backend.concat_channels([env[t] for t in op.inputs])}


def concat_bwd(backend, op, env, ctx):
    err = env[op.inputs[0]]
    wanted = [bounds for bounds, w in zip(op.attrs["bounds"], op.attrs["wanted"]) if w]
    return {out: backend.slice_channels(err, start, stop) for out, (start, stop) in zip(op.outputs, wanted)}


def slice_fwd(backend, op, env, ctx):
    return {op.outputs[0]: backend.slice_channels(env[op.inputs[0]], op.attrs["start"], op.attrs["stop"])}


def slice_bwd(backend, op, env, ctx):
    return {op.outputs[0]: backend.pad_channels(env[op.inputs[0]], op.attrs["start"], op.attrs["channels"])}


def shuffle(backend, op, env, ctx):
    return {op.outputs[0]: backend.channel_shuffle(env[op.inputs[0]], op.attrs["groups"])}


def maxpool_pad_fwd(backend, op, env, ctx):
    a = op.attrs
    y, argmax = backend.maxpool_pad_f32(env[op.inputs[0]], a["kernel"], a["stride"], a["pad"], a["out_hw"])
    return {op.outputs[0]: y, op.outputs[1]: argmax}


def maxpool_pad_bwd(backend, op, env, ctx):
    a = op.attrs
    return {
        op.outputs[0]: backend.maxpool_pad_bwd_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["kernel"], a["stride"], a["pad"], a["in_hw"]
        )
    }


def make_ops(prefix: str) -> dict:
    """This module's op functions under `prefix.` kinds."""
    ops = dict(
        act_fwd=act_fwd,
        act_bwd=act_bwd,
        mul_fwd=mul_fwd,
        mul_bwd=mul_bwd,
        concat_fwd=concat_fwd,
        concat_bwd=concat_bwd,
        slice_fwd=slice_fwd,
        slice_bwd=slice_bwd,
        shuffle=shuffle,
        maxpool_pad_fwd=maxpool_pad_fwd,
        maxpool_pad_bwd=maxpool_pad_bwd,
    )
    return {f"{prefix}.{name}": fn for name, fn in ops.items()}


# ---------------------------------------------------------------- grouped and dilated weights


def dense_weight(w: np.ndarray, groups: int, dilation: int) -> np.ndarray:
    """The dense (O, KH', KW', C) weight of a grouped and/or dilated conv's (O, KH, KW, C / groups):
    zeros outside each group's block of input channels and between dilated taps, so the
    dense product hooks compute the same sums (each output adds only exact zeros besides)."""
    o, kh, kw, per = w.shape
    span_h, span_w = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    dense = np.zeros((o, span_h, span_w, per * groups), w.dtype)
    out_per = o // groups
    for g in range(groups):
        rows = slice(g * out_per, (g + 1) * out_per)
        dense[rows, ::dilation, ::dilation, g * per : (g + 1) * per] = w[rows]
    return dense


def grouped_part(dense: np.ndarray, groups: int, dilation: int) -> np.ndarray:
    """The (O, KH, KW, C / groups) taps of a dense weight gradient that `dense_weight` placed."""
    o, _, _, c = dense.shape
    per, out_per = c // groups, o // groups
    taps = dense[:, ::dilation, ::dilation, :]
    return np.ascontiguousarray(
        np.concatenate([taps[g * out_per : (g + 1) * out_per, :, :, g * per : (g + 1) * per] for g in range(groups)])
    )
