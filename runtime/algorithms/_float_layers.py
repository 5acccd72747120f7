"""Float layers the emulated recipes and FP32 share beyond FP32's chain layers:
batch normalisation, residual add, global average pooling, the sum of errors where
branches join, and windowed average pooling's numerics (ONNX AveragePool). Not a recipe:
no YAML names this module.

Batch norm takes optional quantizers for its statistics, its affine parameters and its
incoming error, so WAGEUBN's integer BN (Yang et al. 2020: 16-bit statistics, 8-bit
gamma/beta) is the same code with grids switched on; float recipes pass none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..float_ops import bn_backward_values, bn_forward_values
from ..layout import col2im, im2col, out_size

BN_EPS = 1e-5  # PyTorch's default; a layer keeps its own (nn.BatchNorm2d.eps, an import's epsilon)
F32 = ("numpy_f32",)


def _identity(x):
    return x


@dataclass(frozen=True)
class BNGrids:
    """Where batch norm rounds: `stat` (mean, variance, 1/std, x-hat), `affine` (gamma
    and beta as the forward uses them), `error` (the incoming error)."""

    stat: Callable = _identity
    affine: Callable = _identity
    error: Callable = _identity
    #: (stat, affine, error) bits when each is a power-of-two grid fitted to the range
    #: (float_ops.Pow2Grids): the bn_*_grid_f32 hooks run it; None: NumPy with the callables
    bits: tuple[int, int, int] | None = None


# ---------------------------------------------------------------- lowering


def native(grids) -> bool:
    """Do this module's ops run as backend hooks (bn_fwd_f32, add_f32, ...: a float batch norm)
    rather than as NumPy with rounding on `grids` (WAGEUBN's integer batch norm)?"""
    return grids is None or grids == BNGrids()


def _hooks(grids, hook) -> tuple:
    if native(grids):
        return (hook,)
    return (hook.replace("_f32", "_grid_f32"),) if grids.bits else F32


def bn_state_names(name):
    return f"{name}.gamma", f"{name}.beta", f"{name}.mean", f"{name}.var"


def forward_bn(b, layer, x, shape, prefix, training, grids=None):
    training = training and layer.name not in b.frozen  # a frozen batch norm evaluates (graph.lower)
    gamma, beta, mean, var = bn_state_names(layer.name)
    b.param(gamma, (layer.channels,), "float32")
    b.param(beta, (layer.channels,), "float32")
    b.tensor(mean, (layer.channels,), "float32", "state")
    b.tensor(var, (layer.channels,), "float32", "state")
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    xhat = b.tensor(f"{layer.name}.xhat", shape, "float32", "saved")
    inv = b.tensor(f"{layer.name}.inv_std", (layer.channels,), "float32", "saved")
    b.op(
        f"{layer.name}.fwd",
        f"{prefix}.bn_fwd",
        layer.name,
        "forward",
        (x, gamma, beta, mean, var),
        (out, xhat, inv, mean, var),
        _hooks(grids, "bn_fwd_f32"),
        int(np.prod(shape)),
        training=training,
        eps=layer.eps,
        momentum=layer.momentum,
        rows="coupled",
    )  # the layer's own (an import's: EfficientNet 1e-3)
    return out


def backward_bn(b, layer, err, needs_input_error, prefix, grids=None):
    """Emits the BN backward op; returns (err_in or None, [(param, grad), ...])."""
    x, _ = b.layer_io[layer.name]
    gamma, beta, _, _ = bn_state_names(layer.name)
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "float32", "error")
    if layer.name in b.frozen:  # running statistics: an affine map per channel, no gamma or beta gradient
        b.op(
            f"{layer.name}.bwd",
            f"{prefix}.bn_frozen_bwd",
            layer.name,
            "backward",
            (err, f"{layer.name}.inv_std", gamma),
            (err_in,),
            ("mul_f32",),
            int(np.prod(b.tensors[x].shape)),
        )
        return (err_in if needs_input_error else None), []
    g_gamma = b.tensor(f"{gamma}.grad", (layer.channels,), "float32", "grad")
    g_beta = b.tensor(f"{beta}.grad", (layer.channels,), "float32", "grad")
    b.op(
        f"{layer.name}.bwd",
        f"{prefix}.bn_bwd",
        layer.name,
        "backward",
        (err, f"{layer.name}.xhat", f"{layer.name}.inv_std", gamma),
        (err_in, g_gamma, g_beta),
        _hooks(grids, "bn_bwd_f32"),
        int(np.prod(b.tensors[x].shape)),
        rows="coupled",
    )  # batch statistics: never sliced by rows
    return (err_in if needs_input_error else None), [(gamma, g_gamma), (beta, g_beta)]


