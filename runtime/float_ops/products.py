"""The float recipes' products in NumPy: MLS's exact int16 products, FP8's chunked FP16
sums (its summation order fixed product by product inside a chunk, so deterministic and
exact to reproduce), and the im2col / col2im the products run on."""

from __future__ import annotations

import numpy as np

from ..layout import col2im as col2im_float


def matmul_s16(a, b, a_transposed=False) -> np.ndarray:
    """int16 (a.T if a_transposed else a) @ b[K,N], exact int64 (float64 sums stay exact
    below 2**53)."""
    a = a.T if a_transposed else a
    depth = a.shape[1]
    bound = float(np.max(np.abs(a), initial=0)) * float(np.max(np.abs(b), initial=0)) * depth
    if bound >= 2.0**53:
        raise OverflowError(f"int16 product of depth {depth} may exceed 2**53")
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


def _fp16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to FP16, kept as float32: a float32 sum or product of FP16
    values rounded once to FP16 is the correctly rounded FP16 operation."""
    return x.astype(np.float16).astype(np.float32)


def matmul_fp16_chunked(a, b, a_transposed: bool, chunk: int, fp16_adds: bool) -> np.ndarray:
    """FP16 values (a.T if a_transposed else a) @ b[K,N] with Wang et al.'s chunk-based
    accumulation, as float32:
    each run of `chunk` products summed one by one (each product and running sum rounded
    to FP16 when `fp16_adds`, else in float32), the chunk sum rounded to FP16, the chunk
    sums added one by one in FP16."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    a, b = (a.T if a_transposed else a), b.T
    m, k = a.shape
    n = b.shape[0]
    chunk = max(1, min(chunk, k))
    chunks = -(-k // chunk)
    pad = chunks * chunk - k
    if pad:
        a, b = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, 0), (0, pad)))
    a = np.ascontiguousarray(a.reshape(m, chunks, chunk).transpose(2, 1, 0))  # [chunk, chunks, M]
    b = np.ascontiguousarray(b.reshape(n, chunks, chunk).transpose(2, 1, 0))  # [chunk, chunks, N]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        partial = np.zeros((chunks, m, n), np.float32)
        for j in range(chunk):
            p = a[j][:, :, None] * b[j][:, None, :]
            partial = _fp16(partial + _fp16(p)) if fp16_adds else partial + p
        partial = _fp16(partial)
        total = partial[0].copy()
        for c in range(1, chunks):
            total = _fp16(total + partial[c])
    return total


def im2col(x, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
    """NHWC -> [N*OH*OW, KH*KW*C] patches in x's own dtype (int16, float32), zero padded."""
    x = np.asarray(x)
    n, h, w, ch = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    st = xp.strides
    windows = np.lib.stride_tricks.as_strided(
        xp, (n, oh, ow, kh, kw, ch), (st[0], st[1] * stride, st[2] * stride, st[1], st[2], st[3]), writeable=False
    )
    return windows.reshape(n * oh * ow, kh * kw * ch)


def col2im(dcols, err_nhw, kernel_hwc, stride: int, pad: int, in_hw) -> np.ndarray:
    """Scatter-add [N*OH*OW, KH*KW*C] patch sums onto NHWC: int64 sums exactly in int64,
    float64 ones in float64 (exact for FP8's at most KH*KW FP16-valued terms)."""
    n, oh, ow = err_nhw
    if np.asarray(dcols).dtype.kind == "f":
        return np.ascontiguousarray(col2im_float(dcols, (n, oh, ow, None), kernel_hwc, stride, pad, in_hw))
    kh, kw, ch = kernel_hwc
    h, w = in_hw
    cols = np.asarray(dcols, np.int64).reshape(n, oh, ow, kh, kw, ch)
    dx = np.zeros((n, h + 2 * pad, w + 2 * pad, ch), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            dx[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :] += cols[:, :, :, i, j, :]
    return np.ascontiguousarray(dx[:, pad : pad + h, pad : pad + w, :])
