"""FP8's products in float ONNX operators, bit for bit: Wang et al.'s chunk-based FP16
accumulation (float_ops.matmul_fp16_chunked) written out, so an FP8 export gives what
dsptrain's evaluation gives rather than float32 sums of the same FP8 operands (those
agreed with dsptrain on 99.4 % of top-1 answers, LeNet-5 after 8 steps).

A product is a matrix product over K = (kh, kw, c) in dsptrain's order (its im2col's,
or its flattened (H, W, C) columns): ONNX's Conv with one-hot kernels gathers the patches
exactly (each output is one input times 1 plus exact zeros); K is cut into `chunk`-long
runs; step j multiplies the j-th element of every run by its weights (exact in float32:
FP8 or FP16 operands), rounds the product to FP16 (Cast there and back) and adds it to the
run's FP16 sum, rounded again; the run sums then add one by one in FP16. The same float32
operations in the same order as the judge's NumPy, so the same bits. A depthwise conv sums
each output's own KH*KW taps so (`Chunked.depthwise`, backends/ref_fp8_depthwise.py); a
dilated conv runs dense on its zero-filled weight, as the recipe runs it.
"""

from __future__ import annotations

import numpy as np

from ..algorithms._branch_layers import dense_weight

#: configs/algorithms/fp8.yaml's chunk_size: the run length of the FP16 sums
CHUNK = 64
FLOAT16 = 10  # onnx.TensorProto.FLOAT16


def exact(layer) -> bool:
    """Can its product be written chunk by chunk? (grouped convs other than depthwise run per
    group in the recipe: not written here, their export sums in float32)."""
    groups = getattr(layer, "groups", 1)
    return groups == 1 or getattr(layer, "depthwise", False) or getattr(layer, "dilation", 1) > 1