def forward_add(b, layer, x, shape, prefix):
    x, skip = b.layer_inputs[layer.name]  # as graph.lower gave them (a mixed recipe's: after its casts)
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(f"{layer.name}.fwd", f"{prefix}.add", layer.name, "forward", (x, skip), (out,), ("add_f32",))
    return out


def forward_avgpool(b, layer, x, shape, prefix):
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(
        f"{layer.name}.fwd",
        f"{prefix}.avgpool_fwd",
        layer.name,
        "forward",
        (x,),
        (out,),
        ("channel_mean_f32",),
        keep_dims=layer.keep_dims,
    )
    return out


def backward_avgpool(b, layer, err, prefix):
    x, _ = b.layer_io[layer.name]
    err_in = b.tensor(f"err.{layer.name}", b.tensors[x].shape, "float32", "error")
    b.op(
        f"{layer.name}.bwd",
        f"{prefix}.avgpool_bwd",
        layer.name,
        "backward",
        (err,),
        (err_in,),
        ("channel_mean_bwd_f32",),
        in_shape=b.tensors[x].shape,
    )
    return err_in


def join_errors(b, name, errs, prefix):
    out = b.tensor(name, b.tensors[errs[0]].shape, "float32", "error")
    b.op(f"{name}.join", f"{prefix}.join", "join", "backward", tuple(errs), (out,), ("add_f32",))
    return out


# ---------------------------------------------------------------- running ops


def make_ops(prefix: str, grids: BNGrids = BNGrids()) -> dict:
    """The op functions (backend, op, env, ctx) of this module under `prefix.` kinds: backend
    hooks, but a batch norm rounding on `grids` (not `native`) in NumPy."""
    if native(grids):
        bn_fwd, bn_bwd = bn_fwd_hook, bn_bwd_hook
    elif grids.bits:
        bn_fwd, bn_bwd = GridHooksBN(grids.bits).forward, GridHooksBN(grids.bits).backward
    else:
        bn_fwd, bn_bwd = NumpyBN(grids).forward, NumpyBN(grids).backward
    ops = dict(
        add=add,
        join=join,
        avgpool_fwd=avgpool_fwd,
        avgpool_bwd=avgpool_bwd,
        bn_frozen_bwd=bn_frozen_bwd,
        bn_fwd=bn_fwd,
        bn_bwd=bn_bwd,
    )
    return {f"{prefix}.{name}": fn for name, fn in ops.items()}


def add(backend, op, env, ctx):
    return {op.outputs[0]: backend.add_f32(env[op.inputs[0]], env[op.inputs[1]])}


def join(backend, op, env, ctx):
    total = env[op.inputs[0]]
    for name in op.inputs[1:]:
        total = backend.add_f32(total, env[name])
    return {op.outputs[0]: total}


def avgpool_fwd(backend, op, env, ctx):  # (N, C), or (N, 1, 1, C) for a GlobalAvgPool with keep_dims
    x = env[op.inputs[0]]
    mean = backend.channel_mean_f32(x)
    return {op.outputs[0]: mean.reshape(x.shape[0], 1, 1, -1) if op.attrs.get("keep_dims") else mean}


def avgpool_bwd(backend, op, env, ctx):  # the batch is err's: a micro-batch may be smaller than the planned one
    return {
        op.outputs[0]: backend.channel_mean_bwd_f32(
            np.asarray(env[op.inputs[0]], np.float32), op.attrs["in_shape"][1:3]
        )
    }


def bn_fwd_hook(backend, op, env, ctx):  # float32 operands: FP8 keeps gamma and beta in float16
    x, gamma, beta, mean, var = (np.asarray(env[t], np.float32) for t in op.inputs)
    a = op.attrs
    return dict(zip(op.outputs, backend.bn_fwd_f32(x, gamma, beta, mean, var, a["training"], a["momentum"], a["eps"])))


def bn_bwd_hook(backend, op, env, ctx):
    return dict(zip(op.outputs, backend.bn_bwd_f32(*(np.asarray(env[t], np.float32) for t in op.inputs))))


