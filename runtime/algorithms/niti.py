"""NITI: integer-only training (Wang et al., "NITI: Training Integer Neural Networks
Using Integer-only Arithmetic", IEEE TPDS 2022; reference code wangmaolin/niti).

Every tensor is int8 with a power-of-two exponent. Forward and error products
accumulate in int32 and are shifted back to int8 by the range of the result
(`numerics.activation_shift`); weight gradients are shifted to `mu` bits and
subtracted from the int8 weights (`niti_update_s8`). The loss gradient is NITI's
integer softmax (ops_ref.niti_loss_grad). For models of NITI's own layers no float is
touched between `prepare_input` and `logits_to_float`.

Layers NITI has no integer form for (batch norm, the sigmoid family, squeeze-excitation's
Mul, concat, biases: the mobile CNNs) run the Mandheling way, as float ops on the CPU
between int8 tensors (int_mixed.py); `dsptrain plan` marks which ops those are.
Depthwise convolutions are integer products like the dense ones (the dwconv2d_* hooks); so
are dilated ones (the conv2d_dilated_* hooks: patches with gaps into each backend's exact GEMM).
"""

from __future__ import annotations

import math

import numpy as np

from .. import numerics
from ..data.normalize import lookup
from ..errors import LoweringError
from ..nn import Add, AvgPool2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU, has_bias
from ..numerics import QTensor
from . import fp32, int_mixed, int_residual
from .int_mixed import cast, input_dtype  # noqa: F401  (graph.lower's mixed-precision hooks)

ACTIVATION_DTYPE = "int8"
INPUT_EXPONENT = -7  # pixels p in 0..255 enter as (p - 128) * 2**-7
DEFAULT_MU = 4
# Products requantize through the backends' requantize rule with ctx.given_shift(op), so
# slices of a batch can share one shift: batch splitting, co-scheduling, adaptive rescaling.
TAKES_GIVEN_SHIFT = True
_PRODUCT = ("absmax", "shift_round")


def check_model(model, recipe):
    for layer in model.layers:
        if not isinstance(layer, fp32.LOWERABLE):
            raise LoweringError(
                f"recipe {recipe.name!r} cannot lower layer {layer.name!r} "
                f"({type(layer).__name__}): NITI has no such layer"
            )
        grouped = isinstance(layer, Conv2d) and layer.groups != 1
        if grouped and (not layer.depthwise or layer.dilation != 1):
            raise LoweringError(
                f"recipe {recipe.name!r} cannot lower layer {layer.name!r}: NITI's integer "
                f"convolutions are dense (dilated or not) or undilated depthwise; this one has groups "
                f"{layer.groups} and dilation {layer.dilation} (fp32, octo, wageubn, afp, mls "
                f"and fp8 lower it)"
            )


# ---------------------------------------------------------------- lowering


