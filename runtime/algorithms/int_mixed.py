"""NITI's mixed precision: the layers of mobile CNNs that have no integer form in NITI run
as float32 ops on the CPU between int8 tensors. Not a recipe: niti.py lowers through it.

Mandheling (Xu et al., MobiCom 2022, section 3) trains this way: the int8 products run on
the DSP, and the operators that fixed point serves badly (batch norm, non-linear functions)
run in float on the CPU. Here:

- `input_dtype` says what each layer reads. Products (conv, depthwise conv, linear) read
  int8. Batch norm, the sigmoid family and clip (ReLU6), the channel-broadcast Mul of
  squeeze-excitation, concat, channel slice and shuffle, a padded max-pool and an average
  pool whose window is not a power of two read float32. ReLU, plain max-pool, flatten,
  dropout, an Add of two int8 tensors and power-of-two pools take what they get, so a
  float island ends at the next product.
- `cast` converts at the edges (graph.lower puts it there): int8 -> float32 is exact
  (q * 2**e); float32 -> int8 takes NITI's input rule, exponent ceil(log2(max|x|)) - 7
  (numerics.float_exponent), rounded by the role's mode (activations forward, errors
  backward; psto, which needs an integer's discarded bits, as sto).
- A product with a bias keeps its exact int32 sums and adds the float32 bias while
  turning them to float (`bias_fwd`, the dequantize_compensate hook with a zero scale
  term); its backward sums the error into the bias gradient and casts the error to int8
  for the integer backward.
- The float layers are FP32's own (`fp32.forward` / `fp32.backward`: batch norm,
  activations and the rest, on native CPU kernels), and their parameters (batch norm's
  gamma and beta, biases) take FP32's SGD with the recipe's `optimizer` (lr, momentum,
  weight_decay), scaled by the run's learning-rate schedule.
"""

from __future__ import annotations

import numpy as np

from .. import numerics
from ..nn import (
    INPUT,
    Add,
    AvgPool2d,
    BatchNorm2d,
    ChannelShuffle,
    Concat,
    Conv2d,
    GlobalAvgPool,
    Linear,
    Mul,
    Nonlinearity,
    SliceChannels,
    has_bias,
    inputs_of,
)
from ..numerics import QTensor
from . import _branch_layers as branch
from . import fp32, int_fused
from ._float_products import bias_grad_op, bias_param
from ._sgd import emit_sgd

FLOAT_LAYERS = (BatchNorm2d, Nonlinearity, Mul, Concat, SliceChannels, ChannelShuffle)
PRODUCTS = (Conv2d, Linear)
FLOAT_ROUNDING = {"psto": "sto"}  # a role's rounding mode -> quantize_f's, where they differ


def _pow2(n: int) -> bool:
    return n > 0 and not n & (n - 1)


def integer_pool(layer, in_shape) -> bool:
    """Does NITI divide this average pool by a shift (int_residual): a power-of-two window,
    and for a windowed pool stride = kernel and no padding?"""
    if isinstance(layer, GlobalAvgPool):
        return _pow2(in_shape[1] * in_shape[2])
    return layer.stride == layer.kernel and not layer.padding and _pow2(layer.kernel)


def runs_float(layer, in_shape) -> bool:
    """Has NITI no integer form for `layer` reading `in_shape` (N, ...)?"""
    if isinstance(layer, FLOAT_LAYERS) or branch.is_padded_pool(layer):
        return True
    return isinstance(layer, (GlobalAvgPool, AvgPool2d)) and not integer_pool(layer, in_shape)


def input_dtype(b, layer, inputs) -> str | None:
    """The dtype `layer` reads its inputs in (graph.lower casts the others), or None: as they come."""
    return wanted_dtype(layer, tuple(b.tensors[t].dtype for t in inputs), b.tensors[inputs[0]].shape)


def wanted_dtype(layer, dtypes: tuple[str, ...], in_shape) -> str | None:
    """What `layer` reading tensors of `dtypes` (the first of shape `in_shape`, (N, ...)) wants them as."""
    if isinstance(layer, PRODUCTS):
        return "int8"
    if runs_float(layer, in_shape):
        return "float32"
    if isinstance(layer, Add) and len(set(dtypes)) > 1:
        return "float32"
    return None


