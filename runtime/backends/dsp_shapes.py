"""What the DSP's kernels accept, checked on the host before any byte crosses.

Each check raises NoSupport naming the hook and the values, so the executor sends the
op to the next backend; the product checks return the operands as arrays and the
shape of the result the kernel writes.
"""

from __future__ import annotations

import numpy as np

from ..errors import NoSupport

MAX_DEPTH = (2**31 - 1) // (127 * 127)  # beyond it accumulators are int64: not on the DSP


def check_s8(hook: str, *arrays) -> None:
    for a in arrays:
        if np.asarray(a).dtype != np.int8:
            raise NoSupport("dsp", f"{hook}: the DSP takes int8, got {np.asarray(a).dtype}")


def check_depth(hook: str, depth: int) -> None:
    if depth > MAX_DEPTH or depth <= 0:
        raise NoSupport("dsp", f"{hook}: reduction depth {depth} needs int64 accumulators")


def acc_input(hook: str, acc) -> np.ndarray:
    """An accumulator the DSP's epilogue reads (int8, int16 or int32)."""
    acc = np.asarray(acc)
    if acc.dtype in (np.int8, np.int16, np.int32):
        return acc
    raise NoSupport("dsp", f"{hook}: the DSP epilogue takes int32 accumulators, got {acc.dtype}")


def gemm_args(a, b):
    """(a, b, out shape) of gemm_s8: a[M,K] @ b[N,K].T."""
    a, b = np.asarray(a), np.asarray(b)
    check_s8("gemm_s8", a, b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise NoSupport("dsp", f"gemm_s8 needs a[M,K], b[N,K]; got {a.shape} and {b.shape}")
    check_depth("gemm_s8", a.shape[1])
    return a, b, (a.shape[0], b.shape[0])


def conv_out(x, w, stride, pad):
    """(x, w, out shape) of conv2d_s8: x[N,H,W,C] * w[O,KH,KW,C]."""
    x, w = np.asarray(x), np.asarray(w)
    check_s8("conv2d_s8", x, w)
    n, h, wd, _ = x.shape
    o, kh, kw, c = w.shape
    check_depth("conv2d_s8", kh * kw * c)
    return x, w, (n, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1, o)


def bwd_data_out(err, w, in_hw):
    """(err, w, out shape) of conv2d_bwd_data_s8: dx[N,H,W,C]."""
    err, w = np.asarray(err), np.asarray(w)
    check_s8("conv2d_bwd_data_s8", err, w)
    o, kh, kw, c = w.shape
    check_depth("conv2d_bwd_data_s8", o * kh * kw)
    return err, w, (err.shape[0], in_hw[0], in_hw[1], c)


def dw_weights(hook, x, w):
    """(x, the weights tap-major): the DSP reads depthwise weights as w[KH, KW, C] (its
    lanes are channels), so the host transposes those C * KH * KW elements."""
    x, w = np.asarray(x), np.asarray(w)
    check_s8(hook, x, w)
    if x.ndim != 4 or w.ndim != 4 or w.shape[3] != 1 or w.shape[0] != x.shape[3]:
        raise NoSupport("dsp", f"{hook}: needs x[N,H,W,C] and w[C,KH,KW,1]; got {x.shape} and {w.shape}")
    check_depth(hook, w.shape[1] * w.shape[2])
    return x, np.ascontiguousarray(w[..., 0].transpose(1, 2, 0))