def forward(b, layer, x, shape):
    if b.tensors[x].dtype == "float32":
        return int_mixed.forward_float(b, layer, x, shape)
    if isinstance(layer, (Conv2d, Linear)) and has_bias(layer):
        return _forward_biased(b, layer, x, shape)
    out = f"{layer.name}.out"
    acts = b.recipe.tensors.activations
    batch = shape[0]
    if isinstance(layer, Conv2d) and layer.depthwise:
        w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
        b.tensor(out, shape, "int8", "activation")
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
            mode=acts.rounding,
        )
    elif isinstance(layer, Conv2d) and layer.dilation > 1:
        w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
        b.tensor(out, shape, "int8", "activation")
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
            mode=acts.rounding,
            workspace=_patch_bytes(layer, shape),
        )
    elif isinstance(layer, Conv2d):
        w = b.param(f"{layer.name}.w", layer.weight_shape, "int8")
        b.tensor(out, shape, "int8", "activation")
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
            mode=acts.rounding,
            product=("conv", "forward"),
        )
    elif isinstance(layer, Linear):
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
            batch * layer.in_features * layer.out_features,
            mode=acts.rounding,
            product=("linear", "forward"),
        )
    elif isinstance(layer, ReLU):
        b.tensor(out, shape, "int8", "activation")
        b.op(f"{layer.name}.fwd", "niti.relu_fwd", layer.name, "forward", (x,), (out,), ("relu_s8",))
    elif isinstance(layer, MaxPool2d):
        b.tensor(out, shape, "int8", "activation")
        b.tensor(f"{layer.name}.argmax", shape, "uint8", "saved")
        b.op(
            f"{layer.name}.fwd",
            "niti.maxpool_fwd",
            layer.name,
            "forward",
            (x,),
            (out, f"{layer.name}.argmax"),
            ("maxpool_s8",),
            kernel=layer.kernel,
            stride=layer.stride,
        )
    elif isinstance(layer, Flatten):
        b.tensor(out, shape, "int8", "activation")
        b.op(f"{layer.name}.fwd", "niti.reshape", layer.name, "forward", (x,), (out,), (), shape=shape, alias=True)
    elif isinstance(layer, Dropout):
        b.tensor(out, shape, "int8", "activation")
        b.tensor(f"{layer.name}.mask", shape, "bool", "saved")
        b.op(
            f"{layer.name}.fwd",
            "niti.dropout_fwd",
            layer.name,
            "forward",
            (x,),
            (out, f"{layer.name}.mask"),
            ("dropout_mask",),
            p=layer.p,
        )
    elif isinstance(layer, Add):
        return int_residual.forward_add(b, layer, x, shape)
    elif isinstance(layer, GlobalAvgPool):
        return int_residual.forward_avgpool(b, layer, x, shape)
    elif isinstance(layer, AvgPool2d):
        return int_residual.forward_avgpool2d(b, layer, x, shape)
    return out


def _conv_macs(layer, shape) -> int:
    return int(np.prod(shape)) * int(np.prod(layer.weight_shape[1:]))


def _patch_bytes(layer, shape) -> tuple[int, int]:
    """(bytes per row, bytes) a dilated conv's gathered int8 patches take (base.py's composition):
    one row of patches per output pixel, KH*KW*C bytes each, and the weight's copy."""
    return int(np.prod(shape[1:3])) * int(np.prod(layer.weight_shape[1:])), int(np.prod(layer.weight_shape))


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
        hook = "dwconv2d_s8" if layer.depthwise else "conv2d_dilated_s8" if layer.dilation > 1 else "conv2d_s8"
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
        )
    return int_mixed.forward_bias(b, layer, acc, shape)


def loss(b, logits, labels):
    """NITI's integer loss gradient; float logits (a last layer with a bias) are cast to int8
    for it, and their error back."""
    floating = b.tensors[logits].dtype == "float32"
    if floating:
        logits = cast(b, logits, "int8", "logits.int8", "loss", "loss")
    err = b.tensor("err.logits", b.tensors[logits].shape, "int8", "error")
    b.op("loss.grad", "niti.loss_grad", "loss", "loss", (logits, labels), (err,), ("niti_loss_grad_s8",))
    return cast(b, err, "float32", "err.logits.float32", "loss", "loss") if floating else err


def join_errors(b, name, errs):
    if b.tensors[errs[0]].dtype == "float32":
        return fp32.join_errors(b, name, errs)
    return int_residual.join_errors(b, name, errs)


