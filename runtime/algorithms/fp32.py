"""FP32: the same models in float32 with softmax cross-entropy and SGD with momentum
and weight decay (PyTorch's update rule), the in-engine baseline for integer recipes.
Batch norm, residual add, global average pooling and the error sum where branches join
(ResNets) are `_float_layers`' float ops, as the emulated recipes use them; batch norm's
gamma and beta take the same SGD update as the weights (PyTorch decays them too)."""

from __future__ import annotations

import numpy as np

from ..data.normalize import lookup
from ..errors import LoweringError
from ..nn import Add, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, GlobalAvgPool, Linear, MaxPool2d, ReLU, has_bias
from . import _branch_layers as branch
from . import _float_layers as fl

ACTIVATION_DTYPE = "float32"
_F32 = ("numpy_f32",)
PREFIX = "fp32"
LOWERABLE = (
    Conv2d,
    Linear,
    ReLU,
    MaxPool2d,
    AvgPool2d,
    Flatten,
    Dropout,
    BatchNorm2d,
    Add,
    GlobalAvgPool,
    *branch.LAYERS,
)


def check_model(model, recipe):
    for layer in model.layers:
        if not isinstance(layer, LOWERABLE):
            raise LoweringError(f"recipe {recipe.name!r} cannot lower layer {layer.name!r} ({type(layer).__name__})")


def forward(b, layer, x, shape):
    done = fl.forward(b, layer, x, shape, PREFIX, b.training)
    if done is None:
        done = branch.forward(b, layer, x, shape, PREFIX)
    if done is not None:
        return done
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    batch = shape[0]
    if isinstance(layer, Conv2d):
        w = b.param(f"{layer.name}.w", layer.weight_shape, "float32")
        b.tensor(f"{layer.name}.v", layer.weight_shape, "float32", "state")
        macs = int(np.prod(shape)) * int(np.prod(layer.weight_shape[1:]))
        inputs = (x, w, *bias_param(b, layer))
        if _plain_conv(layer):
            b.op(
                f"{layer.name}.fwd",
                "fp32.conv_fwd",
                layer.name,
                "forward",
                inputs,
                (out,),
                ("conv2d_f32",),
                macs,
                stride=layer.stride,
                pad=layer.padding,
                product=("conv", "forward"),
            )
        else:
            b.op(
                f"{layer.name}.fwd",
                "fp32.gconv_fwd",
                layer.name,
                "forward",
                inputs,
                (out,),
                _gconv_hooks(layer, "forward"),
                macs,
                **_gconv_attrs(layer, b.tensors[x].shape),
            )
    elif isinstance(layer, Linear):
        w = b.param(f"{layer.name}.w", layer.weight_shape, "float32")
        b.tensor(f"{layer.name}.v", layer.weight_shape, "float32", "state")
        b.op(
            f"{layer.name}.fwd",
            "fp32.linear_fwd",
            layer.name,
            "forward",
            (x, w, *bias_param(b, layer)),
            (out,),
            ("gemm_f32",),
            batch * layer.in_features * layer.out_features,
            workspace=(0, b.tensors[w].nbytes),
        )  # the cpu gemm_f32's transposed copy of w (bindings_fp32.cpp)
    elif isinstance(layer, ReLU):
        b.op(f"{layer.name}.fwd", "fp32.relu_fwd", layer.name, "forward", (x,), (out,), ("relu_f32",))
    elif isinstance(layer, MaxPool2d):
        b.tensor(f"{layer.name}.argmax", shape, "uint8", "saved")
        b.op(
            f"{layer.name}.fwd",
            "fp32.maxpool_fwd",
            layer.name,
            "forward",
            (x,),
            (out, f"{layer.name}.argmax"),
            ("maxpool_f32",),
            kernel=layer.kernel,
            stride=layer.stride,
        )
    elif isinstance(layer, AvgPool2d):
        b.op(
            f"{layer.name}.fwd",
            "fp32.avgpool2d_fwd",
            layer.name,
            "forward",
            (x,),
            (out,),
            _F32,
            **_avgpool_attrs(layer, b.tensors[x].shape),
        )
    elif isinstance(layer, Flatten):
        b.op(f"{layer.name}.fwd", "fp32.reshape", layer.name, "forward", (x,), (out,), (), shape=shape, alias=True)
    elif isinstance(layer, Dropout):
        b.tensor(f"{layer.name}.mask", shape, "bool", "saved")
        b.op(
            f"{layer.name}.fwd",
            "fp32.dropout_fwd",
            layer.name,
            "forward",
            (x,),
            (out, f"{layer.name}.mask"),
            ("dropout_mask", "dropout_apply_f32"),
            p=layer.p,
        )
    return out


