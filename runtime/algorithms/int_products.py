"""NITI's int8 products: dense, dilated, depthwise and grouped convolutions and linear layers,
each kind's forward and backward lowering beside the op functions that run them (`niti.conv_*`,
`niti.dilconv_*`, `niti.dwconv_*`, `niti.grpconv_*` (any other groups > 1, dilated depthwise
included: backends/grouped_hooks.py), `niti.linear_*`). A product accumulates in int32 and is requantized to int8
by the range of its result (the backends' `*_requant_s8` hooks, shift noted for the
executor); a weight gradient stays int32 for the update (`niti.update`, niti.py). A product
with a bias keeps its exact int32 sums and adds the float bias after (`niti.conv_acc`,
`niti.linear_acc`, then int_mixed.forward_bias). Not a recipe: niti.py lowers through it.
"""

from __future__ import annotations

import numpy as np

from ..nn import Linear, has_bias
from ..numerics import QTensor
from . import int_mixed

_PRODUCT = ("absmax", "shift_round")  # the range and shift hooks a requantized product adds

# ---------------------------------------------------------------- lowering


def grouped(layer) -> bool:
    """A conv NITI runs on the grouped hooks (grouped_hooks.py): groups > 1, except an undilated
    depthwise one, which has its own kinds (niti.dwconv_*) and kernels."""
    return layer.groups > 1 and not (layer.depthwise and layer.dilation == 1)


def conv_forward(b, layer, x, shape):
    """A dense, dilated, depthwise or grouped conv."""
    if has_bias(layer):
        return _forward_biased(b, layer, x, shape)
    out = f"{layer.name}.out"
    w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
    b.tensor(out, shape, "int8", "activation")
    if grouped(layer):
        b.op(
            f"{layer.name}.fwd",
            "niti.grpconv_fwd",
            layer.name,
            "forward",
            (x, w),
            (out,),
            ("conv2d_grouped_s8", *_PRODUCT),
            _conv_macs(layer, shape),
            stride=layer.stride,
            pad=layer.padding,
            dilation=layer.dilation,
            groups=layer.groups,
            depthwise=layer.depthwise,
            mode=b.recipe.tensors.activations.rounding,
            workspace=_grouped_bytes(layer, b.tensors[x].shape, shape),
            product=("conv", "forward"),  # the CPU sizes its scratch from it (cpu_scratch.py)
        )
    elif layer.depthwise:
        b.op(
            f"{layer.name}.fwd",
            "niti.dwconv_fwd",
            layer.name,
            "forward",
            (x, w),
            (out,),
            ("dwconv2d_s8", *_PRODUCT),
            _conv_macs(layer, shape),
            stride=layer.stride,
            pad=layer.padding,
            mode=b.recipe.tensors.activations.rounding,
        )
    elif layer.dilation > 1:
        b.op(
            f"{layer.name}.fwd",
            "niti.dilconv_fwd",
            layer.name,
            "forward",
            (x, w),
            (out,),
            ("conv2d_dilated_s8", *_PRODUCT),
            _conv_macs(layer, shape),
            stride=layer.stride,
            pad=layer.padding,
            dilation=layer.dilation,
            mode=b.recipe.tensors.activations.rounding,
            workspace=_patch_bytes(layer, shape),
        )
    else:
        b.op(
            f"{layer.name}.fwd",
            "niti.conv_fwd",
            layer.name,
            "forward",
            (x, w),
            (out,),
            ("conv2d_s8", *_PRODUCT),
            _conv_macs(layer, shape),
            stride=layer.stride,
            pad=layer.padding,
            mode=b.recipe.tensors.activations.rounding,
            product=("conv", "forward"),
        )
    return out


def linear_forward(b, layer, x, shape):
    if has_bias(layer):
        return _forward_biased(b, layer, x, shape)
    out = f"{layer.name}.out"
    w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
    b.tensor(out, shape, "int8", "activation")
    b.op(
        f"{layer.name}.fwd",
        "niti.linear_fwd",
        layer.name,
        "forward",
        (x, w),
        (out,),
        ("gemm_s8", *_PRODUCT),
        shape[0] * layer.in_features * layer.out_features,
        mode=b.recipe.tensors.activations.rounding,
        product=("linear", "forward"),
    )
    return out


