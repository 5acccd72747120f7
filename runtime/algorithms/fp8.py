"""Chunk-based FP8 training (Wang et al., "Training Deep Neural Networks with 8-bit
Floating Point Numbers", NeurIPS 2018).

- Weights, activations and errors enter every conv/linear product as FP8 (1-5-2: one
  sign, 5 exponent, 2 mantissa bits, with subnormals), rounded to nearest even.
- Products are FP16, and every dot product is accumulated in FP16 in chunks of
  `chunk_size` (64): the products of a chunk are added one by one in FP16, then the chunk
  sums are added one by one in FP16, which keeps small terms from being swamped by a
  long running sum (`_quant.chunked_dot_fp16`). `chunk_sum: fp32` sums inside a chunk
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

from ..layout import col2im, im2col
from . import _float_layers as fl
from . import fp32
from ._emulated import Emulated, Numerics, module_contract
from ._quant import Scaled, chunked_dot_fp16, to_fp8, to_fp16


def _pow2(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
        and float(np.log2(value)).is_integer()
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

    def _grid(self, x, ctx, op):
        keep16 = self.param(ctx.recipe, "first_last_fp16", True) and op.attrs["position"] != "middle"
        return Scaled(to_fp16(x) if keep16 else to_fp8(x), 1.0)

    def quant_weight(self, w, ctx, op):
        return self._grid(w, ctx, op)

    def quant_act(self, x, ctx, op):
        return self._grid(x, ctx, op)

    def quant_err(self, err, state, ctx, op):
        return self._grid(err, ctx, op), []

    def product(self, be, kind, a, b, attrs, ctx):
        return chunked_product(kind, a.q, b.q, attrs, int(self.param(ctx.recipe, "chunk_size", 64)),
                               self.param(ctx.recipe, "chunk_sum", "fp16"))

    def init_weight(self, layer, rng):
        return to_fp16(super().init_weight(layer, rng))

    def opt_state(self, param, value):
        return {f"{param}.v": np.zeros(np.shape(value), np.float16)}

    def update(self, w, grad, state, ctx, op):
        """v = fp16(momentum * v + g); w = fp16_stochastic(w - lr * v), g unscaled + decay."""
        o = ctx.recipe.optimizer
        lr = o.lr * ctx.recipe.schedule.at("lr_factor", ctx.epoch, 1.0)
        w64 = np.asarray(w, np.float64)
        g = np.asarray(grad, np.float64) / float(self.param(ctx.recipe, "loss_scale", 1024)) + o.weight_decay * w64
        v = to_fp16(o.momentum * np.asarray(state[0], np.float64) + g)
        return to_fp16(w64 - lr * v.astype(np.float64), "sto", ctx.rng(op)), [v]

    def loss(self, b, logits, labels):
        err = b.tensor("err.logits", b.tensors[logits].shape, "float32", "error")
        b.op("loss.grad", "fp8.loss_grad", "loss", "loss", (logits, labels), (err,), fl.F32)
        return err


def chunked_product(kind, a, b, attrs, chunk, chunk_sum="fp16"):
    """A layer product with FP16 chunked accumulation; float32 result holding FP16 values."""
    a16, b16 = np.asarray(a, np.float16), np.asarray(b, np.float16)
    if not attrs["conv"]:
        if kind == "fwd":
            out = chunked_dot_fp16(a16.reshape(a16.shape[0], -1), b16, chunk, chunk_sum)
        elif kind == "bwd_data":
            out = chunked_dot_fp16(a16, np.ascontiguousarray(b16.T), chunk, chunk_sum)
        else:
            out = chunked_dot_fp16(np.ascontiguousarray(a16.T), np.ascontiguousarray(b16.reshape(b16.shape[0], -1).T),
                                   chunk, chunk_sum)
        return out.astype(np.float32)
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        o, kh, kw, _ = b16.shape
        n = a16.shape[0]
        cols = im2col(a16, kh, kw, s, p)
        out = chunked_dot_fp16(cols, b16.reshape(o, -1), chunk, chunk_sum)
        return out.reshape(n, *_out_hw(a16.shape, kh, s, p), o).astype(np.float32)
    if kind == "bwd_data":
        o, kh, kw, c = b16.shape
        dcols = chunked_dot_fp16(a16.reshape(-1, o), np.ascontiguousarray(b16.reshape(o, -1).T), chunk, chunk_sum)
        # overlapping windows add at most kh*kw terms; summed exactly, then rounded to FP16
        return to_fp16(col2im(dcols.astype(np.float64), a16.shape, (kh, kw, c), s, p, attrs["in_hw"])).astype(np.float32)
    kh, kw = attrs["kernel"]
    o = a16.shape[-1]
    cols = im2col(b16, kh, kw, s, p)
    out = chunked_dot_fp16(np.ascontiguousarray(a16.reshape(-1, o).T), np.ascontiguousarray(cols.T), chunk, chunk_sum)
    return out.reshape(o, kh, kw, b16.shape[-1]).astype(np.float32)


def _out_hw(shape, k, s, p):
    return ((shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1)


def _loss_grad(be, op, env, ctx):
    err = fp32.loss_grad(be, op, env, ctx)[op.outputs[0]]
    return {op.outputs[0]: (err * np.float32(ctx.recipe.params.get("loss_scale", 1024))).astype(np.float32)}


FP8Numerics.extra_ops = {"fp8.loss_grad": _loss_grad}
ENGINE = Emulated(FP8Numerics())
(ACTIVATION_DTYPE, check_recipe, check_model, forward, loss, backward, join_errors, OPS, init_params,
 prepare_input, logits_to_float) = module_contract(ENGINE)