def _plain_conv(layer) -> bool:
    return layer.groups == 1 and layer.dilation == 1


def _depthwise(layer) -> bool:
    """Through the CONTRACT-dwconv hooks (undilated); a dilated one goes dense (zero-inserted)."""
    return layer.depthwise and layer.dilation == 1


def _gconv_hooks(layer, pass_) -> tuple:
    if _depthwise(layer):
        return (
            {
                "forward": "dwconv2d_f32",
                "backward_data": "dwconv2d_bwd_data_f32",
                "backward_weight": "dwconv2d_bwd_weight_f32",
            }[pass_],
        )
    return (
        {"forward": "conv2d_f32", "backward_data": "conv2d_bwd_data_f32", "backward_weight": "conv2d_bwd_weight_f32"}[
            pass_
        ],
    )


def _gconv_attrs(layer, x_shape) -> dict:
    return dict(
        stride=layer.stride,
        pad=layer.padding,
        groups=layer.groups,
        dilation=layer.dilation,
        depthwise=_depthwise(layer),
        in_hw=tuple(x_shape[1:3]),
        kernel=(layer.span, layer.span),
    )


def bias_param(b, layer) -> tuple[str, ...]:
    """(the layer's bias tensor,) for a layer with a bias, else (): the forward op's last input."""
    if not has_bias(layer):
        return ()
    return (b.param(f"{layer.name}.b", layer.bias_shape, "float32"),)


def bias_grad_op(b, layer, err) -> str:
    """Emit the bias gradient (the error summed over every axis but the channels); its name."""
    grad = b.tensor(f"{layer.name}.b.grad", layer.bias_shape, "float32", "grad")
    b.op(f"{layer.name}.bwd_bias", "fp32.bias_grad", layer.name, "backward", (err,), (grad,), ("channel_sum_f32",))
    return grad


def _avgpool_attrs(layer, x_shape) -> dict:
    return dict(
        kernel=layer.kernel,
        stride=layer.stride,
        pad=layer.padding,
        count_include_pad=layer.count_include_pad,
        in_hw=tuple(x_shape[1:3]),
    )


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


def emit_sgd(b, layer_name, param, grad):
    """PyTorch's SGD update of `param` by `grad`, with its velocity (`param`.v, a state tensor).
    Under NITI's integer loss the errors are per sample (its softmax gradient has no 1/N), so a
    float parameter's gradient is the batch's sum: the rate is divided by the batch size, which
    makes it PyTorch's rate on a mean loss."""
    velocity = b.tensor(f"{param}.v", b.tensors[param].shape, "float32", "state")
    summed = b.recipe.loss.kind == "niti_int_ce"
    b.op(
        f"{param}.update",
        "fp32.sgd",
        layer_name,
        "update",
        (param, grad, velocity),
        (param, velocity),
        ("sgd_f32",),
        lr_divisor=b.batch if summed else 1,
    )