def _conv_macs(layer, shape) -> int:
    return int(np.prod(shape)) * int(np.prod(layer.weight_shape[1:]))


def _patch_bytes(layer, shape) -> tuple[int, int]:
    """(bytes per row, bytes) a dilated conv's gathered int8 patches take (base.py's composition):
    one row of patches per output pixel, KH*KW*C bytes each, and the weight's copy."""
    return int(np.prod(shape[1:3])) * int(np.prod(layer.weight_shape[1:])), int(np.prod(layer.weight_shape))


def _grouped_bytes(layer, in_shape, out_shape) -> tuple[int, int]:
    """(bytes per row, bytes) of a grouped conv's composition (grouped_hooks.py): the groups'
    channel slices of its input (int8) and their int32 results before they are joined; a dilated
    depthwise conv's padded input and its stride-1 sums over every residue class instead."""
    reach = 2 * layer.padding
    padded = (in_shape[1] + reach) * (in_shape[2] + reach) * in_shape[3]
    full = ((out_shape[1] - 1) * layer.stride + 1) * ((out_shape[2] - 1) * layer.stride + 1) * out_shape[3]
    return max(padded, int(np.prod(in_shape[1:]))) + 4 * max(full, int(np.prod(out_shape[1:]))), int(
        np.prod(layer.weight_shape)
    )


def _transposed_patch_bytes(layer, x_shape, err_shape) -> tuple[int, int]:
    """(bytes per row, bytes) of a dilated conv's backward data: err's zero-spread frame and its
    patches, one row per input pixel (base.py's composition), and the flipped taps."""
    reach = layer.span - 1
    frame = (x_shape[1] + reach) * (x_shape[2] + reach) * err_shape[3]
    return frame + int(np.prod(x_shape[1:3])) * layer.kernel**2 * err_shape[3], int(np.prod(layer.weight_shape))


def _forward_biased(b, layer, x, shape):
    """A product with a bias: its exact int32 sums, then float32 with the bias added (int_mixed)."""
    w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
    acc = b.tensor(f"{layer.name}.acc", shape, "int32", "activation")
    if isinstance(layer, Linear):
        b.op(
            f"{layer.name}.fwd",
            "niti.linear_acc",
            layer.name,
            "forward",
            (x, w),
            (acc,),
            ("gemm_s8",),
            shape[0] * layer.in_features * layer.out_features,
        )
    else:
        hook = (
            "conv2d_grouped_s8"
            if grouped(layer)
            else "dwconv2d_s8"
            if layer.depthwise
            else "conv2d_dilated_s8"
            if layer.dilation > 1
            else "conv2d_s8"
        )
        b.op(
            f"{layer.name}.fwd",
            "niti.conv_acc",
            layer.name,
            "forward",
            (x, w),
            (acc,),
            (hook,),
            _conv_macs(layer, shape),
            stride=layer.stride,
            pad=layer.padding,
            depthwise=layer.depthwise,
            dilation=layer.dilation,
            groups=layer.groups,
        )
    return int_mixed.forward_bias(b, layer, acc, shape)


