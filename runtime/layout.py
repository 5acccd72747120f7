"""Tensor layout helpers shared by the recipes and the reference backend (NumPy, NHWC).

im2col turns a convolution into a GEMM over patches; col2im scatters patch gradients back;
pool_windows views each pooling window. They hold no numerics: the recipes' float and
emulated layers and ops_ref.py's integer kernels both build on them.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (size + 2 * pad - (kernel - 1) * dilation - 1) // stride + 1


def patches(x: np.ndarray, kh: int, kw: int, stride: int, pad: int, dilation: int = 1) -> np.ndarray:
    """NHWC -> a read-only [N, OH, OW, KH, KW, C] view of each output pixel's taps, `dilation`
    pixels apart (on a zero-padded copy when pad > 0); x's dtype."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    oh, ow = out_size(h, kh, stride, pad, dilation), out_size(w, kw, stride, pad, dilation)
    s = xp.strides
    steps = (s[0], s[1] * stride, s[2] * stride, s[1] * dilation, s[2] * dilation, s[3])
    return as_strided(xp, (n, oh, ow, kh, kw, c), steps, writeable=False)


def im2col(x: np.ndarray, kh: int, kw: int, stride: int, pad: int, dilation: int = 1) -> np.ndarray:
    """NHWC -> [N*OH*OW, KH*KW*C] float64 patches (K ordered kh, kw, c like the weights)."""
    windows = patches(x, kh, kw, stride, pad, dilation)
    return windows.reshape(-1, kh * kw * x.shape[-1]).astype(np.float64)


def col2im(dcols, err_shape, kernel_hwc, stride, pad, in_hw, dilation: int = 1):
    """Scatter-add [N*OH*OW, KH*KW*C] patch gradients back onto NHWC (float64)."""
    n, oh, ow, _ = err_shape
    kh, kw, c = kernel_hwc
    h, w = in_hw
    dcols = dcols.reshape(n, oh, ow, kh, kw, c)
    dx = np.zeros((n, h + 2 * pad, w + 2 * pad, c), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilation, j * dilation
            dx[:, top : top + stride * oh : stride, left : left + stride * ow : stride, :] += dcols[:, :, :, i, j, :]
    return dx[:, pad : pad + h, pad : pad + w, :]


def transposed_input(err: np.ndarray, kernel_hw, stride: int, pad: int, dilation: int, in_hw) -> np.ndarray:
    """A conv's backward data as a stride-1 conv: err [N, OH, OW, O] spread `stride` apart on
    zeros and framed so that dx = conv(this, the taps flipped, dilation) with no padding.
    Output pixel oy reaches input row oy*stride + i*dilation - pad; with i' = KH-1-i that is
    row y of dx read at y + i'*dilation of a frame where err's row oy sits at
    oy*stride + (KH-1)*dilation - pad. Rows that land outside the frame feed no input pixel."""
    n, oh, ow, o = err.shape
    (kh, kw), (h, w) = kernel_hw, in_hw
    frame = np.zeros((n, h + (kh - 1) * dilation, w + (kw - 1) * dilation, o), err.dtype)
    top, left = (kh - 1) * dilation - pad, (kw - 1) * dilation - pad
    rows, cols = top + stride * np.arange(oh), left + stride * np.arange(ow)
    keep_r = (rows >= 0) & (rows < frame.shape[1])
    keep_c = (cols >= 0) & (cols < frame.shape[2])
    frame[:, rows[keep_r][:, None], cols[keep_c][None, :], :] = err[:, keep_r][:, :, keep_c]
    return frame


def gemm_weight(w: np.ndarray) -> np.ndarray:
    """A conv weight (O, KH, KW, C) as a GEMM's b[O, KH*KW*C], contiguous."""
    return np.ascontiguousarray(w).reshape(w.shape[0], -1)


def gemm_patches(x, w_shape, stride: int, pad: int, dilation: int) -> tuple[np.ndarray, tuple]:
    """x's patches as a contiguous [N*OH*OW, KH*KW*C] GEMM operand (x's dtype), and the
    conv's output shape."""
    o, kh, kw, c = w_shape
    windows = patches(np.asarray(x), kh, kw, stride, pad, dilation)
    return np.ascontiguousarray(windows).reshape(-1, kh * kw * c), (*windows.shape[:3], o)


def gemm_transposed(err, w, stride: int, pad: int, dilation: int, in_hw):
    """A conv's backward data as GEMM operands: the patches of err's frame (transposed_input),
    the taps flipped as b[C, KH*KW*O], and dx's shape."""
    o, kh, kw, c = w.shape
    frame = transposed_input(np.asarray(err), (kh, kw), stride, pad, dilation, in_hw)
    cols, shape = gemm_patches(frame, (c, kh, kw, o), 1, 0, dilation)
    return cols, shape, flipped_taps(w)


def flipped_taps(w) -> np.ndarray:
    """A conv weight (O, KH, KW, C) as backward data's GEMM operand b[C, KH*KW*O], taps flipped."""
    o, kh, kw, c = w.shape
    return np.ascontiguousarray(np.asarray(w)[:, ::-1, ::-1, :].transpose(3, 1, 2, 0)).reshape(c, -1)


def pool_windows(x, kernel, stride):
    """NHWC -> [N, OH, OW, C, kernel*kernel] view of each pooling window."""
    n, h, w, c = x.shape
    oh, ow = out_size(h, kernel, stride, 0), out_size(w, kernel, stride, 0)
    s = x.strides
    win = as_strided(
        x, (n, oh, ow, c, kernel, kernel), (s[0], s[1] * stride, s[2] * stride, s[3], s[1], s[2]), writeable=False
    )
    return win.reshape(n, oh, ow, c, kernel * kernel)