def backward(b, layer, err, needs_input_error):
    if isinstance(layer, BatchNorm2d):
        err_in, grads = fl.backward_bn(b, layer, err, needs_input_error, PREFIX)
        for param, grad in grads:
            emit_sgd(b, layer.name, param, grad)
        return err_in
    if isinstance(layer, GlobalAvgPool):
        return fl.backward_avgpool(b, layer, err, PREFIX)
    done = branch.backward(b, layer, err, needs_input_error, PREFIX)
    if done is not NotImplemented:
        return done
    if isinstance(layer, Conv2d) and not _plain_conv(layer):
        return _backward_gconv(b, layer, err, needs_input_error)
    x, out = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = f"err.{layer.name}"
    if isinstance(layer, (Conv2d, Linear)):
        w, conv = f"{layer.name}.w", isinstance(layer, Conv2d)
        macs = b.find(f"{layer.name}.fwd").macs
        attrs = (
            dict(stride=layer.stride, pad=layer.padding, in_hw=x_shape[1:3], kernel=(layer.kernel, layer.kernel))
            if conv
            else {}
        )
        if needs_input_error:
            b.tensor(err_in, x_shape, "float32", "error")
            b.op(
                f"{layer.name}.bwd_data",
                "fp32.conv_bwd_data" if conv else "fp32.linear_bwd_data",
                layer.name,
                "backward",
                (err, w),
                (err_in,),
                ("conv2d_bwd_data_f32",) if conv else ("gemm_f32",),
                macs,
                product=("conv", "backward_data") if conv else None,
                **attrs,
            )  # a linear layer's err @ w reads w as it is: no transposed copy
        grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "float32", "grad")
        b.op(
            f"{layer.name}.bwd_weight",
            "fp32.conv_bwd_weight" if conv else "fp32.linear_bwd_weight",
            layer.name,
            "backward",
            (err, x),
            (grad,),
            ("conv2d_bwd_weight_f32",) if conv else ("gemm_f32",),
            macs,
            product=("conv", "backward_weight") if conv else None,
            **({} if conv else {"workspace": (4 * layer.weight_shape[0], 0)}),  # linear: err^T, copied
            **attrs,
        )
        b.op(
            f"{layer.name}.update",
            "fp32.sgd",
            layer.name,
            "update",
            (w, grad, f"{layer.name}.v"),
            (w, f"{layer.name}.v"),
            ("sgd_f32",),
        )
        if has_bias(layer):
            emit_sgd(b, layer.name, f"{layer.name}.b", bias_grad_op(b, layer, err))
        return err_in if needs_input_error else None
    b.tensor(err_in, x_shape, "float32", "error")
    if isinstance(layer, ReLU):
        b.op(f"{layer.name}.bwd", "fp32.relu_bwd", layer.name, "backward", (err, out), (err_in,), ("relu_bwd_f32",))
    elif isinstance(layer, MaxPool2d):
        b.op(
            f"{layer.name}.bwd",
            "fp32.maxpool_bwd",
            layer.name,
            "backward",
            (err, f"{layer.name}.argmax"),
            (err_in,),
            ("maxpool_bwd_f32",),
            kernel=layer.kernel,
            stride=layer.stride,
            in_hw=x_shape[1:3],
        )
    elif isinstance(layer, AvgPool2d):
        b.op(
            f"{layer.name}.bwd",
            "fp32.avgpool2d_bwd",
            layer.name,
            "backward",
            (err,),
            (err_in,),
            _F32,
            **_avgpool_attrs(layer, x_shape),
        )
    elif isinstance(layer, Flatten):
        b.op(
            f"{layer.name}.bwd",
            "fp32.reshape",
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
            f"{layer.name}.bwd",
            "fp32.dropout_bwd",
            layer.name,
            "backward",
            (err, f"{layer.name}.mask"),
            (err_in,),
            ("dropout_apply_f32",),
        )
    return err_in


def _backward_gconv(b, layer, err, needs_input_error):
    """A grouped, depthwise or dilated conv's backward: the depthwise hooks, or the dense ones on its
    zero-filled dense weight (algorithms/_branch_layers.dense_weight)."""
    x, _ = b.layer_io[layer.name]
    name, w = layer.name, f"{layer.name}.w"
    attrs, macs = _gconv_attrs(layer, b.tensors[x].shape), b.find(f"{layer.name}.fwd").macs
    err_in = None
    if needs_input_error:
        err_in = b.tensor(f"err.{name}", b.tensors[x].shape, "float32", "error")
        b.op(
            f"{name}.bwd_data",
            "fp32.gconv_bwd_data",
            name,
            "backward",
            (err, w),
            (err_in,),
            _gconv_hooks(layer, "backward_data"),
            macs,
            **attrs,
        )
    grad = b.tensor(f"{name}.grad", layer.weight_shape, "float32", "grad")
    b.op(
        f"{name}.bwd_weight",
        "fp32.gconv_bwd_weight",
        name,
        "backward",
        (err, x),
        (grad,),
        _gconv_hooks(layer, "backward_weight"),
        macs,
        **attrs,
    )
    b.op(f"{name}.update", "fp32.sgd", name, "update", (w, grad, f"{name}.v"), (w, f"{name}.v"), ("sgd_f32",))
    if has_bias(layer):
        emit_sgd(b, name, f"{name}.b", bias_grad_op(b, layer, err))
    return err_in


# ---------------------------------------------------------------- running ops


def gconv_fwd(backend, op, env, ctx):
    a, x, w = op.attrs, env[op.inputs[0]], env[op.inputs[1]]
    if a["depthwise"]:
        y = backend.dwconv2d_f32(x, w, a["stride"], a["pad"])
    else:
        y = backend.conv2d_f32(x, branch.dense_weight(w, a["groups"], a["dilation"]), a["stride"], a["pad"])
    return {op.outputs[0]: with_bias(backend, y, op, env)}


