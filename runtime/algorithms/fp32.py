"""FP32: the same models in float32 with softmax cross-entropy and SGD with momentum
and weight decay (PyTorch's update rule), the in-engine baseline for integer recipes.

Each layer kind lowers through one entry of `FORWARD` and one of `BACKWARD`
(algorithms/_support.py): products in `_float_products`, ReLU, pools, flatten and dropout in
`_chain_layers`, the mobile CNNs' activations, Mul, concat, slice and shuffle in
`_branch_layers`; batch norm, residual add, global average pooling and the error sum where
branches join (ResNets) are `_float_layers`' float ops, as the emulated recipes use them.
Every parameter takes `_sgd`'s update: batch norm's gamma and beta too (PyTorch decays them
too)."""

from __future__ import annotations

import numpy as np

from ..data.normalize import lookup
from ..nn import Add, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU, has_bias
from . import _branch_layers as branch
from . import _chain_layers as chain
from . import _float_layers as fl
from . import _float_products as products
from ._sgd import emit_sgd, sgd
from ._support import check_layers, entry

ACTIVATION_DTYPE = "float32"
PREFIX = "fp32"

# ---------------------------------------------------------------- lowering


def bn_forward(b, layer, x, shape):
    return fl.forward_bn(b, layer, x, shape, PREFIX, b.training)


def bn_backward(b, layer, err, needs_input_error):
    err_in, grads = fl.backward_bn(b, layer, err, needs_input_error, PREFIX)
    for param, grad in grads:
        emit_sgd(b, layer.name, param, grad)
    return err_in


def add_forward(b, layer, x, shape):
    return fl.forward_add(b, layer, x, shape, PREFIX)


def global_pool_forward(b, layer, x, shape):
    return fl.forward_avgpool(b, layer, x, shape, PREFIX)


def global_pool_backward(b, layer, err, needs_input_error):
    return fl.backward_avgpool(b, layer, err, PREFIX)


# layer kind -> the function emitting its ops (algorithms/_support.py); Add's backward is graph.lower's
FORWARD = {
    Conv2d: products.conv_forward,
    Linear: products.linear_forward,
    ReLU: chain.relu_forward,
    MaxPool2d: chain.maxpool_forward,
    AvgPool2d: chain.avgpool2d_forward,
    Flatten: chain.flatten_forward,
    Dropout: chain.dropout_forward,
    BatchNorm2d: bn_forward,
    Add: add_forward,
    GlobalAvgPool: global_pool_forward,
    **branch.FORWARD,
}
BACKWARD = {
    Conv2d: products.conv_backward,
    Linear: products.linear_backward,
    ReLU: chain.relu_backward,
    MaxPool2d: chain.maxpool_backward,
    AvgPool2d: chain.avgpool2d_backward,
    Flatten: chain.flatten_backward,
    Dropout: chain.dropout_backward,
    BatchNorm2d: bn_backward,
    GlobalAvgPool: global_pool_backward,
    **branch.BACKWARD,
}


def check_model(model, recipe):
    check_layers(model, recipe, FORWARD)


def forward(b, layer, x, shape):
    return entry(FORWARD, layer, b.recipe)(b, layer, x, shape)


def backward(b, layer, err, needs_input_error):
    return entry(BACKWARD, layer, b.recipe)(b, layer, err, needs_input_error)


# loss_grad's float64 temporaries (logits, their exponentials, the scaled error, the float32
# cast): 28 bytes a class a row at their peak (tracemalloc), rounded up
LOSS_BYTES_PER_CLASS = 32


def loss_workspace(logits_shape) -> tuple[int, int]:
    """(bytes per row, bytes) loss_grad allocates beside its result (memory.planner.op_workspace)."""
    return int(np.prod(logits_shape[1:])) * LOSS_BYTES_PER_CLASS, 0


