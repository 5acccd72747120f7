"""The float layers of mobile CNNs that are neither products nor FP32's chain layers:
element-wise nonlinearities (ReLU6 / clip, hard-swish, hard-sigmoid, sigmoid, SiLU,
tanh), the channel-broadcast product of squeeze-excitation (`Mul`), channel concat,
slice and shuffle, and max-pool with padding or ceil_mode. FP32, the emulated recipes
and NITI's float islands lower them alike (their activations there are float32): `FORWARD`
and `BACKWARD` are their entries in each recipe's tables (algorithms/_support.py), `OPS`
the functions of their `fp32.*` op kinds. Not a recipe.

Each op is a plain function `fn(backend, op, env, ctx) -> {tensor: value}` calling the
backend's hooks (backends/base.py declares them, ops_ref.py is their judge); the op's
`hooks` name them so placement asks the backend first. Grouped and dilated convolutions'
weights for the dense product hooks are built here too (`dense_weight`, `grouped_part`).
"""

from __future__ import annotations

import numpy as np

from ..nn import ChannelShuffle, Concat, MaxPool2d, Mul, Nonlinearity, SliceChannels


def is_padded_pool(layer) -> bool:
    """A max-pool this module lowers (padding or ceil_mode), not FP32's plain one."""
    return isinstance(layer, MaxPool2d) and bool(layer.padding or layer.ceil_mode)


# ---------------------------------------------------------------- lowering
# Each layer kind's forward (b, layer, x, shape) -> its output and backward (b, layer, err,
# needs_input_error) -> its input's error (algorithms/_support.py), under FP32's op kinds
# (`fp32.*`) whichever float recipe lowers them.


def _out(b, layer, shape) -> str:
    return b.tensor(f"{layer.name}.out", shape, "float32", "activation")


def _err_in(b, layer) -> str:
    x, _ = b.layer_io[layer.name]
    return b.tensor(f"err.{layer.name}", b.tensors[x].shape, "float32", "error")


def act_forward(b, layer, x, shape):
    out = _out(b, layer, shape)
    b.op(
        f"{layer.name}.fwd",
        "fp32.act_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        ("act_f32",),
        function=layer.function,
        params=tuple(layer.params),
    )
    return out


def act_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in = _err_in(b, layer)
    b.op(
        f"{layer.name}.bwd",
        "fp32.act_bwd",
        layer.name,
        "backward",
        (err, x),
        (err_in,),
        ("act_bwd_f32",),
        function=layer.function,
        params=tuple(layer.params),
    )
    return err_in


def mul_forward(b, layer, x, shape):
    out = _out(b, layer, shape)
    name = layer.name
    b.op(f"{name}.fwd", "fp32.mul_fwd", name, "forward", b.layer_inputs[name], (out,), ("mul_f32",))
    return out


def mul_backward(b, layer, err, needs_input_error):
    """One error per input (None where none is needed)."""
    inputs, errs = _input_errors(b, layer, needs_input_error)
    b.op(
        f"{layer.name}.bwd",
        "fp32.mul_bwd",
        layer.name,
        "backward",
        (err, *inputs),
        tuple(e for e in errs if e is not None),
        ("mul_bwd_f32",),
        wanted=needs_input_error,
    )
    return errs


def concat_forward(b, layer, x, shape):
    out = _out(b, layer, shape)
    name = layer.name
    b.op(f"{name}.fwd", "fp32.concat_fwd", name, "forward", b.layer_inputs[name], (out,), ("concat_channels",))
    return out


def concat_backward(b, layer, err, needs_input_error):
    """One error per input (None where none is needed): the error's channels each input gave."""
    inputs, errs = _input_errors(b, layer, needs_input_error)
    b.op(
        f"{layer.name}.bwd",
        "fp32.concat_bwd",
        layer.name,
        "backward",
        (err,),
        tuple(e for e in errs if e is not None),
        ("slice_channels",),
        bounds=_concat_bounds(b, inputs),
        wanted=needs_input_error,
    )
    return errs


def _input_errors(b, layer, needs_input_error) -> tuple:
    """(the layer's inputs, an error tensor for each input that needs one, else None)."""
    inputs = b.layer_inputs[layer.name]
    errs = tuple(
        b.tensor(f"err.{layer.name}.{i}", b.tensors[t].shape, "float32", "error") if needed else None
        for i, (t, needed) in enumerate(zip(inputs, needs_input_error))
    )
    return inputs, errs


def slice_forward(b, layer, x, shape):
    out = _out(b, layer, shape)
    b.op(
        f"{layer.name}.fwd",
        "fp32.slice_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        ("slice_channels",),
        start=layer.start,
        stop=layer.stop,
    )
    return out


def slice_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in = _err_in(b, layer)
    b.op(
        f"{layer.name}.bwd",
        "fp32.slice_bwd",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        ("pad_channels",),
        start=layer.start,
        channels=b.tensors[x].shape[-1],
    )
    return err_in


def shuffle_forward(b, layer, x, shape):
    out = _out(b, layer, shape)
    name = layer.name
    b.op(f"{name}.fwd", "fp32.shuffle", name, "forward", (x,), (out,), ("channel_shuffle",), groups=layer.groups)
    return out


def shuffle_backward(b, layer, err, needs_input_error):
    """The inverse shuffle: C / groups groups."""
    x, _ = b.layer_io[layer.name]
    err_in = _err_in(b, layer)
    b.op(
        f"{layer.name}.bwd",
        "fp32.shuffle",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        ("channel_shuffle",),
        groups=b.tensors[x].shape[-1] // layer.groups,
    )
    return err_in


def maxpool_pad_forward(b, layer, x, shape):
    """A max-pool with padding or ceil_mode (`is_padded_pool`: _chain_layers.maxpool_forward sends it here)."""
    out = _out(b, layer, shape)
    b.tensor(f"{layer.name}.argmax", shape, "uint8", "saved")
    b.op(
        f"{layer.name}.fwd",
        "fp32.maxpool_pad_fwd",
        layer.name,
        "forward",
        (x,),
        (out, f"{layer.name}.argmax"),
        ("maxpool_pad_f32",),
        **_pool_attrs(layer, b.tensors[x].shape),
    )
    return out


def maxpool_pad_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in = _err_in(b, layer)
    b.op(
        f"{layer.name}.bwd",
        "fp32.maxpool_pad_bwd",
        layer.name,
        "backward",
        (err, f"{layer.name}.argmax"),
        (err_in,),
        ("maxpool_pad_bwd_f32",),
        **_pool_attrs(layer, b.tensors[x].shape),
    )
    return err_in


FORWARD = {
    Nonlinearity: act_forward,
    Mul: mul_forward,
    Concat: concat_forward,
    SliceChannels: slice_forward,
    ChannelShuffle: shuffle_forward,
}
BACKWARD = {
    Nonlinearity: act_backward,
    Mul: mul_backward,
    Concat: concat_backward,
    SliceChannels: slice_backward,
    ChannelShuffle: shuffle_backward,
}


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


OPS = {
    "fp32.act_fwd": act_fwd,
    "fp32.act_bwd": act_bwd,
    "fp32.mul_fwd": mul_fwd,
    "fp32.mul_bwd": mul_bwd,
    "fp32.concat_fwd": concat_fwd,
    "fp32.concat_bwd": concat_bwd,
    "fp32.slice_fwd": slice_fwd,
    "fp32.slice_bwd": slice_bwd,
    "fp32.shuffle": shuffle,
    "fp32.maxpool_pad_fwd": maxpool_pad_fwd,
    "fp32.maxpool_pad_bwd": maxpool_pad_bwd,
}


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