def gconv_bwd_data(backend, op, env, ctx):
    a, err, w = op.attrs, env[op.inputs[0]], env[op.inputs[1]]
    if a["depthwise"]:
        return {op.outputs[0]: backend.dwconv2d_bwd_data_f32(err, w, a["stride"], a["pad"], a["in_hw"])}
    dense = branch.dense_weight(w, a["groups"], a["dilation"])
    return {op.outputs[0]: backend.conv2d_bwd_data_f32(err, dense, a["stride"], a["pad"], a["in_hw"])}


def gconv_bwd_weight(backend, op, env, ctx):
    a, err, x = op.attrs, env[op.inputs[0]], env[op.inputs[1]]
    if a["depthwise"]:
        return {op.outputs[0]: backend.dwconv2d_bwd_weight_f32(err, x, a["stride"], a["pad"], a["kernel"])}
    dense = backend.conv2d_bwd_weight_f32(err, x, a["stride"], a["pad"], a["kernel"])
    return {op.outputs[0]: branch.grouped_part(dense, a["groups"], a["dilation"])}


def with_bias(backend, y, op, env):
    """`y` plus the bias the op names as its third input, if it has one."""
    if len(op.inputs) < 3:
        return y
    return backend.bias_add_f32(np.asarray(y, np.float32), np.asarray(env[op.inputs[2]], np.float32))


# Op functions (backend, op, env, ctx): each calls the hook of the backend it is handed;
# those marked "no backend" are NumPy alone.


def conv_fwd(backend, op, env, ctx) -> dict:
    y = backend.conv2d_f32(env[op.inputs[0]], env[op.inputs[1]], op.attrs["stride"], op.attrs["pad"])
    return {op.outputs[0]: with_bias(backend, y, op, env)}


def linear_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    return {op.outputs[0]: with_bias(backend, backend.gemm_f32(x.reshape(x.shape[0], -1), env[op.inputs[1]]), op, env)}


def conv_bwd_data(backend, op, env, ctx) -> dict:
    a = op.attrs
    return {
        op.outputs[0]: backend.conv2d_bwd_data_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["stride"], a["pad"], a["in_hw"]
        )
    }


def linear_bwd_data(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.gemm_f32(env[op.inputs[0]], env[op.inputs[1]], False)}  # err[B,out] @ w[out,in]


def conv_bwd_weight(backend, op, env, ctx) -> dict:
    a = op.attrs
    return {
        op.outputs[0]: backend.conv2d_bwd_weight_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["stride"], a["pad"], a["kernel"]
        )
    }


def linear_bwd_weight(backend, op, env, ctx) -> dict:
    """err^T x: gemm_f32 on a transposed copy of the error (batch x outputs: small)."""
    err, x = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_f32(np.ascontiguousarray(err.T), x.reshape(x.shape[0], -1), False)}


def bias_grad(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.channel_sum_f32(np.ascontiguousarray(env[op.inputs[0]]))}


def relu_fwd(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.relu_f32(env[op.inputs[0]])}


def relu_bwd(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.relu_bwd_f32(env[op.inputs[0]], env[op.inputs[1]])}


def maxpool_fwd(backend, op, env, ctx) -> dict:
    return dict(zip(op.outputs, backend.maxpool_f32(env[op.inputs[0]], op.attrs["kernel"], op.attrs["stride"])))


def maxpool_bwd(backend, op, env, ctx) -> dict:
    a = op.attrs
    return {
        op.outputs[0]: backend.maxpool_bwd_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["kernel"], a["stride"], a["in_hw"]
        )
    }


def relu_maxpool_fwd(backend, op, env, ctx) -> dict:
    """ReLU and max-pool as one op (algorithms/_fusions.py)."""
    return dict(zip(op.outputs, backend.relu_maxpool_f32(env[op.inputs[0]], op.attrs["kernel"], op.attrs["stride"])))


def relu_maxpool_bwd(backend, op, env, ctx) -> dict:
    a = op.attrs  # (err, the pooled y, argmax): algorithms/_fusions.py
    return {
        op.outputs[0]: backend.relu_maxpool_bwd_f32(
            env[op.inputs[0]], env[op.inputs[1]], env[op.inputs[2]], a["kernel"], a["stride"], a["in_hw"]
        )
    }


