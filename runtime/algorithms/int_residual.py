"""Residual networks under NITI's integer tensors: residual add, global average pooling
and the sum of errors where branches join. Not a recipe: niti.py lowers these layers
through it.

- Add: the two int8 operands are aligned on the coarser exponent by shifting the finer
  one right (nearest), added in int16, then brought back to int8 by the sum's range
  (docs/ARCHITECTURE.md). Its backward passes the error unchanged to both inputs (the
  derivative of a + b), which `graph.lower` does without an op.
- GlobalAvgPool: int32 sum over H x W; the divisor H*W is a power of two for the CIFAR
  ResNets (4 x 4), so dividing is subtracting log2(H*W) from the exponent, exact.
  Other sizes fail at lowering with the layer's name. Backward: the error broadcast to
  every position, exponent lowered by the same log2(H*W).
- AvgPool2d (an imported AveragePool) with stride = kernel, no padding and a power-of-two
  window: the same hook as the global pool over every window at once (the windows laid
  out as a batch of kernel x kernel images), so the range is the whole output's; backward
  spreads each error over its window, exponent lowered by log2(kernel**2). Other windows
  fail at lowering with the layer's name.
- Errors joining where branches meet add like Add, pairwise.
A given shift (StepContext.shifts: the memory layer's common shift over micro-batch
slices, or the one the forward pass used when an op is recomputed) goes to the hooks,
which follow the rule of Backend.requantize.
"""

from __future__ import annotations

import numpy as np

from ..errors import LoweringError
from ..numerics import QTensor


def check_layer(layer, shape, recipe):
    """GlobalAvgPool needs a power-of-two H*W under integer tensors."""
    hw = shape[0] * shape[1]
    if hw & (hw - 1):
        raise LoweringError(
            f"recipe {recipe.name!r} cannot lower layer {layer.name!r}: global average pool "
            f"over {shape[0]}x{shape[1]} needs a power-of-two H*W to divide by a shift"
        )


def check_window(layer, recipe):
    """An average pool NITI divides by a shift: stride = kernel, no padding, kernel**2 a power of two."""
    k = layer.kernel
    if layer.stride != k or layer.padding or k & (k - 1):
        raise LoweringError(
            f"recipe {recipe.name!r} cannot lower layer {layer.name!r}: an average pool under "
            f"integer tensors needs stride = kernel, no padding and a power-of-two kernel (it "
            f"divides by a shift); this one has kernel {k}, stride {layer.stride}, padding "
            f"{layer.padding}"
        )


def forward_avgpool2d(b, layer, x, shape):
    check_window(layer, b.recipe)
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
    b.op(
        f"{layer.name}.fwd",
        "niti.avgpool2d_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        ("avgpool_global_s8",),
        mode=b.recipe.tensors.activations.rounding,
        kernel=layer.kernel,
        out_hw=tuple(shape[1:3]),
    )
    return out


def backward_avgpool2d(b, layer, err, needs_input_error=True):
    x, _ = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "int8", "error")
    b.op(
        f"{layer.name}.bwd",
        "niti.avgpool2d_bwd",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        (),
        kernel=layer.kernel,
        in_hw=b.tensors[x].shape[1:3],
    )
    return err_in


def forward_add(b, layer, x, shape):
    x, skip = b.layer_inputs[layer.name]  # as graph.lower gave them (a mixed recipe's: after its casts)
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
    b.op(
        f"{layer.name}.fwd",
        "niti.add",
        layer.name,
        "forward",
        (x, skip),
        (out,),
        ("add_align_s8",),
        mode=b.recipe.tensors.activations.rounding,
    )
    return out


def forward_avgpool(b, layer, x, shape):
    check_layer(layer, b.tensors[x].shape[1:3], b.recipe)
    out = b.tensor(f"{layer.name}.out", shape, "int8", "activation")
    b.op(
        f"{layer.name}.fwd",
        "niti.avgpool_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        ("avgpool_global_s8",),
        mode=b.recipe.tensors.activations.rounding,
    )
    return out


def backward_avgpool(b, layer, err, needs_input_error=True):
    x, _ = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "int8", "error")
    b.op(
        f"{layer.name}.bwd",
        "niti.avgpool_bwd",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        (),
        in_hw=b.tensors[x].shape[1:3],
    )
    return err_in


