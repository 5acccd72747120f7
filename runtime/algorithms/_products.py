"""The layer products of the emulated recipes (Octo, WAGEUBN, AFP, MLS, FP8): a conv or
linear layer's forward, backward-data and weight-gradient product of two quantized
operands, on the backend the op runs on, and the workspace each allocates (the memory
plan counts it). int8 operands with one scale each: the int8 hooks (int32 sums); int16
ones (MLS's group-aligned elements, AFP's 16-bit errors): matmul_s16 and the s16
convolutions (int64 sums); anything else summed in float64 from exact values.
Not a recipe: no YAML names this module.
"""

from __future__ import annotations

import numpy as np

from ..layout import col2im, im2col, out_size
from . import _branch_layers as branch
from ._quant import Scaled


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1)


def product(backend, kind: str, a: Scaled, b: Scaled, attrs: dict) -> np.ndarray:
    """The float32 result of a layer product of two quantized operands.

    kind: fwd (x, w), bwd_data (err, w), bwd_weight (err, x); attrs has `conv` and the
    conv geometry. int8 operands with one scale each go through the backend's int8 hooks;
    int16 ones (MLS's group-aligned elements, AFP's 16-bit errors) through matmul_s16 and
    the s16 convolutions (a backend without them hands the op on: the executor's
    NoSupport). Either way the exact integer sums are multiplied by the two scales once
    (`dequantize`). Anything else is summed in float64 from exact values.
    """
    if a.scalar_int8 and b.scalar_int8:
        acc = int8_product(backend, kind, a.q, b.q, attrs)
        return backend.dequantize(acc, float(a.scale) * float(b.scale), True)  # acc: ours to overwrite
    if _scalar_int(a) and _scalar_int(b):
        acc = int16_product(backend, kind, a.q.astype(np.int16, copy=False), b.q.astype(np.int16, copy=False), attrs)
        return backend.dequantize(acc, float(a.scale) * float(b.scale))
    return _float64_product(kind, a.values(), b.values(), attrs).astype(np.float32)


