"""The judge of FP8's depthwise convolution (algorithms/fp8.py; Wang et al., NeurIPS 2018).

Operands hold FP8 or FP16 values as float32. Every product is rounded to FP16, and a dot
product is summed by the recipe's chunk rule (float_ops.matmul_fp16_chunked) over its own
terms, not over a dense weight's zeros:
- forward: each output's KH*KW taps in (kh, kw) order, in runs of `chunk`;
- weight gradient: each channel's tap over the N*OH*OW output pixels in order, in runs of
  `chunk` (the last run padded with 0 * 0 products, as matmul_fp16_chunked pads K);
- backward data: each input pixel's FP16 products, at most KH*KW of them, added exactly (in
  float64: they are multiples of 2**-24 below 2**20) and rounded to FP16 once, what the
  dense product's col2im gave.
cpu_ops/dwconv_fp16.cpp computes the same bits.
"""

from __future__ import annotations

import numpy as np

from ..layout import out_size, patches


def _fp16(x: np.ndarray) -> np.ndarray:
    """Rounded to FP16 once (from float32 or float64), kept as float32; past FP16's range: inf."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(np.float16).astype(np.float32)


def _add(partial, p, fp16_adds: bool):
    with np.errstate(over="ignore", invalid="ignore"):
        return _fp16(partial + _fp16(p)) if fp16_adds else partial + p


def _weight_taps(w: np.ndarray, c: int) -> np.ndarray:
    """(C, KH, KW, 1) -> [KH*KW, C] float32."""
    if w.shape[0] != c or w.shape[3] != 1:
        raise ValueError(f"depthwise weight shape {w.shape} does not match {c} input channels (C, KH, KW, 1)")
    return np.asarray(w, np.float32)[..., 0].reshape(c, -1).T


def dwconv2d_fp16_chunked(x, w, stride: int, pad: int, chunk: int, fp16_adds: bool) -> np.ndarray:
    x = np.asarray(x, np.float32)
    c, kh, kw = x.shape[-1], w.shape[1], w.shape[2]
    wt = _weight_taps(w, c)
    taps = patches(x, kh, kw, stride, pad).reshape(*x.shape[:1], -1, kh * kw, c)  # [N, OH*OW, T, C]
    t = kh * kw
    chunk = max(1, min(chunk, t))
    total = None
    with np.errstate(over="ignore", invalid="ignore"):
        for r0 in range(0, t, chunk):
            partial = np.zeros(taps.shape[:2] + (c,), np.float32)
            for j in range(r0, min(r0 + chunk, t)):
                partial = _add(partial, taps[:, :, j, :] * wt[j], fp16_adds)
            partial = _fp16(partial)
            total = partial if total is None else _fp16(total + partial)
    oh, ow = out_size(x.shape[1], kh, stride, pad), out_size(x.shape[2], kw, stride, pad)
    return np.ascontiguousarray(total.reshape(x.shape[0], oh, ow, c))


def dwconv2d_bwd_data_fp16(err, w, stride: int, pad: int, in_hw) -> np.ndarray:
    err = np.asarray(err, np.float32)
    n, oh, ow, c = err.shape
    kh, kw = w.shape[1:3]
    wt = _weight_taps(w, c)
    h, wd = in_hw
    dx = np.zeros((n, h + 2 * pad, wd + 2 * pad, c), np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(kh):
            for j in range(kw):
                rows, cols = slice(i, i + stride * (oh - 1) + 1, stride), slice(j, j + stride * (ow - 1) + 1, stride)
                dx[:, rows, cols, :] += _fp16(err * wt[i * kw + j])
    return np.ascontiguousarray(_fp16(dx[:, pad : pad + h, pad : pad + wd, :]))


def dwconv2d_bwd_weight_fp16_chunked(err, x, stride: int, pad: int, kernel, chunk: int, fp16_adds: bool) -> np.ndarray:
    err, x = np.asarray(err, np.float32), np.asarray(x, np.float32)
    c = x.shape[-1]
    kh, kw = kernel
    t = kh * kw
    taps = np.ascontiguousarray(patches(x, kh, kw, stride, pad)).reshape(-1, t, c)  # [M, T, C]
    e = err.reshape(-1, 1, c)
    m = taps.shape[0]
    chunk = max(1, min(chunk, m))
    runs = -(-m // chunk)
    pad_rows = runs * chunk - m
    if pad_rows:
        taps = np.concatenate([taps, np.zeros((pad_rows, t, c), np.float32)])
        e = np.concatenate([e, np.zeros((pad_rows, 1, c), np.float32)])
    taps, e = taps.reshape(runs, chunk, t, c), e.reshape(runs, chunk, 1, c)
    partial = np.zeros((runs, t, c), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(chunk):  # the j-th product of every run at once
            partial = _add(partial, taps[:, j] * e[:, j], fp16_adds)
        partial = _fp16(partial)
        total = partial[0].copy()
        for r in range(1, runs):
            total = _fp16(total + partial[r])
    return np.ascontiguousarray(total.T.reshape(c, kh, kw, 1))