def conv_backward(b, layer, err, needs_input_error):
    """The input's error (requantized to int8), the int32 weight gradient and the update."""
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in, macs = f"err.{layer.name}", b.find(f"{layer.name}.fwd").macs
    if needs_input_error:
        b.tensor(err_in, x_shape, "int8", "error")
        _conv_bwd_data(b, layer, err, err_in, x_shape, macs)
    grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "int32", "grad")
    attrs = dict(stride=layer.stride, pad=layer.padding, kernel=(layer.kernel, layer.kernel))
    if grouped(layer):
        kind, hook, product = "niti.grpconv_bwd_weight", "conv2d_grouped_bwd_weight_s8", ("conv", "backward_weight")
        x_bytes, err_bytes = (int(np.prod(b.tensors[t].shape[1:])) for t in (x, err))
        # the groups' slices of err and x (a dilated depthwise conv: err spread, x padded)
        attrs = dict(attrs, dilation=layer.dilation, groups=layer.groups, depthwise=layer.depthwise)
        attrs["workspace"] = (2 * (x_bytes + err_bytes) * layer.stride**2, 8 * int(np.prod(layer.weight_shape)))
    elif layer.depthwise:
        kind, hook, product = "niti.dwconv_bwd_weight", "dwconv2d_bwd_weight_s8", None
    elif layer.dilation > 1:
        kind, hook, product = "niti.dilconv_bwd_weight", "conv2d_dilated_bwd_weight_s8", None
        # the patches and their transpose, err's transpose
        per_row, _ = _patch_bytes(layer, b.tensors[err].shape)
        attrs = dict(
            workspace=(2 * per_row + int(np.prod(b.tensors[err].shape[1:])), 0), **attrs, dilation=layer.dilation
        )
    else:
        kind, hook, product = "niti.conv_bwd_weight", "conv2d_bwd_weight_s8", ("conv", "backward_weight")
    b.op(
        f"{layer.name}.bwd_weight",
        kind,
        layer.name,
        "backward",
        (err, x),
        (grad,),
        (hook,),
        macs,
        product=product,
        **attrs,
    )
    _update(b, layer, grad)
    return err_in if needs_input_error else None


def _conv_bwd_data(b, layer, err, err_in, x_shape, macs) -> None:
    """The op giving a conv's input error `err_in` (int8): depthwise, dilated or dense."""
    w = f"{layer.name}.w"
    if grouped(layer):
        b.op(
            f"{layer.name}.bwd_data",
            "niti.grpconv_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("conv2d_grouped_bwd_data_s8", *_PRODUCT),
            macs,
            stride=layer.stride,
            pad=layer.padding,
            dilation=layer.dilation,
            groups=layer.groups,
            depthwise=layer.depthwise,
            in_hw=x_shape[1:3],
            mode=b.recipe.tensors.errors.rounding,
            workspace=_grouped_bytes(layer, b.tensors[err].shape, x_shape),
            product=("conv", "backward_data"),
        )
    elif layer.depthwise:
        b.op(
            f"{layer.name}.bwd_data",
            "niti.dwconv_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("dwconv2d_bwd_data_s8", *_PRODUCT),
            macs,
            stride=layer.stride,
            pad=layer.padding,
            in_hw=x_shape[1:3],
            mode=b.recipe.tensors.errors.rounding,
        )
    elif layer.dilation > 1:
        b.op(
            f"{layer.name}.bwd_data",
            "niti.dilconv_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("conv2d_dilated_bwd_data_s8", *_PRODUCT),
            macs,
            stride=layer.stride,
            pad=layer.padding,
            dilation=layer.dilation,
            in_hw=x_shape[1:3],
            mode=b.recipe.tensors.errors.rounding,
            workspace=_transposed_patch_bytes(layer, x_shape, b.tensors[err].shape),
        )
    else:
        b.op(
            f"{layer.name}.bwd_data",
            "niti.conv_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("conv2d_bwd_data_s8", *_PRODUCT),
            macs,
            stride=layer.stride,
            pad=layer.padding,
            in_hw=x_shape[1:3],
            mode=b.recipe.tensors.errors.rounding,
            product=("conv", "backward_data"),
        )