def backward(b, layer, err, needs_input_error):
    if b.tensors[b.layer_io[layer.name][0]].dtype == "float32":
        return fp32.backward(b, layer, err, needs_input_error)
    if b.tensors[err].dtype == "float32":  # a product with a bias: its float part first
        err = int_mixed.backward_bias(b, layer, err)
    if isinstance(layer, GlobalAvgPool):
        return int_residual.backward_avgpool(b, layer, err)
    if isinstance(layer, AvgPool2d):
        return int_residual.backward_avgpool2d(b, layer, err)
    x, out = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = f"err.{layer.name}"
    errs, grads = b.recipe.tensors.errors, b.recipe.tensors.gradients
    if isinstance(layer, (Conv2d, Linear)):
        w = f"{layer.name}.w"
        conv = isinstance(layer, Conv2d)
        macs = b.find(f"{layer.name}.fwd").macs
        if needs_input_error:
            b.tensor(err_in, x_shape, "int8", "error")
            if conv and layer.depthwise:
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
                    mode=errs.rounding,
                )
            elif conv and layer.dilation > 1:
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
                    mode=errs.rounding,
                    workspace=_transposed_patch_bytes(layer, x_shape, b.tensors[err].shape),
                )
            elif conv:
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
                    mode=errs.rounding,
                    product=("conv", "backward_data"),
                )
            else:
                b.op(
                    f"{layer.name}.bwd_data",
                    "niti.linear_bwd_data",
                    layer.name,
                    "backward",
                    (err, w),
                    (err_in,),
                    ("gemm_s8", *_PRODUCT),
                    macs,
                    mode=errs.rounding,
                    product=("linear", "backward_data"),
                    workspace=(0, b.tensors[w].nbytes),
                )  # w.T made contiguous (_linear_bwd_data_args)
        grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "int32", "grad")
        kind, hook = ("niti.conv_bwd_weight", "conv2d_bwd_weight_s8") if conv else ("niti.linear_bwd_weight", "gemm_s8")
        if conv and layer.depthwise:
            kind, hook = "niti.dwconv_bwd_weight", "dwconv2d_bwd_weight_s8"
        dilated = conv and layer.dilation > 1
        if dilated:
            kind, hook = "niti.dilconv_bwd_weight", "conv2d_dilated_bwd_weight_s8"
        attrs = dict(stride=layer.stride, pad=layer.padding, kernel=(layer.kernel, layer.kernel)) if conv else {}
        # a linear layer's err.T and x.T made contiguous (_linear_bwd_weight_args): their bytes per row
        transposed = {} if conv else {"workspace": (sum(int(np.prod(b.tensors[t].shape[1:])) for t in (err, x)), 0)}
        if dilated:  # the patches and their transpose, err's transpose
            per_row, _ = _patch_bytes(layer, b.tensors[err].shape)
            transposed = {"workspace": (2 * per_row + int(np.prod(b.tensors[err].shape[1:])), 0)}
            attrs["dilation"] = layer.dilation
        product = None if conv and (layer.depthwise or dilated) else ("conv" if conv else "linear", "backward_weight")
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
            **transposed,
            **attrs,
        )
        b.op(
            f"{layer.name}.update",
            "niti.update",
            layer.name,
            "update",
            (w, grad),
            (w,),
            ("niti_update_s8",),
            mode=grads.rounding,
        )
        return err_in if needs_input_error else None
    b.tensor(err_in, x_shape, "int8", "error")
    if isinstance(layer, ReLU):
        b.op(f"{layer.name}.bwd", "niti.relu_bwd", layer.name, "backward", (err, out), (err_in,), ("relu_bwd_s8",))
    elif isinstance(layer, MaxPool2d):
        b.op(
            f"{layer.name}.bwd",
            "niti.maxpool_bwd",
            layer.name,
            "backward",
            (err, f"{layer.name}.argmax"),
            (err_in,),
            ("maxpool_bwd_s8",),
            kernel=layer.kernel,
            stride=layer.stride,
            in_hw=x_shape[1:3],
        )
    elif isinstance(layer, Flatten):
        b.op(
            f"{layer.name}.bwd",
            "niti.reshape",
            layer.name,
            "backward",
            (err,),
            (err_in,),
            (),
            shape=x_shape,
            alias=True,
        )
    elif isinstance(layer, Dropout):
        b.op(
            f"{layer.name}.bwd", "niti.dropout_bwd", layer.name, "backward", (err, f"{layer.name}.mask"), (err_in,), ()
        )
    return err_in


# ---------------------------------------------------------------- running ops


def _rows(x: QTensor) -> np.ndarray:
    return x.q.reshape(x.q.shape[0], -1)


# Each op function calls the hook of the backend it is handed (the one the plan placed the
# op on) and maps the op's tensors to the hook's arguments and its result back. A
# requantized product tells the executor its shift (ctx.note_shift): StepStats.shifts,
# adaptive rescaling and the sliced runners read it there.


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