def layer_dtypes(model) -> dict[str, tuple[str, str]]:
    """layer name -> (the dtype it reads, the dtype it writes) under NITI's lowering, without
    lowering: the same rule (`wanted_dtype`) walked over the model (the ONNX export's)."""
    dtype_of, shape_of, formats, previous = {INPUT: "int8"}, {INPUT: tuple(model.input_shape)}, {}, INPUT
    for layer, shape in zip(model.layers, model.shapes()):
        names = inputs_of(layer, previous)
        dtypes = tuple(dtype_of[n] for n in names)
        reads = wanted_dtype(layer, dtypes, (1, *shape_of[names[0]])) or dtypes[0]
        if isinstance(layer, PRODUCTS):
            writes = "float32" if has_bias(layer) else "int8"
        else:
            writes = "float32" if reads == "float32" else "int8"
        formats[layer.name] = (reads, writes)
        dtype_of[layer.name], shape_of[layer.name], previous = writes, tuple(shape), layer.name
    return formats


# ---------------------------------------------------------------- lowering


def cast(b, tensor, dtype, name, layer, phase) -> str:
    """Emit the op that converts `tensor` to `dtype` ("int8" or "float32") as tensor `name`."""
    spec = b.tensors[tensor]
    role = "error" if phase == "backward" or spec.role == "error" else "activation"
    out = b.tensor(name, spec.shape, dtype, role)
    if dtype == "float32":
        b.op(f"{name}.cast", "niti.to_float", layer, phase, (tensor,), (out,), ("dequantize",))
    else:
        formats = b.recipe.tensors
        mode = (formats.errors if role == "error" else formats.activations).rounding
        # NITI's pseudo-stochastic rounding draws on an integer's discarded bits; a float has
        # none to draw on, so it rounds stochastically with the counter RNG, as psto approximates
        mode = FLOAT_ROUNDING.get(mode, mode)
        # the range is the whole batch's: never sliced by rows
        b.op(
            f"{name}.cast",
            "niti.to_int8",
            layer,
            phase,
            (tensor,),
            (out,),
            ("absmax_f", "quantize_f"),
            mode=mode,
            rows="coupled",
        )
    return out


def forward_float(b, layer, x, shape) -> str:
    """A layer with float inputs: FP32's lowering (its op kinds are fp32.*), which reads the
    inputs graph.lower cast (`b.layer_inputs`)."""
    return fp32.forward(b, layer, x, shape)


def forward_bias(b, layer, acc, shape) -> str:
    """A product's int32 sums `acc` plus its float32 bias: the layer's float output."""
    bias = bias_param(b, layer)[0]
    out = b.tensor(f"{layer.name}.out", shape, "float32", "activation")
    b.op(
        f"{layer.name}.bias",
        "niti.bias_fwd",
        layer.name,
        "forward",
        (acc, *b.find(f"{layer.name}.fwd").inputs, bias),
        (out,),
        ("dequantize_compensate",),
    )
    return out


def backward_bias(b, layer, err) -> str:
    """The bias gradient and update of a product with a bias; its error as int8."""
    emit_sgd(b, layer.name, f"{layer.name}.b", bias_grad_op(b, layer, err))
    return cast(b, err, "int8", f"{err}.int8", layer.name, "backward")


def init_params(model) -> dict:
    """Batch norm's gamma 1 and beta 0, zero biases, and their SGD velocities (FP32's)."""
    params = {}
    for layer in model.layers:
        if isinstance(layer, BatchNorm2d):
            params.update(fp32.init_bn_params(layer))
        elif isinstance(layer, PRODUCTS) and has_bias(layer):
            params[f"{layer.name}.b"] = np.zeros(layer.bias_shape, np.float32)
            params[f"{layer.name}.b.v"] = np.zeros(layer.bias_shape, np.float32)
    return params


# ---------------------------------------------------------------- running ops


def to_float(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    return {op.outputs[0]: backend.dequantize(x.q, 2.0**x.e)}


def to_int8(backend, op, env, ctx) -> dict:
    x = env[op.inputs[0]]
    e = numerics.float_exponent(backend.absmax_f(x))
    return {op.outputs[0]: QTensor(backend.quantize_f(x, 2.0**e, 8, op.attrs["mode"], ctx.rng(op)), e)}


def bias_fwd(backend, op, env, ctx) -> dict:
    """float32(sums * 2**(e_x + e_w)) + bias per output channel, the sums' memory reused."""
    acc, x, w, bias = (env[t] for t in op.inputs)
    _, y = backend.dequantize_compensate(acc, 2.0 ** (x.e + w.e), np.zeros_like(bias), bias, reuse=True)
    return {op.outputs[0]: y}


OPS = {"niti.to_float": to_float, "niti.to_int8": to_int8, "niti.bias_fwd": bias_fwd, **int_fused.OPS}