def linear_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in, w, macs = f"err.{layer.name}", f"{layer.name}.w", b.find(f"{layer.name}.fwd").macs
    if needs_input_error:
        b.tensor(err_in, b.tensors[x].shape, "int8", "error")
        b.op(
            f"{layer.name}.bwd_data",
            "niti.linear_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("gemm_s8", *_PRODUCT),
            macs,
            mode=b.recipe.tensors.errors.rounding,
            product=("linear", "backward_data"),
            workspace=(0, b.tensors[w].nbytes),
        )  # w.T made contiguous (linear_bwd_data)
    grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "int32", "grad")
    b.op(
        f"{layer.name}.bwd_weight",
        "niti.linear_bwd_weight",
        layer.name,
        "backward",
        (err, x),
        (grad,),
        ("gemm_s8",),
        macs,
        product=("linear", "backward_weight"),
        # err.T and x.T made contiguous (linear_bwd_weight): their bytes per row
        workspace=(sum(int(np.prod(b.tensors[t].shape[1:])) for t in (err, x)), 0),
    )
    _update(b, layer, grad)
    return err_in if needs_input_error else None


def _update(b, layer, grad) -> None:
    """NITI's update of the int8 weight by the int32 gradient (niti.update, rounding as the gradients)."""
    w = f"{layer.name}.w"
    b.op(
        f"{layer.name}.update",
        "niti.update",
        layer.name,
        "update",
        (w, grad),
        (w,),
        ("niti_update_s8",),
        mode=b.recipe.tensors.gradients.rounding,
    )


# ---------------------------------------------------------------- running ops
# Each op function calls the hook of the backend it is handed (the one the plan placed the
# op on) and maps the op's tensors to the hook's arguments and its result back. A
# requantized product tells the executor its shift (ctx.note_shift): StepStats.shifts,
# adaptive rescaling and the sliced runners read it there.


def rows(x: QTensor) -> np.ndarray:
    """An int8 tensor's values, one row per sample."""
    return x.q.reshape(x.q.shape[0], -1)


def conv_fwd(backend, op, env, ctx) -> dict:
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_requant_s8(x.q, w.q, a["stride"], a["pad"], a["mode"], ctx.rng(op), ctx.given_shift(op))
    return _product(op, ctx, x, w, q, shift)


def dwconv_fwd(backend, op, env, ctx) -> dict:
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.dwconv2d_requant_s8(x.q, w.q, a["stride"], a["pad"], a["mode"], ctx.rng(op), ctx.given_shift(op))
    return _product(op, ctx, x, w, q, shift)


