"""MLS's multi-level scaling (float_ops.quantize_mls) in ONNX operators: what an MLS export
rounds each product's input with, and its weights' values.

A product's input is cut into groups of G consecutive channels at each position (dsptrain's
last, channel axis; a flattened input's columns in dsptrain's (H, W, C) order, gathered there
and back); the tensor scale s = max|x| / qmax, each group's shift k = floor(log2(max|x| /
group max)) clipped to 0 .. 2**group_bits - 1, elements round(x / (s * 2**-k)) half away from
zero, clipped to +-qmax. All in float64 as the recipe's quantizer (the floor of the log
corrected at powers of two), so the integers are the recipe's; the product sums them exactly
and scales once, as dsptrain's (float32 sums of float32 values agreed on 99.9 % of top-1
answers, LeNet-5: one scale's rounding moved a later layer's grid by a step).
"""

from __future__ import annotations

import math

import numpy as np

from ..algorithms._emulated import group_for
from ..float_ops import quantize_mls_ranged

GROUP_SIZE, GROUP_BITS, BITS = 16, 2, 8  # configs/algorithms/mls.yaml
DOUBLE, FLOAT = 11, 1  # onnx.TensorProto


def activation(g, name: str, x: str, channels: int, columns: np.ndarray | None) -> tuple[str, str]:
    """(aligned integers q * 2**(kmax - k) as float32, their scale s * 2**-kmax as float64) of
    `x` (NCHW, or (B, K)) on MLS's grid; `columns`: for each of dsptrain's columns the ONNX
    column holding it (a flattened input; the integers come back in dsptrain's order)."""
    n = lambda op, inputs, key, **attrs: g.node(op, inputs, f"{name}.m_{key}", f"{name}.m_{key}", **attrs)
    c = lambda key, value, dtype=np.float64: g.const(f"{name}.m_{key}_c", np.array(value, dtype))
    qmax, kmax = float(2 ** (BITS - 1) - 1), float(2**GROUP_BITS - 1)
    group = group_for(channels, GROUP_SIZE)
    wide = n("Cast", (x,), "x64", to=DOUBLE)  # (B, C, H, W) or (B, K)
    if columns is not None:
        wide = n("Gather", (wide, c("columns", columns, np.int64)), "engine_order", axis=1)
    grouped = n("Reshape", (wide, c("groups", [0, channels // group, group, -1], np.int64)), "grouped")
    magnitude = n("Abs", (grouped,), "abs")
    top = n("ReduceMax", (magnitude,), "top", keepdims=0)
    top = n("Where", (n("Greater", (top, c("zero", 0.0)), "nonzero"), top, c("one", 1.0)), "safe_top")
    group_max = n("ReduceMax", (magnitude,), "group_max", axes=[2], keepdims=1)
    ratio = n("Div", (top, n("Max", (group_max, n("Mul", (top, c("tiny", 2.0**-64)), "floor_max")), "gmax")), "ratio")
    k = n("Clip", (_floor_log2(n, c, ratio), c("kmin", 0.0), c("kmax", kmax)), "k")
    step = n(
        "Mul",
        (n("Div", (top, c("qmax", qmax)), "group_unit"), n("Pow", (c("two", 2.0), n("Neg", (k,), "minus_k")), "shift")),
        "step",
    )
    rounded = n("Floor", (n("Add", (n("Div", (magnitude, step), "scaled"), c("half", 0.5)), "plus_half"),), "floor")
    q = n(
        "Clip", (n("Mul", (n("Sign", (grouped,), "sign"), rounded), "signed"), c("qmin", -qmax), c("qmax2", qmax)), "q"
    )
    aligned = n("Mul", (q, n("Pow", (c("two_k", 2.0), n("Sub", (c("kmax_b", kmax), k), "kmax_k")), "align")), "aligned")
    aligned = n("Reshape", (aligned, n("Shape", (wide,), "shape")), "flat")
    scale = n("Mul", (n("Div", (top, c("qmax_b", qmax)), "tensor_scale"), c("unshift", 2.0**-kmax)), "scale")
    return n("Cast", (aligned,), "out", to=FLOAT), scale


def weight(w: np.ndarray) -> tuple[np.ndarray, float]:
    """(aligned integers, scale) of a weight (dsptrain layout, channels last) on MLS's grid."""
    w = np.asarray(w, np.float32)
    qmax, kmax = 2 ** (BITS - 1) - 1, 2**GROUP_BITS - 1
    aligned, top = quantize_mls_ranged(w, group_for(w.shape[-1], GROUP_SIZE), kmax, qmax, "round", None)
    return aligned.astype(np.float64), (top / qmax * 2.0**-kmax if top else 1.0)


def product(g, layer, x: str, x_scale: str, w: np.ndarray, conv: bool) -> str:
    """The layer's float32 output as dsptrain's: exact integer sums (float64 MatMul of aligned
    integers: |sum| < 2**53) times the two scales once, rounded to float32 (_products.product,
    float_ops.dequantize). A grouped or dilated conv sums densely on its zero-filled weight:
    the same exact sums."""
    from .onnx_fp8 import patches, to_image

    name = layer.name
    n = lambda op, inputs, key, **attrs: g.node(op, inputs, f"{name}.m_{key}", f"{name}.m_{key}", **attrs)
    wq, w_scale = weight(w)
    if conv:
        dense, flat, shape = patches(g, layer, x, wq)
        o = dense.shape[0]
        w2 = g.const(f"{name}.m_w_c", dense.reshape(o, -1))
        sums = n("MatMul", (w2, n("Cast", (flat,), "patches64", to=DOUBLE)), "sums")  # (B, O, P)
    else:
        sums = n("MatMul", (n("Cast", (x,), "aligned64", to=DOUBLE), g.const(f"{name}.m_w_c", wq.T.copy())), "sums")
    scale = n("Mul", (x_scale, g.const(f"{name}.m_w_scale_c", np.array(w_scale, np.float64))), "both_scales")
    out = n("Cast", (n("Mul", (sums, scale), "scaled_sums"),), "out32", to=FLOAT)
    return to_image(g, name, out, shape, o) if conv else out


def _floor_log2(n, c, t: str) -> str:
    """floor(log2 t) of positive t, exactly: the rounded log corrected by one either way."""
    two, one = c("two_l", 2.0), c("one_l", 1.0)
    e = n("Floor", (n("Mul", (n("Log", (t,), "ln"), c("inv_ln2", 1 / math.log(2))), "log2"),), "e_guess")
    e = n(
        "Where", (n("Greater", (n("Pow", (two, e), "p_e"), t), "too_high"), n("Sub", (e, one), "e_minus"), e), "e_low"
    )
    e_plus = n("Add", (e, one), "e_plus")
    return n("Where", (n("LessOrEqual", (n("Pow", (two, e_plus), "p_plus"), t), "too_low"), e_plus, e), "e")
