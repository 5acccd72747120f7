"""Tensor layout helpers shared by the recipes and the reference backend (NumPy, NHWC).

im2col turns a convolution into a GEMM over patches; col2im scatters patch gradients back;
pool_windows views each pooling window. They hold no numerics: the recipes' float and
emulated layers and ops_ref.py's integer kernels both build on them.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def im2col(x: np.ndarray, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
    """NHWC -> [N*OH*OW, KH*KW*C] float64 patches (K ordered kh, kw, c like the weights)."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    oh, ow = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    s = xp.strides
    windows = as_strided(
        xp, (n, oh, ow, kh, kw, c), (s[0], s[1] * stride, s[2] * stride, s[1], s[2], s[3]), writeable=False
    )
    return windows.reshape(n * oh * ow, kh * kw * c).astype(np.float64)


def col2im(dcols, err_shape, kernel_hwc, stride, pad, in_hw):
    """Scatter-add [N*OH*OW, KH*KW*C] patch gradients back onto NHWC (float64)."""
    n, oh, ow, _ = err_shape
    kh, kw, c = kernel_hwc
    h, w = in_hw
    dcols = dcols.reshape(n, oh, ow, kh, kw, c)
    dx = np.zeros((n, h + 2 * pad, w + 2 * pad, c), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            dx[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :] += dcols[:, :, :, i, j, :]
    return dx[:, pad : pad + h, pad : pad + w, :]


def pool_windows(x, kernel, stride):
    """NHWC -> [N, OH, OW, C, kernel*kernel] view of each pooling window."""
    n, h, w, c = x.shape
    oh, ow = out_size(h, kernel, stride, 0), out_size(w, kernel, stride, 0)
    s = x.strides
    win = as_strided(
        x, (n, oh, ow, c, kernel, kernel), (s[0], s[1] * stride, s[2] * stride, s[3], s[1], s[2]), writeable=False
    )
    return win.reshape(n, oh, ow, c, kernel * kernel)