def loss(b, logits, labels, kind: str = "fp32.loss_grad"):
    """The float loss gradient of `logits` (op `kind`: a recipe with its own loss op, FP8's
    loss scaling, names it)."""
    err = b.tensor("err.logits", b.tensors[logits].shape, "float32", "error")
    b.op(
        "loss.grad",
        kind,
        "loss",
        "loss",
        (logits, labels),
        (err,),
        ("softmax_xent_grad_f32",),
        workspace=loss_workspace(b.tensors[logits].shape),
    )
    return err


def join_errors(b, name, errs):
    return fl.join_errors(b, name, errs, PREFIX)


# ---------------------------------------------------------------- running ops


def softmax_loss_grad(backend, op, env, ctx, loss_scale: float = 1.0) -> dict:
    """The softmax cross-entropy gradient of float logits over the full batch's rows, times
    `loss_scale` (a power of two: FP8's; exact, so folded into the divisor)."""
    logits = np.ascontiguousarray(env[op.inputs[0]], np.float32)
    labels = np.ascontiguousarray(env[op.inputs[1]], np.int64)
    return {op.outputs[0]: backend.softmax_xent_grad_f32(logits, labels, ctx.batch_total / loss_scale)}


def loss_grad(backend, op, env, ctx) -> dict:
    return softmax_loss_grad(backend, op, env, ctx)


OPS = {
    **products.OPS,
    **chain.OPS,
    **branch.OPS,
    **fl.make_ops(PREFIX),
    "fp32.loss_grad": loss_grad,
    "fp32.sgd": sgd,
}


def init_params(model, recipe, rng: np.random.Generator) -> dict:
    """He-uniform weights (He et al. 2015), BN's gamma 1 and beta 0, zero momentum buffers."""
    params = {}
    for layer in model.layers:
        if isinstance(layer, BatchNorm2d):
            params.update(init_bn_params(layer))
    for layer in model.parametric():
        shape = layer.weight_shape
        fan_in = int(np.prod(shape[1:]))
        bound = np.sqrt(6.0 / fan_in)
        params[f"{layer.name}.w"] = rng.uniform(-bound, bound, shape).astype(np.float32)
        params[f"{layer.name}.v"] = np.zeros(shape, np.float32)
        if has_bias(layer):  # zero, drawing nothing: bias-free models keep their random weights
            params[f"{layer.name}.b"] = np.zeros(layer.bias_shape, np.float32)
            params[f"{layer.name}.b.v"] = np.zeros(layer.bias_shape, np.float32)
    return params


def init_bn_params(layer) -> dict:
    """A batch norm's gamma 1, beta 0, running mean 0 and variance 1, and gamma's and beta's velocities."""
    bn = fl.init_bn(layer)
    return {**bn, **{f"{name}.v": np.zeros_like(bn[name]) for name in fl.bn_state_names(layer.name)[:2]}}


def prepare_input(images: np.ndarray, normalize=None) -> np.ndarray:
    """uint8 pixels -> (p - 128) / 128, the same values NITI sees; with `normalize`
    (data.Normalize) (p / 255 - mean) / std per channel, from its float32 table."""
    if normalize is not None:
        return lookup(normalize.float_table(images.shape[-1]), images)
    return (images.astype(np.float32) - 128.0) / 128.0


def logits_to_float(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


# FP32 is float32 throughout with PyTorch's SGD: other formats are refused at load.
SUPPORTED = {
    "integer": (False,),
    "tensors.*.format": ("float32",),
    "tensors.*.bits": (32,),
    "tensors.*.exponent_bits": (0,),
    "tensors.*.scale": ("none",),
    "tensors.*.rounding": ("none",),
    "tensors.*.granularity": ("tensor",),
    "tensors.*.rescale.policy": ("dynamic",),  # no scales, nothing to rescale
    "loss.kind": ("softmax_ce",),
    "optimizer.kind": ("sgd",),
}


def check_recipe(recipe, source) -> None:
    from ._support import check_supported

    check_supported(recipe, source, SUPPORTED)