def product_workspace(
    path: str, pass_: str, attrs: dict, x_shape, w_shape, bias: bool = False, dtypes: tuple[str, str] = ("", "")
) -> tuple[int, int]:
    """(bytes per row of the batch, bytes) a layer product allocates beside its result while
    it runs, by the arrays `product` (below) and fp8.chunked_product make: the patches
    (im2col), a transposed weight copy, the exact sums (int64 for int16 operands, int32 for
    int8, float32 for FP16 chunks), the scattered image (col2im) and its float64 copy, on
    the cpu backend (conv2d_bwd_data_s16 fused; other backends compose it with more). The
    memory plan adds it to the op's workspace (memory.planner.op_workspace);
    On the int16 path an int8 operand (`dtypes`: the product's two operands', AFP's int8
    weights and activations against its 16-bit errors) is widened to an int16 copy first.
    tests/null/test_planned_sizes.py measures it (tracemalloc)."""
    o, batch = w_shape[0], x_shape[0]
    taps = int(np.prod(w_shape[1:]))
    if attrs["conv"]:
        kh, kw, s, p = w_shape[1], w_shape[2], attrs["stride"], attrs["pad"]
        pixels = out_size(x_shape[1], kh, s, p) * out_size(x_shape[2], kw, s, p)
        image = int(np.prod(x_shape[1:]))
    else:
        pixels, image = 1, 0
    conv = bool(attrs["conv"])
    per_row, fixed = (pixels * o * 4 if bias else 0), 0  # a bias adds to a copy of the result
    if path == "int16":  # matmul_s16: int16 patches, int64 sums, col2im in int64
        per_row += {
            "forward": conv * pixels * taps * 2 + pixels * o * 8,  # a conv's backward data: fused
            "backward_data": image * 8 if conv else taps * 8,  # (conv2d_bwd_data_s16), int64 image
            "backward_weight": conv * pixels * taps * 2,
        }[pass_]
        fixed += {"forward": taps * o * 2, "backward_weight": o * taps * 8}.get(pass_, 0)
        first, second = (d == "int8" for d in dtypes)  # _int16_product's astype(int16) copies
        rows_of_x = image if conv else taps
        per_row += first * 2 * (rows_of_x if pass_ == "forward" else pixels * o)
        if pass_ == "backward_weight":
            per_row += second * 2 * rows_of_x
        else:
            fixed += second * 2 * taps * o
    elif path == "fp16":  # matmul_fp16_chunked: float32 patches and result; col2im in float64
        per_row += {
            "forward": conv * pixels * taps * 4,
            "backward_data": conv * (pixels * taps * 12 + image * 8),
            "backward_weight": conv * pixels * taps * 4,
        }[pass_]
        fixed += taps * o * 4 if pass_ == "forward" else 0
    elif path == "int8":  # the int8 hooks' accumulators (and transposed int8 copies of a linear's operands):
        # int32 sums become the float result in place (dequantize reuse=True), int64 ones stay beside it
        def wide(depth):  # bytes an element of the sums of this depth keeps beside the result (numerics.acc_dtype)
            return 8 if depth * 127 * 127 >= 2**31 else 0

        per_row += {
            "forward": pixels * o * wide(taps),
            "backward_data": (image * wide(o * taps // w_shape[-1]) if conv else taps * wide(o)),
            "backward_weight": 0 if conv else o + taps,
        }[pass_]
        fixed += {"backward_data": 0 if conv else taps * o, "backward_weight": o * taps * wide(batch * pixels)}.get(
            pass_, 0
        )
    return per_row, fixed


def layer_of(attrs: dict) -> str:
    """The product's layer (graph.Product): the operands are (x, w), (err, w), (err, x) by
    pass, as graph.Product lays them out, so a backend sizes its scratch from them."""
    return "conv" if attrs["conv"] else "linear"


def _scalar_int(t: Scaled) -> bool:
    return t.q.dtype in (np.int8, np.int16) and np.ndim(t.scale) == 0


def int16_product(backend, kind, a, b, attrs) -> np.ndarray:
    """The exact int64 sums of a layer product of int16 operands. Linear layers: matmul_s16,
    whose right operand is K-major (weights as they are for the backward data product, a
    transposed copy of them, small, for the forward; activations as they are for the
    weight gradient). Convolutions: the backend's conv2d_s16, conv2d_bwd_data_s16 and
    conv2d_bwd_weight_s16 (base.py composes them from im2col, matmul_s16 and col2im; the
    CPU builds each image's patches in cache and uses them at once). A depthwise conv: the
    int8 depthwise hooks digit by digit (`_depthwise_digits`); another grouped one, one
    product per group (`per_group`)."""
    if attrs.get("groups", 1) > 1:
        if attrs["depthwise"]:
            return _depthwise_digits(backend, kind, a, b, attrs)
        return per_group(lambda k, x, y, at: int16_product(backend, k, x, y, at), kind, a, b, attrs)
    c = np.ascontiguousarray
    if not attrs["conv"]:
        if kind == "fwd":
            return backend.matmul_s16(c(_rows(a)), c(b.T))
        if kind == "bwd_data":
            return backend.matmul_s16(a, b)
        return backend.matmul_s16(a, c(_rows(b)), True)  # a_transposed
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        return backend.conv2d_s16(c(a), c(b), s, p)
    if kind == "bwd_data":
        return backend.conv2d_bwd_data_s16(c(a), c(b), s, p, attrs["in_hw"])
    return backend.conv2d_bwd_weight_s16(c(a), c(b), s, p, attrs["kernel"])


def int8_product(backend, kind, a, b, attrs) -> np.ndarray:
    """A layer product's exact sums on the int8 hooks (int32 sums; a depthwise conv's on the
    depthwise hooks, another grouped one's a product per group)."""
    if attrs.get("groups", 1) > 1:
        if attrs["depthwise"]:
            return _depthwise_s8(backend, kind, a, b, attrs)
        return per_group(lambda k, x, y, at: int8_product(backend, k, x, y, at), kind, a, b, attrs)
    if attrs["conv"]:
        s, p = attrs["stride"], attrs["pad"]
        if kind == "fwd":
            return backend.conv2d_s8(a, b, s, p)
        if kind == "bwd_data":
            return backend.conv2d_bwd_data_s8(a, b, s, p, attrs["in_hw"])
        return backend.conv2d_bwd_weight_s8(a, b, s, p, attrs["kernel"])
    if kind == "fwd":
        return backend.gemm_s8(_rows(a), b)
    if kind == "bwd_data":
        return backend.gemm_s8(a, np.ascontiguousarray(b.T))
    return backend.gemm_s8(np.ascontiguousarray(a.T), np.ascontiguousarray(_rows(b).T))


def _depthwise_s8(backend, kind, a, b, attrs) -> np.ndarray:
    """A depthwise conv's exact sums: weights (C, KH, KW, 1) as the layer keeps them."""
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        return backend.dwconv2d_s8(a, b, s, p)
    if kind == "bwd_data":
        return backend.dwconv2d_bwd_data_s8(a, b, s, p, attrs["in_hw"])
    return backend.dwconv2d_bwd_weight_s8(a, b, s, p, attrs["kernel"])


def _digits(q: np.ndarray) -> list[np.ndarray]:
    """Balanced base-128 digits of integers: q = sum(d_i * 128**i), each d_i an int8 in [-64, 63]
    (one digit when q already is int8-sized; three at most for int16)."""
    q = q.astype(np.int32)
    if not q.size or int(np.abs(q).max()) <= 127:
        return [q.astype(np.int8)]
    out = []
    while q.any():
        d = ((q + 64) & 127) - 64
        out.append(d.astype(np.int8))
        q = (q - d) >> 7
    return out or [q.astype(np.int8)]


def _depthwise_digits(backend, kind, a, b, attrs) -> np.ndarray:
    """A depthwise product of int16 operands, exact: each operand split into int8 digits
    (`_digits`), the digit pairs' int32 sums from the depthwise hooks, added as int64 with their
    weights 128**(i + j). Three digits at most a side; one where the values fit int8 already."""
    total = None
    for i, da in enumerate(_digits(a)):
        for j, db in enumerate(_digits(b)):
            part = _depthwise_s8(backend, kind, da, db, attrs).astype(np.int64) << (7 * (i + j))
            total = part if total is None else total + part
    return total


def per_group(fn, kind, a, b, attrs) -> np.ndarray:
    """A grouped conv's product as `groups` plain ones, fn(kind, a_g, b_g, attrs without groups),
    joined on the channel axis: the output channels of fwd (x, w) and bwd_weight (err, x) (the
    weight's rows), the input channels of bwd_data (err, w). Exact where each product is: the
    sums of a group are the block-diagonal dense product's, without its zero terms."""
    g = attrs["groups"]
    plain = {k: v for k, v in attrs.items() if k not in ("groups", "depthwise")}

    def block(t, i, axis):
        n = t.shape[axis] // g
        return np.ascontiguousarray(t[i * n : (i + 1) * n] if axis == 0 else t[..., i * n : (i + 1) * n])

    if kind == "bwd_weight":  # (err, x): rows of the gradient by output group
        parts = [fn(kind, block(a, i, -1), block(b, i, -1), plain) for i in range(g)]
        return np.concatenate(parts, axis=0)
    parts = [fn(kind, block(a, i, -1), block(b, i, 0), plain) for i in range(g)]  # (x | err, w)
    return np.concatenate(parts, axis=-1)


def _float64_product(kind, a, b, attrs):
    if attrs.get("groups", 1) > 1:
        return per_group(_float64_product, kind, a, b, attrs)
    if not attrs["conv"]:
        if kind == "fwd":
            return _rows(a) @ b.T
        if kind == "bwd_data":
            return a @ b
        return a.T @ _rows(b)
    s, p = attrs["stride"], attrs["pad"]
    if kind == "fwd":
        o, kh, kw, _ = b.shape
        n, h, w, _ = a.shape
        out = im2col(a, kh, kw, s, p) @ b.reshape(o, -1).T
        return out.reshape(n, out_size(h, kh, s, p), out_size(w, kw, s, p), o)
    if kind == "bwd_data":
        o, kh, kw, c = b.shape
        return col2im(a.reshape(-1, o) @ b.reshape(o, -1), a.shape, (kh, kw, c), s, p, attrs["in_hw"])
    kh, kw = attrs["kernel"]
    o = a.shape[-1]
    return (a.reshape(-1, o).T @ im2col(b, kh, kw, s, p)).reshape(o, kh, kw, b.shape[-1])


def dense_scaled(wq: Scaled, groups: int, dilation: int) -> Scaled:
    """The dense form of a quantized grouped weight: zeros are exact on every grid, so one
    tensor scale carries over; a per-group scale (MLS) is folded into float64 values."""
    if not isinstance(wq.scale, np.ndarray) or wq.scale.ndim == 0:
        return Scaled(branch.dense_weight(wq.q, groups, dilation), wq.scale)
    return Scaled(branch.dense_weight(wq.values(), groups, dilation), 1.0)