def dilconv_fwd(backend, op, env, ctx) -> dict:
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_dilated_requant_s8(
        x.q, w.q, a["stride"], a["pad"], a["dilation"], a["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, x, w, q, shift)


def grpconv_fwd(backend, op, env, ctx) -> dict:
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_grouped_requant_s8(
        x.q, w.q, a["stride"], a["pad"], a["dilation"], a["groups"], a["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, x, w, q, shift)


def conv_acc(backend, op, env, ctx) -> dict:
    """A biased conv's exact sums (int_mixed.bias_fwd adds the bias in float)."""
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    if a.get("groups", 1) > 1 and not (a["depthwise"] and a["dilation"] == 1):
        sums = backend.conv2d_grouped_s8(x.q, w.q, a["stride"], a["pad"], a["dilation"], a["groups"])
        return {op.outputs[0]: sums}
    if a.get("dilation", 1) > 1:
        return {op.outputs[0]: backend.conv2d_dilated_s8(x.q, w.q, a["stride"], a["pad"], a["dilation"])}
    product = backend.dwconv2d_s8 if a["depthwise"] else backend.conv2d_s8
    return {op.outputs[0]: product(x.q, w.q, a["stride"], a["pad"])}


def linear_acc(backend, op, env, ctx) -> dict:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_s8(rows(x), w.q)}


def linear_fwd(backend, op, env, ctx) -> dict:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    q, shift = backend.gemm_requant_s8(rows(x), w.q, op.attrs["mode"], ctx.rng(op), ctx.given_shift(op))
    return _product(op, ctx, x, w, q, shift)


def conv_bwd_data(backend, op, env, ctx) -> dict:
    err, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_bwd_data_requant_s8(
        err.q, w.q, a["stride"], a["pad"], a["in_hw"], a["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, err, w, q, shift)


def dwconv_bwd_data(backend, op, env, ctx) -> dict:
    err, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.dwconv2d_bwd_data_requant_s8(
        err.q, w.q, a["stride"], a["pad"], a["in_hw"], a["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, err, w, q, shift)


def dilconv_bwd_data(backend, op, env, ctx) -> dict:
    err, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_dilated_bwd_data_requant_s8(
        err.q, w.q, a["stride"], a["pad"], a["dilation"], a["in_hw"], a["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, err, w, q, shift)


def grpconv_bwd_data(backend, op, env, ctx) -> dict:
    err, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    q, shift = backend.conv2d_grouped_bwd_data_requant_s8(
        err.q,
        w.q,
        a["stride"],
        a["pad"],
        a["dilation"],
        a["groups"],
        a["in_hw"],
        a["mode"],
        ctx.rng(op),
        ctx.given_shift(op),
    )
    return _product(op, ctx, err, w, q, shift)


def linear_bwd_data(backend, op, env, ctx) -> dict:
    err, w = env[op.inputs[0]], env[op.inputs[1]]
    q, shift = backend.gemm_requant_s8(
        rows(err), np.ascontiguousarray(w.q.T), op.attrs["mode"], ctx.rng(op), ctx.given_shift(op)
    )
    return _product(op, ctx, err, w, q, shift)


def _product(op, ctx, a: QTensor, b: QTensor, q, shift) -> dict:
    """A requantized product's int8 result, exponent the operands' plus the shift (noted)."""
    ctx.note_shift(op, shift)
    return {op.outputs[0]: QTensor(q, a.e + b.e + shift)}


def conv_bwd_weight(backend, op, env, ctx) -> dict:
    err, x, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    return {op.outputs[0]: backend.conv2d_bwd_weight_s8(err.q, x.q, a["stride"], a["pad"], a["kernel"])}


def dwconv_bwd_weight(backend, op, env, ctx) -> dict:
    err, x, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    return {op.outputs[0]: backend.dwconv2d_bwd_weight_s8(err.q, x.q, a["stride"], a["pad"], a["kernel"])}


def dilconv_bwd_weight(backend, op, env, ctx) -> dict:
    err, x, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    grad = backend.conv2d_dilated_bwd_weight_s8(err.q, x.q, a["stride"], a["pad"], a["dilation"], a["kernel"])
    return {op.outputs[0]: grad}


def grpconv_bwd_weight(backend, op, env, ctx) -> dict:
    err, x, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    grad = backend.conv2d_grouped_bwd_weight_s8(
        err.q, x.q, a["stride"], a["pad"], a["dilation"], a["groups"], a["kernel"]
    )
    return {op.outputs[0]: grad}


def linear_bwd_weight(backend, op, env, ctx) -> dict:
    err, x = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_s8(np.ascontiguousarray(rows(err).T), np.ascontiguousarray(rows(x).T))}


OPS = {
    "niti.conv_fwd": conv_fwd,
    "niti.conv_bwd_data": conv_bwd_data,
    "niti.conv_bwd_weight": conv_bwd_weight,
    "niti.dwconv_fwd": dwconv_fwd,
    "niti.dwconv_bwd_data": dwconv_bwd_data,
    "niti.dwconv_bwd_weight": dwconv_bwd_weight,
    "niti.dilconv_fwd": dilconv_fwd,
    "niti.dilconv_bwd_data": dilconv_bwd_data,
    "niti.dilconv_bwd_weight": dilconv_bwd_weight,
    "niti.grpconv_fwd": grpconv_fwd,
    "niti.grpconv_bwd_data": grpconv_bwd_data,
    "niti.grpconv_bwd_weight": grpconv_bwd_weight,
    "niti.linear_fwd": linear_fwd,
    "niti.linear_bwd_data": linear_bwd_data,
    "niti.linear_bwd_weight": linear_bwd_weight,
    "niti.conv_acc": conv_acc,
    "niti.linear_acc": linear_acc,
}
