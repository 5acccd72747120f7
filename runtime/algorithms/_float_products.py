"""FP32's products: convolutions (dense; grouped, depthwise or dilated) and linear layers in
float32, each kind's forward and backward lowering beside the op functions that run them
(`fp32.conv_*`, `fp32.gconv_*`, `fp32.linear_*`), and a layer's optional bias. FP32 lowers
its products here, NITI the products of its float islands; the emulated recipes take the
bias helpers (their products are _products.py). Not a recipe."""

from __future__ import annotations

import numpy as np

from ..nn import has_bias
from . import _branch_layers as branch
from ._sgd import emit_sgd, emit_weight_sgd

# ---------------------------------------------------------------- lowering


def conv_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    w = _weight(b, layer)
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
    return out


def conv_backward(b, layer, err, needs_input_error):
    if not _plain_conv(layer):
        return _gconv_backward(b, layer, err, needs_input_error)
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in, w, macs = f"err.{layer.name}", f"{layer.name}.w", b.find(f"{layer.name}.fwd").macs
    attrs = dict(stride=layer.stride, pad=layer.padding, in_hw=x_shape[1:3], kernel=(layer.kernel, layer.kernel))
    if needs_input_error:
        b.tensor(err_in, x_shape, "float32", "error")
        b.op(
            f"{layer.name}.bwd_data",
            "fp32.conv_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("conv2d_bwd_data_f32",),
            macs,
            product=("conv", "backward_data"),
            **attrs,
        )
    grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "float32", "grad")
    b.op(
        f"{layer.name}.bwd_weight",
        "fp32.conv_bwd_weight",
        layer.name,
        "backward",
        (err, x),
        (grad,),
        ("conv2d_bwd_weight_f32",),
        macs,
        product=("conv", "backward_weight"),
        **attrs,
    )
    _update(b, layer, err, grad)
    return err_in if needs_input_error else None


def _gconv_backward(b, layer, err, needs_input_error):
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
    _update(b, layer, err, grad)
    return err_in


def linear_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    w = _weight(b, layer)
    b.op(
        f"{layer.name}.fwd",
        "fp32.linear_fwd",
        layer.name,
        "forward",
        (x, w, *bias_param(b, layer)),
        (out,),
        ("gemm_f32",),
        shape[0] * layer.in_features * layer.out_features,
        workspace=(0, b.tensors[w].nbytes),
    )  # the cpu gemm_f32's transposed copy of w (bindings_fp32.cpp)
    return out


def linear_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in, w, macs = f"err.{layer.name}", f"{layer.name}.w", b.find(f"{layer.name}.fwd").macs
    if needs_input_error:
        b.tensor(err_in, b.tensors[x].shape, "float32", "error")
        b.op(
            f"{layer.name}.bwd_data",
            "fp32.linear_bwd_data",
            layer.name,
            "backward",
            (err, w),
            (err_in,),
            ("gemm_f32",),
            macs,
        )  # err @ w reads w as it is: no transposed copy
    grad = b.tensor(f"{layer.name}.grad", layer.weight_shape, "float32", "grad")
    b.op(
        f"{layer.name}.bwd_weight",
        "fp32.linear_bwd_weight",
        layer.name,
        "backward",
        (err, x),
        (grad,),
        ("gemm_f32",),
        macs,
        workspace=(4 * layer.weight_shape[0], 0),  # err^T, copied
    )
    _update(b, layer, err, grad)
    return err_in if needs_input_error else None


def _weight(b, layer) -> str:
    """The layer's float32 weight and its SGD velocity (`<layer>.v`)."""
    w = b.param(f"{layer.name}.w", layer.weight_shape, "float32")
    b.tensor(f"{layer.name}.v", layer.weight_shape, "float32", "state")
    return w


def _update(b, layer, err, grad) -> None:
    """SGD on the weight by `grad`, and on the bias (if any) by `err` summed over rows."""
    emit_weight_sgd(b, layer, grad)
    if has_bias(layer):
        emit_sgd(b, layer.name, f"{layer.name}.b", bias_grad_op(b, layer, err))


def _plain_conv(layer) -> bool:
    return layer.groups == 1 and layer.dilation == 1


def _depthwise(layer) -> bool:
    """Through the CONTRACT-dwconv hooks (undilated); a dilated one goes dense (zero-inserted)."""
    return layer.depthwise and layer.dilation == 1


_GCONV_HOOKS = {
    True: {  # depthwise
        "forward": "dwconv2d_f32",
        "backward_data": "dwconv2d_bwd_data_f32",
        "backward_weight": "dwconv2d_bwd_weight_f32",
    },
    False: {
        "forward": "conv2d_f32",
        "backward_data": "conv2d_bwd_data_f32",
        "backward_weight": "conv2d_bwd_weight_f32",
    },
}


def _gconv_hooks(layer, pass_) -> tuple:
    return (_GCONV_HOOKS[_depthwise(layer)][pass_],)


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


# ---------------------------------------------------------------- running ops
# Op functions (backend, op, env, ctx): each calls the hook of the backend it is handed.


def conv_fwd(backend, op, env, ctx) -> dict:
    y = backend.conv2d_f32(env[op.inputs[0]], env[op.inputs[1]], op.attrs["stride"], op.attrs["pad"])
    return {op.outputs[0]: with_bias(backend, y, op, env)}


def conv_bwd_data(backend, op, env, ctx) -> dict:
    a = op.attrs
    return {
        op.outputs[0]: backend.conv2d_bwd_data_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["stride"], a["pad"], a["in_hw"]
        )
    }


def conv_bwd_weight(backend, op, env, ctx) -> dict:
    a = op.attrs
    return {
        op.outputs[0]: backend.conv2d_bwd_weight_f32(
            env[op.inputs[0]], env[op.inputs[1]], a["stride"], a["pad"], a["kernel"]
        )
    }


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


def linear_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    return {op.outputs[0]: with_bias(backend, backend.gemm_f32(x.reshape(x.shape[0], -1), env[op.inputs[1]]), op, env)}


def linear_bwd_data(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.gemm_f32(env[op.inputs[0]], env[op.inputs[1]], False)}  # err[B,out] @ w[out,in]


def linear_bwd_weight(backend, op, env, ctx) -> dict:
    """err^T x: gemm_f32 on a transposed copy of the error (batch x outputs: small)."""
    err, x = env[op.inputs[0]], env[op.inputs[1]]
    return {op.outputs[0]: backend.gemm_f32(np.ascontiguousarray(err.T), x.reshape(x.shape[0], -1), False)}


def with_bias(backend, y, op, env):
    """`y` plus the bias the op names as its third input, if it has one."""
    if len(op.inputs) < 3:
        return y
    return backend.bias_add_f32(np.asarray(y, np.float32), np.asarray(env[op.inputs[2]], np.float32))


def bias_grad(backend, op, env, ctx) -> dict:
    return {op.outputs[0]: backend.channel_sum_f32(np.ascontiguousarray(env[op.inputs[0]]))}


OPS = {
    "fp32.conv_fwd": conv_fwd,
    "fp32.conv_bwd_data": conv_bwd_data,
    "fp32.conv_bwd_weight": conv_bwd_weight,
    "fp32.gconv_fwd": gconv_fwd,
    "fp32.gconv_bwd_data": gconv_bwd_data,
    "fp32.gconv_bwd_weight": gconv_bwd_weight,
    "fp32.linear_fwd": linear_fwd,
    "fp32.linear_bwd_data": linear_bwd_data,
    "fp32.linear_bwd_weight": linear_bwd_weight,
    "fp32.bias_grad": bias_grad,
}