def avgpool2d_fwd(backend, op, env, ctx) -> dict:
    """No backend."""
    a = op.attrs
    return {
        op.outputs[0]: fl.avgpool2d_forward(
            env[op.inputs[0]], a["kernel"], a["stride"], a["pad"], a["count_include_pad"]
        )
    }


def avgpool2d_bwd(backend, op, env, ctx) -> dict:
    """No backend."""
    a = op.attrs
    return {
        op.outputs[0]: fl.avgpool2d_backward(
            env[op.inputs[0]], a["in_hw"], a["kernel"], a["stride"], a["pad"], a["count_include_pad"]
        )
    }


def reshape(backend, op, env, ctx) -> dict:
    """A view: no backend."""
    x = env[op.inputs[0]]
    return {op.outputs[0]: x.reshape((x.shape[0], *op.attrs["shape"][1:]))}


def dropout_fwd(backend, op, env, ctx) -> dict:
    x, p = env[op.inputs[0]], op.attrs["p"]
    keep = backend.dropout_mask(x.shape, p, ctx.rng(op))
    return {op.outputs[0]: backend.dropout_apply_f32(np.asarray(x, np.float32), keep, p), op.outputs[1]: keep}


def dropout_bwd(backend, op, env, ctx) -> dict:
    """The forward's mask applied to the error."""
    err, keep = env[op.inputs[0]], env[op.inputs[1]]
    p = ctx.graph.op(op.name.replace(".bwd", ".fwd")).attrs["p"]
    return {op.outputs[0]: backend.dropout_apply_f32(np.asarray(err, np.float32), keep, p)}


def softmax_loss_grad(backend, op, env, ctx, loss_scale: float = 1.0) -> dict:
    """The softmax cross-entropy gradient of float logits over the full batch's rows, times
    `loss_scale` (a power of two: FP8's; exact, so folded into the divisor)."""
    logits = np.ascontiguousarray(env[op.inputs[0]], np.float32)
    labels = np.ascontiguousarray(env[op.inputs[1]], np.int64)
    return {op.outputs[0]: backend.softmax_xent_grad_f32(logits, labels, ctx.batch_total / loss_scale)}


def loss_grad(backend, op, env, ctx) -> dict:
    return softmax_loss_grad(backend, op, env, ctx)


def sgd(backend, op, env, ctx) -> dict:
    """PyTorch's SGD: g += wd * w; v = momentum * v + g; w -= lr * (g + momentum * v if nesterov else v)."""
    w, grad, v = env[op.inputs[0]], env[op.inputs[1]], env[op.inputs[2]]
    o = ctx.recipe.optimizer
    lr = o.lr * ctx.lr_factor() / op.attrs.get("lr_divisor", 1)
    return dict(zip(op.outputs, backend.sgd_f32(w, grad, v, lr, o.momentum, o.weight_decay, o.nesterov)))


OPS = {
    "fp32.conv_fwd": conv_fwd,
    "fp32.linear_fwd": linear_fwd,
    "fp32.relu_fwd": relu_fwd,
    "fp32.relu_bwd": relu_bwd,
    "fp32.maxpool_fwd": maxpool_fwd,
    "fp32.maxpool_bwd": maxpool_bwd,
    "fp32.relu_maxpool_fwd": relu_maxpool_fwd,
    "fp32.relu_maxpool_bwd": relu_maxpool_bwd,  # _fusions.py
    "fp32.avgpool2d_fwd": avgpool2d_fwd,
    "fp32.avgpool2d_bwd": avgpool2d_bwd,
    "fp32.reshape": reshape,
    "fp32.dropout_fwd": dropout_fwd,
    "fp32.dropout_bwd": dropout_bwd,
    "fp32.loss_grad": loss_grad,
    "fp32.conv_bwd_data": conv_bwd_data,
    "fp32.linear_bwd_data": linear_bwd_data,
    "fp32.conv_bwd_weight": conv_bwd_weight,
    "fp32.linear_bwd_weight": linear_bwd_weight,
    "fp32.sgd": sgd,
    "fp32.bias_grad": bias_grad,
    "fp32.gconv_fwd": gconv_fwd,
    "fp32.gconv_bwd_data": gconv_bwd_data,
    "fp32.gconv_bwd_weight": gconv_bwd_weight,
    **fl.make_ops(PREFIX),
    **branch.make_ops(PREFIX),
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
