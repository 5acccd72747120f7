"""Chunk-based FP8 training (Wang et al., "Training Deep Neural Networks with 8-bit
Floating Point Numbers", NeurIPS 2018).

- Weights, activations and errors enter every conv/linear product as FP8 (1-5-2: one
  sign, 5 exponent, 2 mantissa bits, with subnormals), rounded to nearest even.
- Products are FP16, and every dot product is accumulated in FP16 in chunks of
  `chunk_size` (64): the products of a chunk are added one by one in FP16, then the chunk
  sums are added one by one in FP16, which keeps small terms from being swamped by a
  long running sum (the `matmul_fp16_chunked` hook; float_ops.py defines it). `chunk_sum: fp32` sums inside a chunk
  in float32 and rounds the chunk sum to FP16 once (a fast emulation, more accurate
  inside a chunk than the paper's FP16 adds; see configs/algorithms/fp8.yaml).
- Master weights and momentum are FP16; the weight update w - lr * v rounds to FP16
  stochastically (counter RNG), so updates smaller than half an FP16 step still move w
  on average.
- The loss is scaled by `loss_scale` so errors stay inside FP8's range; the update
  divides it out.
- The first and last layers keep FP16 operands (`first_last_fp16`), as in the paper.

Emulated: IEEE FP16 arithmetic on float16 arrays (NumPy rounds each FP16 operation
correctly), FP8 as FP16 values on the FP8 grid. Batch norm (ResNets) stays float32.
"""

from __future__ import annotations

import numpy as np

from .. import float_ops
from . import fp32
from ._emulated import Emulated, module_contract
from ._products import per_group
from ._quant import Scaled, to_fp8, to_fp16
from ._recipe_numerics import Numerics


def _pow2(value):
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value > 0
        and float(np.log2(value)).is_integer()
    )
    return None if ok else "must be a power of two"


def _chunk(value):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "must be an integer >= 1"


def _flag(value):
    return None if isinstance(value, bool) else "must be true or false"


def _chunk_sum(value):
    return None if value in ("fp16", "fp32") else "must be 'fp16' (the paper's FP16 adds) or 'fp32'"


class FP8Numerics(Numerics):
    prefix = "fp8"
    weight_dtype = "float16"
    known_params = {"loss_scale": _pow2, "chunk_size": _chunk, "first_last_fp16": _flag, "chunk_sum": _chunk_sum}

    quant_hooks = ("round_float",)
    update_hooks = ("round_float",)
    update_bytes_per_element = 40  # update(): float64 w, g, v and their products (38, tracemalloc)

    def quant_workspace(self, recipe, role, shape):
        """The weights' grid (_grid on float16 weights) makes a float32 copy first: 8 bytes an element."""
        return (0, int(np.prod(shape)) * 8) if role == "weights" else None

    def product_hooks(self, kind):
        if kind.startswith("dw"):  # a depthwise conv's own FP16 products (_depthwise_chunked)
            return {
                "dwconv": ("dwconv2d_fp16_chunked",),
                "dwconv_bwd_data": ("dwconv2d_bwd_data_fp16",),
                "dwconv_bwd_weight": ("dwconv2d_bwd_weight_fp16_chunked",),
            }[kind]
        return {
            "conv": ("matmul_fp16_chunked", "im2col"),
            "conv_bwd_weight": ("matmul_fp16_chunked", "im2col"),
            "conv_bwd_data": ("matmul_fp16_chunked", "col2im", "round_float"),
        }.get(kind, ("matmul_fp16_chunked",))

    def _grid(self, backend, x, ctx, op):
        keep16 = self.param(ctx.recipe, "first_last_fp16", True) and op.attrs["position"] != "middle"
        return Scaled(to_fp16(backend, x) if keep16 else to_fp8(backend, x), 1.0)

    def product_attrs(self, recipe):
        return {"chunk": int(self.param(recipe, "chunk_size", 64))}  # matmul_fp16_chunked's packing

    def product_path(self, a_dtype, b_dtype):
        return "fp16"  # chunked_product, whatever the operands

    def quantized_dtype(self, recipe, role):
        return "float32"  # FP8 / FP16 grid values, held as float32 (to_fp8, to_fp16)

    def quant_weight(self, backend, w, ctx, op):
        return self._grid(backend, w, ctx, op)

    def quant_act(self, backend, x, ctx, op):
        return self._grid(backend, x, ctx, op)

    def quant_err(self, backend, err, state, ctx, op):
        return self._grid(backend, err, ctx, op), []

    def product(self, backend, kind, a, b, attrs, ctx):
        return chunked_product(
            backend,
            kind,
            a.q,
            b.q,
            attrs,
            int(self.param(ctx.recipe, "chunk_size", 64)),
            self.param(ctx.recipe, "chunk_sum", "fp16"),
        )

    def init_weight(self, layer, rng):
        return float_ops.round_float(super().init_weight(layer, rng), 5, 10, "nearest_even", None).astype(np.float16)

    def opt_state(self, param, value):
        return {f"{param}.v": np.zeros(np.shape(value), np.float16)}

    def update(self, backend, w, grad, state, ctx, op):
        """v = fp16(momentum * v + g); w = fp16_stochastic(w - lr * v), g unscaled + decay."""
        o = ctx.recipe.optimizer
        lr = o.lr * ctx.lr_factor()
        w64 = np.asarray(w, np.float64)
        g = np.asarray(grad, np.float64) / float(self.param(ctx.recipe, "loss_scale", 1024)) + o.weight_decay * w64
        v = to_fp16(backend, o.momentum * np.asarray(state[0], np.float64) + g)
        w = to_fp16(backend, w64 - lr * v.astype(np.float64), "sto", ctx.rng(op))
        return w.astype(np.float16), [v.astype(np.float16)]

    def loss(self, b, logits, labels):
        return fp32.loss(b, logits, labels, "fp8.loss_grad")


