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

Each layer kind with int8 inputs lowers through one entry of `FORWARD` and one of `BACKWARD`
(algorithms/_support.py): the products in int_products.py, residual add and average pools
in int_residual.py, ReLU, max-pool, flatten and dropout here. A layer reading float32 lowers
as FP32 lowers it (`fp32.FORWARD`, `fp32.BACKWARD`).
"""

from __future__ import annotations

import math

import numpy as np

from .. import numerics
from ..data.normalize import lookup
from ..nn import Add, AvgPool2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU
from ..numerics import QTensor
from . import fp32, int_mixed, int_products, int_residual
from ._support import check_layers, entry
from .int_mixed import cast, input_dtype  # noqa: F401  (graph.lower's mixed-precision hooks)
from .int_products import rows

ACTIVATION_DTYPE = "int8"
INPUT_EXPONENT = -7  # pixels p in 0..255 enter as (p - 128) * 2**-7
DEFAULT_MU = 4
# Products requantize through the backends' requantize rule with ctx.given_shift(op), so
# slices of a batch can share one shift: batch splitting, co-scheduling, adaptive rescaling.
TAKES_GIVEN_SHIFT = True


def check_model(model, recipe):
    # NITI lowers every kind FP32 does: those with no integer form as FP32's float ops (int_mixed.py)
    # every conv has an integer form: dense, dilated, depthwise or grouped (int_products.py)
    check_layers(model, recipe, fp32.FORWARD, ": NITI has no such layer")


# ---------------------------------------------------------------- lowering


def relu_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
    b.op(f"{layer.name}.fwd", "niti.relu_fwd", layer.name, "forward", (x,), (out,), ("relu_s8",))
    return out


def relu_backward(b, layer, err, needs_input_error):
    x, out = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "int8", "error")
    b.op(f"{layer.name}.bwd", "niti.relu_bwd", layer.name, "backward", (err, out), (err_in,), ("relu_bwd_s8",))
    return err_in


def maxpool_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
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
    return out


def maxpool_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = b.tensor(f"err.{layer.name}", x_shape, "int8", "error")
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
    return err_in


def flatten_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
    b.op(f"{layer.name}.fwd", "niti.reshape", layer.name, "forward", (x,), (out,), (), shape=shape, alias=True)
    return out


def flatten_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = b.tensor(f"err.{layer.name}", x_shape, "int8", "error")
    b.op(f"{layer.name}.bwd", "niti.reshape", layer.name, "backward", (err,), (err_in,), (), shape=x_shape, alias=True)
    return err_in


def dropout_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
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
    return out


def dropout_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "int8", "error")
    b.op(f"{layer.name}.bwd", "niti.dropout_bwd", layer.name, "backward", (err, f"{layer.name}.mask"), (err_in,), ())
    return err_in


# layer kind reading int8 -> the function emitting its ops (algorithms/_support.py); Add's
# backward is graph.lower's
FORWARD = {
    Conv2d: int_products.conv_forward,
    Linear: int_products.linear_forward,
    ReLU: relu_forward,
    MaxPool2d: maxpool_forward,
    Flatten: flatten_forward,
    Dropout: dropout_forward,
    Add: int_residual.forward_add,
    GlobalAvgPool: int_residual.forward_avgpool,
    AvgPool2d: int_residual.forward_avgpool2d,
}
BACKWARD = {
    Conv2d: int_products.conv_backward,
    Linear: int_products.linear_backward,
    ReLU: relu_backward,
    MaxPool2d: maxpool_backward,
    Flatten: flatten_backward,
    Dropout: dropout_backward,
    GlobalAvgPool: int_residual.backward_avgpool,
    AvgPool2d: int_residual.backward_avgpool2d,
}


def forward(b, layer, x, shape):
    if b.tensors[x].dtype == "float32":
        return int_mixed.forward_float(b, layer, x, shape)
    return entry(FORWARD, layer, b.recipe, ": NITI has no such layer")(b, layer, x, shape)


def backward(b, layer, err, needs_input_error):
    if b.tensors[b.layer_io[layer.name][0]].dtype == "float32":
        return fp32.backward(b, layer, err, needs_input_error)
    if b.tensors[err].dtype == "float32":  # a product with a bias: its float part first
        err = int_mixed.backward_bias(b, layer, err)
    return entry(BACKWARD, layer, b.recipe, ": NITI has no such layer")(b, layer, err, needs_input_error)


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


# ---------------------------------------------------------------- running ops
# Each op function calls the hook of the backend it is handed (the one the plan placed the op on).


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
    err = backend.niti_loss_grad_s8(rows(logits), logits.e, labels, ctx.rng(op))
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
    **int_products.OPS,
    "niti.relu_fwd": relu_fwd,
    "niti.relu_bwd": relu_bwd,
    "niti.maxpool_fwd": maxpool_fwd,
    "niti.maxpool_bwd": maxpool_bwd,
    "niti.reshape": reshape,
    "niti.dropout_fwd": dropout_fwd,
    "niti.dropout_bwd": dropout_bwd,
    "niti.loss_grad": loss_grad,
    "niti.update": update,
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