def conv_acc(backend, op, env, ctx) -> dict:
    """A biased conv's exact sums (int_mixed.bias_fwd adds the bias in float)."""
    x, w, a = env[op.inputs[0]], env[op.inputs[1]], op.attrs
    if a.get("dilation", 1) > 1:
        return {op.outputs[0]: backend.conv2d_dilated_s8(x.q, w.q, a["stride"], a["pad"], a["dilation"])}
    product = backend.dwconv2d_s8 if a["depthwise"] else backend.conv2d_s8
    return {op.outputs[0]: product(x.q, w.q, a["stride"], a["pad"])}


def linear_acc(backend, op, env, ctx) -> dict:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_s8(_rows(x), w.q)}


def linear_fwd(backend, op, env, ctx) -> dict:
    x, w = env[op.inputs[0]], env[op.inputs[1]]
    q, shift = backend.gemm_requant_s8(_rows(x), w.q, op.attrs["mode"], ctx.rng(op), ctx.given_shift(op))
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


def linear_bwd_data(backend, op, env, ctx) -> dict:
    err, w = env[op.inputs[0]], env[op.inputs[1]]
    q, shift = backend.gemm_requant_s8(
        _rows(err), np.ascontiguousarray(w.q.T), op.attrs["mode"], ctx.rng(op), ctx.given_shift(op)
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


def linear_bwd_weight(backend, op, env, ctx) -> dict:
    err, x = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_s8(np.ascontiguousarray(_rows(err).T), np.ascontiguousarray(_rows(x).T))}


def relu_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    return {op.outputs[0]: QTensor(backend.relu_s8(x.q), x.e)}


def relu_bwd(backend, op, env, ctx) -> dict:
    err = env[op.inputs[0]]
    return {op.outputs[0]: QTensor(backend.relu_bwd_s8(err.q, env[op.inputs[1]].q), err.e)}


def maxpool_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    y, argmax = backend.maxpool_s8(x.q, op.attrs["kernel"], op.attrs["stride"])
    return {op.outputs[0]: QTensor(y, x.e), op.outputs[1]: argmax}


def maxpool_bwd(backend, op, env, ctx) -> dict:
    err, a = env[op.inputs[0]], op.attrs
    return {
        op.outputs[0]: QTensor(
            backend.maxpool_bwd_s8(err.q, env[op.inputs[1]], a["kernel"], a["stride"], a["in_hw"]), err.e
        )
    }


def reshape(backend, op, env, ctx) -> dict:
    """A view: no backend."""
    x = env[op.inputs[0]]
    shape = (x.q.shape[0], *op.attrs["shape"][1:])
    return {op.outputs[0]: QTensor(x.q.reshape(shape), x.e)}


def dropout_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    keep = backend.dropout_mask(x.q.shape, op.attrs["p"], ctx.rng(op))
    return {op.outputs[0]: QTensor(np.where(keep, x.q, 0).astype(np.int8), x.e), op.outputs[1]: keep}


def dropout_bwd(backend, op, env, ctx) -> dict:
    """The forward's mask applied to the error: no backend."""
    err, keep = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: QTensor(np.where(keep, err.q, 0).astype(np.int8), err.e)}


def loss_grad(backend, op, env, ctx) -> dict:
    logits, labels = env[op.inputs[0]], env[op.inputs[1]]
    err = backend.niti_loss_grad_s8(_rows(logits), logits.e, labels, ctx.rng(op))
    return {op.outputs[0]: QTensor(err, numerics.LOSS_EXPONENT)}


def scheduled_mu(ctx) -> int:
    """The update's `mu` at this step: the recipe's per-epoch schedule, moved by the run's
    learning-rate factor f as mu + round(log2 f) within 1..8 (NITI's rate is a shift:
    train/schedule.py)."""
    mu = ctx.recipe.schedule.at("mu", ctx.epoch, DEFAULT_MU)
    if ctx.lr_scale == 1.0:
        return mu
    bits = round(math.log2(ctx.lr_scale)) if ctx.lr_scale > 0 else -8
    return min(8, max(1, mu + bits))


def update(backend, op, env, ctx) -> dict:
    w, grad = env[op.inputs[0]], env[op.inputs[1]]
    mu = scheduled_mu(ctx)
    return {op.outputs[0]: QTensor(backend.niti_update_s8(w.q, grad, mu, op.attrs["mode"], ctx.rng(op)), w.e)}