def chunked_product(backend, kind, a, b, attrs, chunk, chunk_sum="fp16"):
    """A layer product with FP16 chunked accumulation (matmul_fp16_chunked,
    whose right operand is K-major: no transposed copies of activations or patches);
    float32 result holding FP16 values."""
    if attrs.get("groups", 1) > 1:
        return _grouped_chunked(backend, kind, a, b, attrs, chunk, chunk_sum)
    c = np.ascontiguousarray
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    fp16_adds = chunk_sum == "fp16"
    if not attrs["conv"]:
        if kind == "fwd":
            return backend.matmul_fp16_chunked(c(a.reshape(a.shape[0], -1)), c(b.T), False, chunk, fp16_adds)
        if kind == "bwd_data":
            return backend.matmul_fp16_chunked(a, b, False, chunk, fp16_adds)
        return backend.matmul_fp16_chunked(a, c(b.reshape(b.shape[0], -1)), True, chunk, fp16_adds)
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        o, kh, kw, _ = b.shape
        cols = backend.im2col(a, kh, kw, s, p)
        out = backend.matmul_fp16_chunked(cols, c(b.reshape(o, -1).T), False, chunk, fp16_adds)
        return out.reshape(a.shape[0], *_out_hw(a.shape, kh, s, p), o)
    if kind == "bwd_data":
        o, kh, kw, ch = b.shape
        dcols = backend.matmul_fp16_chunked(a.reshape(-1, o), b.reshape(o, -1), False, chunk, fp16_adds)
        # overlapping windows add at most kh*kw terms; summed exactly, then rounded to FP16
        image = backend.col2im(dcols.astype(np.float64), a.shape[:3], (kh, kw, ch), s, p, attrs["in_hw"])
        return to_fp16(backend, image)
    kh, kw = attrs["kernel"]
    o = a.shape[-1]
    cols = backend.im2col(b, kh, kw, s, p)
    out = backend.matmul_fp16_chunked(a.reshape(-1, o), cols, True, chunk, fp16_adds)
    return out.reshape(o, kh, kw, b.shape[-1])


def _grouped_chunked(backend, kind, a, b, attrs, chunk, chunk_sum):
    """A grouped conv's chunked product: a depthwise one on FP8's depthwise hooks (each output's
    own products, chunked: backends/ref_fp8_depthwise.py), another one a product per group
    (_products.per_group)."""
    if not attrs["depthwise"]:
        return per_group(lambda k, x, y, at: chunked_product(backend, k, x, y, at, chunk, chunk_sum), kind, a, b, attrs)
    c, fp16_adds = np.ascontiguousarray, chunk_sum == "fp16"
    a, b, s, p = c(a, np.float32), c(b, np.float32), attrs["stride"], attrs["pad"]
    if kind == "fwd":
        return backend.dwconv2d_fp16_chunked(a, b, s, p, chunk, fp16_adds)
    if kind == "bwd_data":
        return backend.dwconv2d_bwd_data_fp16(a, b, s, p, attrs["in_hw"])
    return backend.dwconv2d_bwd_weight_fp16_chunked(a, b, s, p, attrs["kernel"], chunk, fp16_adds)


def _out_hw(shape, k, s, p):
    return ((shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)


def loss_grad(backend, op, env, ctx) -> dict:
    """Softmax cross-entropy's gradient times the loss scale (a power of two)."""
    return fp32.softmax_loss_grad(backend, op, env, ctx, float(ctx.recipe.params.get("loss_scale", 1024)))


FP8Numerics.extra_ops = {"fp8.loss_grad": loss_grad}
ENGINE = Emulated(FP8Numerics())
(
    ACTIVATION_DTYPE,
    check_recipe,
    check_model,
    forward,
    loss,
    backward,
    join_errors,
    OPS,
    init_params,
    prepare_input,
    logits_to_float,
) = module_contract(ENGINE)