class Chunked:
    """Writes FP8's chunked products into graph `g` (onnx_export._Graph)."""

    def __init__(self, g, chunk: int = CHUNK, fp16_adds: bool = True):
        self.g, self.chunk, self.fp16_adds = g, chunk, fp16_adds

    def _step(self, name: str, partial: str | None, p: str, key: str) -> str:
        """A run's sum with product p added: both rounded to FP16 each time (`chunk_sum: fp16`),
        or summed in float32 and rounded once at the run's end (`chunk_sum: fp32`)."""
        if self.fp16_adds:
            p = self._fp16(name, p, f"{key}_p")
        if partial is None:
            return p
        total = self._node("Add", (partial, p), name, f"{key}_s")
        return self._fp16(name, total, f"{key}_s") if self.fp16_adds else total

    def conv(self, layer, x: str, w: np.ndarray) -> str:
        """(B, O, OH, OW) of a conv on `x` (NCHW) with dsptrain's (O, KH, KW, C/groups) weight."""
        if layer.depthwise and layer.dilation == 1:
            return self.depthwise(layer, x, np.asarray(w, np.float32))
        w, flat, shape = patches(self.g, layer, x, w)
        o = w.shape[0]
        sums = self._sums(layer.name, flat, w.reshape(o, -1))  # (B, O, OH * OW)
        return to_image(self.g, layer.name, sums, shape, o)

    def depthwise(self, layer, x: str, w: np.ndarray) -> str:
        """(B, C, OH, OW) of a depthwise conv with dsptrain's (C, KH, KW, 1) weight: each output's
        KH*KW taps (gathered exactly by a grouped one-hot Conv) times its channel's weights,
        each product rounded to FP16, summed in runs of `chunk` as fp8's depthwise hook sums them."""
        c, kh, kw, _ = w.shape
        taps, name = kh * kw, layer.name
        onehot = np.zeros((c * taps, 1, kh, kw), np.float32)  # output channel ch * taps + (i * kw + j)
        for t in range(taps):
            onehot[np.arange(c) * taps + t, 0, t // kw, t % kw] = 1.0
        found = self._node(
            "Conv",
            (x, self.g.const(f"{name}.dw_patch_kernel", onehot)),
            name,
            "dw_patches",
            group=c,
            kernel_shape=[kh, kw],
            strides=[layer.stride] * 2,
            pads=[layer.padding] * 4,
        )
        flat = self._node("Reshape", (found, self._const(name, "bctp", [0, c, taps, -1], np.int64)), name, "dw_bctp")
        chunk, total = max(1, min(self.chunk, taps)), None
        for r0 in range(0, taps, chunk):
            partial = None
            for t in range(r0, min(r0 + chunk, taps)):
                xt = self._node("Gather", (flat, self._const(name, f"tap{t}", t, np.int64)), name, f"dw_x{t}", axis=2)
                wt = self._const(name, f"dw_w{t}", w[:, t // kw, t % kw, 0].reshape(1, c, 1), np.float32)
                partial = self._step(name, partial, self._node("Mul", (xt, wt), name, f"dw_p{t}"), f"dw{t}")
            partial = self._fp16(name, partial, f"dw_run{r0}")
            total = (
                partial
                if total is None
                else self._fp16(name, self._node("Add", (total, partial), name, f"dw_t{r0}"), f"dw_t{r0}")
            )
        shape = self._node("Shape", (found,), name, "dw_shape")
        return to_image(self.g, name, total, shape, c)

    def linear(self, layer, x: str, w: np.ndarray, columns: np.ndarray | None) -> str:
        """(B, N) of a linear layer; `columns`: for each of dsptrain's K columns the ONNX column
        holding it (a flattened (C, H, W) input), None when they agree."""
        name = layer.name
        if columns is not None:
            x = self._node("Gather", (x, self._const(name, "columns", columns, np.int64)), name, "engine_order", axis=1)
        flat = self._node("Unsqueeze", (x, self._const(name, "axis2", [2], np.int64)), name, "bk1")
        sums = self._sums(name, flat, np.asarray(w).reshape(w.shape[0], -1))  # (B, N, 1)
        return self._node("Squeeze", (sums, self._const(name, "axis2b", [2], np.int64)), name, "sums_2d")

    def _sums(self, name: str, x: str, w: np.ndarray) -> str:
        """(B, N, P) chunked FP16 sums of x (B, K, P) against w (N, K)."""
        n, k = w.shape
        chunk = max(1, min(self.chunk, k))
        runs = -(-k // chunk)
        pad = runs * chunk - k
        if pad:
            x = self._node("Pad", (x, self._const(name, "pads", [0, 0, 0, 0, pad, 0], np.int64)), name, "padded")
            w = np.pad(w, ((0, 0), (0, pad)))
        w = np.asarray(w, np.float32).reshape(n, runs, chunk)
        partial, axis_n = None, self._const(name, "axis_n", [2], np.int64)
        for j in range(chunk):
            xj = self._node(
                "Gather", (x, self._const(name, f"k{j}", np.arange(runs) * chunk + j, np.int64)), name, f"x{j}", axis=1
            )
            xj = self._node("Unsqueeze", (xj, axis_n), name, f"x{j}_n")  # (B, runs, 1, P)
            wj = self._const(name, f"w{j}", w[:, :, j].T.reshape(1, runs, n, 1), np.float32)
            partial = self._step(name, partial, self._node("Mul", (xj, wj), name, f"p{j}"), f"k{j}")
        partial = self._fp16(name, partial, "runs")  # a run of one product: already FP16 (no-op)
        total = None
        for r in range(runs):
            run = self._node("Gather", (partial, self._const(name, f"r{r}", r, np.int64)), name, f"run{r}", axis=1)
            total = run if total is None else self._fp16(name, self._node("Add", (total, run), name, f"t{r}"), f"t{r}")
        return total

    def _fp16(self, name: str, x: str, key: str) -> str:
        half = self._node("Cast", (x,), name, f"{key}_h", to=FLOAT16)
        return self._node("Cast", (half,), name, f"{key}_f", to=1)

    def _node(self, op, inputs, name, key, **attrs) -> str:
        return self.g.node(op, inputs, f"{name}.c_{key}", f"{name}.c_{key}", **attrs)

    def _const(self, name, key, value, dtype) -> str:
        return self.g.const(f"{name}.c_{key}_c", np.array(value, dtype))


def patches(g, layer, x: str, w: np.ndarray) -> tuple[np.ndarray, str, str]:
    """(the dense (O, KH, KW, C) weight, x's patches (B, K, OH * OW) in dsptrain's K = (kh, kw, c)
    order, the patches' 4-d shape) of a conv: a Conv with one-hot kernels, exact."""
    if layer.groups > 1 or layer.dilation > 1:
        w = dense_weight(np.asarray(w), layer.groups, layer.dilation)
    _, kh, kw, c = w.shape
    k = kh * kw * c
    onehot = np.zeros((k, c, kh, kw), np.float32)  # patch element (i, j, ch) at row (i * kw + j) * c + ch
    for i in range(kh):
        for j in range(kw):
            onehot[(i * kw + j) * c + np.arange(c), np.arange(c), i, j] = 1.0
    name = layer.name
    n = lambda op, inputs, key, **attrs: g.node(op, inputs, f"{name}.c_{key}", f"{name}.c_{key}", **attrs)
    found = n(
        "Conv",
        (x, g.const(f"{name}.patch_kernel", onehot)),
        "patches",
        kernel_shape=[kh, kw],
        strides=[layer.stride] * 2,
        pads=[layer.padding] * 4,
    )
    flat = n("Reshape", (found, g.const(f"{name}.c_bkp_c", np.array([0, k, -1], np.int64))), "bkp")
    return w, flat, n("Shape", (found,), "shape")


def to_image(g, name: str, sums: str, shape: str, o: int) -> str:
    """(B, O, P) sums back to (B, O, OH, OW), OH and OW from the patches' `shape`."""
    n = lambda op, inputs, key, **attrs: g.node(op, inputs, f"{name}.c_{key}", f"{name}.c_{key}", **attrs)
    c = lambda key, value: g.const(f"{name}.c_{key}_c", np.array(value, np.int64))
    out_shape = n(
        "Concat",
        (
            n("Slice", (shape, c("b_start", [0]), c("b_end", [1])), "b"),
            c("o", [o]),
            n("Slice", (shape, c("hw_start", [2]), c("hw_end", [4])), "hw"),
        ),
        "out_shape",
        axis=0,
    )
    return n("Reshape", (sums, out_shape), "sums_4d")