OPS = {
    "niti.conv_fwd": conv_fwd,
    "niti.linear_fwd": linear_fwd,
    "niti.relu_fwd": relu_fwd,
    "niti.relu_bwd": relu_bwd,
    "niti.maxpool_fwd": maxpool_fwd,
    "niti.maxpool_bwd": maxpool_bwd,
    "niti.reshape": reshape,
    "niti.dropout_fwd": dropout_fwd,
    "niti.dropout_bwd": dropout_bwd,
    "niti.loss_grad": loss_grad,
    "niti.conv_bwd_data": conv_bwd_data,
    "niti.linear_bwd_data": linear_bwd_data,
    "niti.conv_bwd_weight": conv_bwd_weight,
    "niti.linear_bwd_weight": linear_bwd_weight,
    "niti.update": update,
    "niti.dwconv_fwd": dwconv_fwd,
    "niti.dwconv_bwd_data": dwconv_bwd_data,
    "niti.dwconv_bwd_weight": dwconv_bwd_weight,
    "niti.dilconv_fwd": dilconv_fwd,
    "niti.dilconv_bwd_data": dilconv_bwd_data,
    "niti.dilconv_bwd_weight": dilconv_bwd_weight,
    "niti.conv_acc": conv_acc,
    "niti.linear_acc": linear_acc,
    **int_residual.OPS,
    **int_mixed.OPS,
    **fp32.OPS,  # the float layers of mixed-precision models (int_mixed.py)
}


# ---------------------------------------------------------------- state and float boundaries


def init_params(model, recipe, rng: np.random.Generator) -> dict:
    """Xavier-uniform weights quantized as NITI does (`weight_quant`)."""
    params = {}
    for layer in model.parametric():
        shape = layer.weight_shape
        receptive = int(np.prod(shape[1:-1])) if len(shape) == 4 else 1
        fan_in, fan_out = shape[-1] * receptive, shape[0] * receptive
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        params[f"{layer.name}.w"] = numerics.quantize_weights(rng.uniform(-bound, bound, shape))
    params.update(int_mixed.init_params(model))  # float batch norms and biases
    return params


def prepare_input(images: np.ndarray, normalize=None) -> QTensor:
    """uint8 pixels -> int8 centred on 128, exponent -7: (p - 128) / 128, integer only.
    With `normalize` (data.Normalize): its int8 table per channel, with the input
    exponent that fits the normalised range (data/normalize.py)."""
    if normalize is not None:
        table, exponent = normalize.int8_table(images.shape[-1])
        return QTensor(lookup(table, images), exponent)
    return QTensor(numerics.clip_int8(images.astype(np.int16) - 128), INPUT_EXPONENT)


def logits_to_float(value) -> np.ndarray:
    """int8 logits dequantized; a last layer with a bias gives float32 ones."""
    return value.dequantize() if isinstance(value, QTensor) else np.asarray(value, np.float64)


# What NITI's kernels honour: int8 tensors with one power-of-two exponent each, its
# integer loss and update. Other values are refused at load instead of being ignored.
SUPPORTED = {
    "integer": (True,),
    "tensors.*.format": ("int",),
    "tensors.*.bits": (8,),
    "tensors.*.scale": ("pow2",),
    "tensors.*.granularity": ("tensor",),
    "tensors.*.rounding": ("round", "psto", "sto"),
    "tensors.*.exponent_bits": (0,),
    # rounding is read for activations, errors and gradients (the update rounds with the
    # gradients' mode); the weights' and updates' entries only describe NITI, so they hold
    # the shipped values
    "tensors.weights.rounding": ("round",),
    "tensors.updates.rounding": ("psto",),
    # only activations and errors rescale (rescale.py); the weights' exponents stay fixed
    "tensors.weights.rescale.policy": ("fixed",),
    "tensors.gradients.rescale.policy": ("dynamic",),
    "tensors.updates.rescale.policy": ("dynamic",),
    "loss.kind": ("niti_int_ce",),
    "optimizer.kind": ("niti_sgd",),
}


def check_recipe(recipe, source) -> None:
    from ._support import check_supported

    check_supported(recipe, source, SUPPORTED)