def join_errors(b, name, errs):
    out = b.tensor(name, b.tensors[errs[0]].shape, "int8", "error")
    b.op(
        f"{name}.join",
        "niti.join",
        "join",
        "backward",
        tuple(errs),
        (out,),
        ("add_align_s8",),
        mode=b.recipe.tensors.errors.rounding,
    )
    return out


# Op functions (backend, op, env, ctx), each calling its backend's hook. The range hooks
# return (q, exponent); the shift they used, that exponent less the one their operands fix,
# goes to ctx.note_shift: slices of a batch and a recomputed op must share it.


def add(backend, op, env, ctx) -> dict:
    a, c = env[op.inputs[0]], env[op.inputs[1]]
    q, e = backend.add_align_s8(a.q, a.e, c.q, c.e, op.attrs["mode"], ctx.rng(op), ctx.given_shift(op))
    ctx.note_shift(op, e - max(a.e, c.e))
    return {op.outputs[0]: QTensor(q, e)}


def join(backend, op, env, ctx) -> dict:
    """The errors of a tensor read by several layers, summed one add_align_s8 at a time."""
    total = env[op.inputs[0]]
    for name in op.inputs[1:]:
        other = env[name]
        q, e = backend.add_align_s8(
            total.q, total.e, other.q, other.e, op.attrs["mode"], ctx.rng(op), ctx.given_shift(op)
        )
        ctx.note_shift(op, e - max(total.e, other.e))
        total = QTensor(q, e)
    return {op.outputs[0]: total}


def _avgpool_global(backend, op, ctx, x: np.ndarray, e: int) -> tuple:
    """avgpool_global_s8 over images `x`: (q, exponent); the shift noted is the exponent less
    the sum's (e - log2 of the pixels averaged)."""
    q, out_e = backend.avgpool_global_s8(x, e, op.attrs["mode"], ctx.rng(op), ctx.given_shift(op))
    ctx.note_shift(op, out_e - (e - ((x.shape[1] * x.shape[2]).bit_length() - 1)))
    return q, out_e


def avgpool_fwd(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    return {op.outputs[0]: QTensor(*_avgpool_global(backend, op, ctx, x.q, x.e))}


def avgpool_bwd(backend, op, env, ctx) -> dict:
    """The error broadcast over the pooled positions: no backend."""
    err = env[op.inputs[0]]
    h, w = op.attrs["in_hw"]
    q = np.broadcast_to(err.q[:, None, None, :], (err.q.shape[0], h, w, err.q.shape[1])).copy()
    return {op.outputs[0]: QTensor(q, err.e - ((h * w).bit_length() - 1))}


def avgpool2d_fwd(backend, op, env, ctx) -> dict:
    """Every window at once, laid out as a batch of kernel x kernel images."""
    x, k = env[op.inputs[0]], op.attrs["kernel"]
    (oh, ow), n, c = op.attrs["out_hw"], x.q.shape[0], x.q.shape[3]
    windows = x.q[:, : oh * k, : ow * k].reshape(n, oh, k, ow, k, c).transpose(0, 1, 3, 2, 4, 5)
    q, e = _avgpool_global(backend, op, ctx, np.ascontiguousarray(windows.reshape(n * oh * ow, k, k, c)), x.e)
    return {op.outputs[0]: QTensor(q.reshape(n, oh, ow, c), e)}


def avgpool2d_bwd(backend, op, env, ctx) -> dict:
    """Each error spread over its window: no backend."""
    err, k = env[op.inputs[0]], op.attrs["kernel"]
    h, w = op.attrs["in_hw"]
    n, oh, ow, c = err.q.shape
    q = np.zeros((n, h, w, c), np.int8)  # rows and columns past the last window get no error
    q[:, : oh * k, : ow * k] = err.q.repeat(k, axis=1).repeat(k, axis=2)
    return {op.outputs[0]: QTensor(q, err.e - ((k * k).bit_length() - 1))}


OPS = {
    "niti.add": add,
    "niti.join": join,
    "niti.avgpool_fwd": avgpool_fwd,
    "niti.avgpool_bwd": avgpool_bwd,
    "niti.avgpool2d_fwd": avgpool2d_fwd,
    "niti.avgpool2d_bwd": avgpool2d_bwd,
}