def bn_frozen_bwd(backend, op, env, ctx):  # err * gamma / sqrt(running var + eps), channel by channel
    err, inv, gamma = (np.asarray(env[t], np.float32) for t in op.inputs)
    n, c = err.shape[0], err.shape[-1]
    scale = np.ascontiguousarray(np.broadcast_to((gamma * inv).reshape(1, 1, 1, c), (n, 1, 1, c)))
    return {op.outputs[0]: backend.mul_f32(err, scale)}


@dataclass(frozen=True)
class GridHooksBN:
    """Batch norm on power-of-two grids fitted to the range (`BNGrids.bits`): the
    bn_*_grid_f32 hooks."""

    bits: tuple[int, int, int]  # (stat, affine, error)

    def forward(self, backend, op, env, ctx):
        x, gamma, beta, mean, var = (np.asarray(env[t], np.float32) for t in op.inputs)
        a, (stat, affine, _) = op.attrs, self.bits
        y = backend.bn_fwd_grid_f32(x, gamma, beta, mean, var, a["training"], a["momentum"], a["eps"], stat, affine)
        return dict(zip(op.outputs, y))

    def backward(self, backend, op, env, ctx):
        _, affine, error = self.bits
        err, xhat, inv, gamma = (np.asarray(env[t], np.float32) for t in op.inputs)
        return dict(zip(op.outputs, backend.bn_bwd_grid_f32(err, xhat, inv, gamma, error, affine)))


@dataclass(frozen=True)
class NumpyBN:
    """Batch norm rounding with `grids`' callables, in NumPy (float_ops.bn_*_values)."""

    grids: BNGrids

    def forward(self, backend, op, env, ctx):
        x, gamma, beta, mean, var = (env[t] for t in op.inputs)
        a = op.attrs
        y, xhat, inv, mean, var = bn_forward_values(
            x, gamma, beta, mean, var, a["training"], self.grids, a["momentum"], a["eps"]
        )
        f32 = lambda v: np.asarray(v, np.float32)
        return dict(zip(op.outputs, (f32(y), f32(xhat), f32(inv), f32(mean), f32(var))))

    def backward(self, backend, op, env, ctx):
        err, xhat, inv, gamma = (env[t] for t in op.inputs)
        dx, d_gamma, d_beta = bn_backward_values(err, xhat, np.asarray(inv, np.float64), gamma, self.grids)
        return dict(zip(op.outputs, (dx.astype(np.float32), d_gamma.astype(np.float32), d_beta.astype(np.float32))))


def avgpool2d_divisors(in_hw, kernel, stride, pad, count_include_pad) -> np.ndarray:
    """(OH, OW, 1) float64: how many cells each window averages (ONNX AveragePool's rule)."""
    h, w = in_hw
    oh, ow = out_size(h, kernel, stride, pad), out_size(w, kernel, stride, pad)
    if count_include_pad:
        return np.full((oh, ow, 1), float(kernel * kernel))
    inside = im2col(np.ones((1, h, w, 1)), kernel, kernel, stride, pad).sum(axis=1)
    return inside.reshape(oh, ow, 1)


def avgpool2d_forward(x, kernel, stride, pad, count_include_pad) -> np.ndarray:
    """Window means of NHWC `x`, zero padding, float64 sums."""
    n, h, w, c = x.shape
    divisors = avgpool2d_divisors((h, w), kernel, stride, pad, count_include_pad)
    oh, ow = divisors.shape[:2]
    sums = im2col(x, kernel, kernel, stride, pad).reshape(n, oh, ow, kernel * kernel, c).sum(axis=3)
    return (sums / divisors).astype(np.float32)


def avgpool2d_backward(err, in_hw, kernel, stride, pad, count_include_pad) -> np.ndarray:
    """Each output's error spread evenly over the cells its window averaged (col2im adds overlaps)."""
    n, oh, ow, c = err.shape
    share = np.asarray(err, np.float64) / avgpool2d_divisors(in_hw, kernel, stride, pad, count_include_pad)
    cols = np.broadcast_to(share[:, :, :, None, :], (n, oh, ow, kernel * kernel, c)).reshape(n * oh * ow, -1)
    return col2im(cols, err.shape, (kernel, kernel, c), stride, pad, in_hw).astype(np.float32)


def init_bn(layer) -> dict:
    gamma, beta, mean, var = bn_state_names(layer.name)
    c = layer.channels
    return {
        gamma: np.ones(c, np.float32),
        beta: np.zeros(c, np.float32),
        mean: np.zeros(c, np.float32),
        var: np.ones(c, np.float32),
    }
