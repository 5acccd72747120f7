"""FP32's layers between products: ReLU, max-pool, windowed average pool, flatten and dropout
in float32, each kind's forward and backward lowering beside the op functions that run them
(`fp32.relu_*`, `fp32.maxpool_*`, `fp32.avgpool2d_*`, `fp32.reshape`, `fp32.dropout_*`). FP32,
the emulated recipes and NITI's float islands lower these layers here. Not a recipe."""

from __future__ import annotations

import numpy as np

from . import _branch_layers as branch
from . import _float_layers as fl

F32 = ("numpy_f32",)

# ---------------------------------------------------------------- lowering


def relu_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(f"{layer.name}.fwd", "fp32.relu_fwd", layer.name, "forward", (x,), (out,), ("relu_f32",))
    return out


def relu_backward(b, layer, err, needs_input_error):
    x, out = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "float32", "error")
    b.op(f"{layer.name}.bwd", "fp32.relu_bwd", layer.name, "backward", (err, out), (err_in,), ("relu_bwd_f32",))
    return err_in


def maxpool_forward(b, layer, x, shape):
    """A plain max-pool; one with padding or ceil_mode is _branch_layers'."""
    if branch.is_padded_pool(layer):
        return branch.maxpool_pad_forward(b, layer, x, shape)
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
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
    return out


def maxpool_backward(b, layer, err, needs_input_error):
    if branch.is_padded_pool(layer):
        return branch.maxpool_pad_backward(b, layer, err, needs_input_error)
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = b.tensor(f"err.{layer.name}", x_shape, "float32", "error")
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
    return err_in


def avgpool2d_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(
        f"{layer.name}.fwd",
        "fp32.avgpool2d_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        F32,
        **_avgpool_attrs(layer, b.tensors[x].shape),
    )
    return out


def avgpool2d_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = b.tensor(f"err.{layer.name}", x_shape, "float32", "error")
    b.op(
        f"{layer.name}.bwd",
        "fp32.avgpool2d_bwd",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        F32,
        **_avgpool_attrs(layer, x_shape),
    )
    return err_in


def _avgpool_attrs(layer, x_shape) -> dict:
    return dict(
        kernel=layer.kernel,
        stride=layer.stride,
        pad=layer.padding,
        count_include_pad=layer.count_include_pad,
        in_hw=tuple(x_shape[1:3]),
    )


def flatten_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(f"{layer.name}.fwd", "fp32.reshape", layer.name, "forward", (x,), (out,), (), shape=shape, alias=True)
    return out


def flatten_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    x_shape = b.tensors[x].shape
    err_in = b.tensor(f"err.{layer.name}", x_shape, "float32", "error")
    b.op(f"{layer.name}.bwd", "fp32.reshape", layer.name, "backward", (err,), (err_in,), (), shape=x_shape, alias=True)
    return err_in


def dropout_forward(b, layer, x, shape):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
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


def dropout_backward(b, layer, err, needs_input_error):
    x, _ = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "float32", "error")
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


# ---------------------------------------------------------------- running ops
# Op functions (backend, op, env, ctx): each calls the hook of the backend it is handed;
# those marked "no backend" are NumPy alone.


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


OPS = {
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
}
