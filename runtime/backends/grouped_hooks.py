"""The grouped convolution's int8 hooks (base.Backend inherits them): groups > 1, any
dilation, weight (O, KH, KW, C / groups), pad symmetric. Every hook is optional, composed
here from the hooks each backend already runs natively, so a grouped conv runs on the
kernels of the backend it is placed on:

- a depthwise conv (groups == C == O) on the depthwise hooks; dilated, by polyphase
  decomposition (space-to-batch, as in TensorFlow's atrous convolution, Chen et al. 2017,
  DeepLab): the pixels of one residue class modulo the dilation see an undilated conv of the
  input's same class, so d*d undilated stride-1 depthwise products give every sum exactly;
- any other grouped conv as one product per group on the dense hooks (conv2d_*_s8, or the
  conv2d_dilated_* ones), the groups' results joined on the channel axis. The CPU overrides
  these with one native call a pass (ops_cpu.py, cpu_ops/conv_grouped.cpp: no slice, join or
  call per group); the DSP runs them as written.

`ops_ref` defines them by the same per-group rule on its own dilated definition (im2col), so the
judge shares no code with the depthwise path. A requantized product takes one shift for the whole
tensor, as a dense conv's does (NITI's one exponent per tensor). bench/bench_grouped.py measured
the alternatives this file does not take (block-diagonal dense weights; per-channel dense products
for a dilated depthwise conv); docs/mobile_models.md states the figures.
"""

from __future__ import annotations

import numpy as np

from .. import numerics
from ..layout import out_size, transposed_input
from ..numerics import RngKey

#: the grouped convolution's hooks (optional: composed here from each backend's own)
GROUPED_HOOKS = ("conv2d_grouped_s8", "conv2d_grouped_bwd_data_s8", "conv2d_grouped_bwd_weight_s8")


class GroupedHooks:
    """Declares the grouped conv hooks; `Backend` (base.py) is the class backends subclass."""

    def conv2d_grouped_s8(self, x, w, stride: int, pad: int, dilation: int, groups: int) -> np.ndarray:
        """(optional) int8 x[N,H,W,C] * w[O,KH,KW,C/groups], each group's output channels from
        its input channels, taps `dilation` apart -> int32 [N,OH,OW,O]."""
        if is_depthwise(x.shape[-1], w.shape[0], groups):
            return _dw_dilated(self, x, w, stride, pad, dilation)
        return _per_group(lambda xg, wg: _dense(self, xg, wg, stride, pad, dilation), x, w, groups)

    def conv2d_grouped_requant_s8(
        self, x, w, stride, pad, dilation, groups, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_grouped_s8, then one shift for the whole tensor."""
        if dilation == 1 and is_depthwise(x.shape[-1], w.shape[0], groups):
            return self.dwconv2d_requant_s8(x, w, stride, pad, mode, rng, shift)
        return self.requantize(self.conv2d_grouped_s8(x, w, stride, pad, dilation, groups), mode, rng, shift)

    def conv2d_grouped_bwd_data_s8(self, err, w, stride, pad, dilation, groups, in_hw) -> np.ndarray:
        """(optional) Transposed grouped conv: int8 err[N,OH,OW,O], w[O,KH,KW,C/groups] ->
        int32 [N,H,W,C]."""
        if is_depthwise(w.shape[0], err.shape[-1], groups) and w.shape[-1] == 1:
            if dilation == 1 or w.shape[1] == w.shape[2] == 1:
                return self.dwconv2d_bwd_data_s8(err, w, stride, pad, in_hw)
            # the stride-1 dilated conv of err spread on zeros, taps flipped (layout.transposed_input)
            frame = transposed_input(np.asarray(err), w.shape[1:3], stride, pad, dilation, in_hw)
            return _dw_dilated(self, frame, np.ascontiguousarray(w[:, ::-1, ::-1, :]), 1, 0, dilation)

        def group(err_g, w_g):
            if dilation == 1:
                return self.conv2d_bwd_data_s8(err_g, w_g, stride, pad, in_hw)
            return self.conv2d_dilated_bwd_data_s8(err_g, w_g, stride, pad, dilation, in_hw)

        return _per_group(group, err, w, groups)

    def conv2d_grouped_bwd_data_requant_s8(
        self, err, w, stride, pad, dilation, groups, in_hw, mode: str, rng: RngKey | None, shift=None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_grouped_bwd_data_s8, then one shift for the whole tensor."""
        if dilation == 1 and is_depthwise(w.shape[0], err.shape[-1], groups) and w.shape[-1] == 1:
            return self.dwconv2d_bwd_data_requant_s8(err, w, stride, pad, in_hw, mode, rng, shift)
        dx = self.conv2d_grouped_bwd_data_s8(err, w, stride, pad, dilation, groups, in_hw)
        return self.requantize(dx, mode, rng, shift)

    def conv2d_grouped_bwd_weight_s8(self, err, x, stride, pad, dilation, groups, kernel) -> np.ndarray:
        """(optional) Weight gradient: int8 err[N,OH,OW,O], x[N,H,W,C] -> [O,KH,KW,C/groups],
        int32 (int64 when N*OH*OW*127*127 >= 2**31): each group's err^T times its patches."""
        if is_depthwise(x.shape[-1], err.shape[-1], groups):
            return _dw_dilated_bwd_weight(self, err, x, stride, pad, dilation, tuple(kernel))

        def group(err_g, x_g):
            if dilation == 1:
                return self.conv2d_bwd_weight_s8(err_g, x_g, stride, pad, kernel)
            return self.conv2d_dilated_bwd_weight_s8(err_g, x_g, stride, pad, dilation, kernel)

        return _per_group(group, err, x, groups, weight_rows=True)


def is_depthwise(c: int, o: int, groups: int) -> bool:
    """A grouped conv of c input and o output channels is depthwise: one channel per group."""
    return groups > 1 and groups == c == o


def _dense(backend, x, w, stride, pad, dilation):
    if dilation == 1 or w.shape[1] == w.shape[2] == 1:
        return backend.conv2d_s8(x, w, stride, pad)
    return backend.conv2d_dilated_s8(x, w, stride, pad, dilation)


def _per_group(fn, a, b, groups: int, weight_rows: bool = False) -> np.ndarray:
    """fn(a_g, b_g) for each group, joined on the channel axis. a is an activation (its channels
    split); b the weight (its rows split), or, for a weight gradient (weight_rows), the input x
    (its channels split) and the results are the gradient's rows."""

    def block(t, i, axis):
        n = t.shape[axis] // groups
        return np.ascontiguousarray(t[i * n : (i + 1) * n] if axis == 0 else t[..., i * n : (i + 1) * n])

    parts = [fn(block(a, i, -1), block(b, i, -1 if weight_rows else 0)) for i in range(groups)]
    return np.concatenate(parts, axis=0 if weight_rows else -1)


def _residues(stride: int, dilation: int, out: int) -> list[int]:
    """The residues modulo `dilation` that the wanted stride-1 positions o*stride (o < out) meet
    (they repeat with period dilation in o)."""
    return sorted({(o * stride) % dilation for o in range(min(out, dilation))})


def _dw_dilated(backend, x, w, stride, pad, dilation) -> np.ndarray:
    """A dilated depthwise conv's exact sums on the backend's undilated dwconv2d_s8: on the padded
    input, stride-1 position a = r + d*m reads rows r + d*(m + i), so residue class r of the output
    is the undilated stride-1 conv of the input's class r. The stride then keeps every stride-th
    position; only the classes those positions meet are computed."""
    kh, kw = w.shape[1:3]
    if dilation == 1 or kh == kw == 1:
        return backend.dwconv2d_s8(x, w, stride, pad)
    n, h, wd, c = x.shape
    oh, ow = out_size(h, kh, stride, pad, dilation), out_size(wd, kw, stride, pad, dilation)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    full_h, full_w = (oh - 1) * stride + 1, (ow - 1) * stride + 1  # the stride-1 positions kept
    y1 = np.zeros((n, full_h, full_w, c), np.int32)
    for rh in _residues(stride, dilation, oh):
        for rw in _residues(stride, dilation, ow):
            rows, cols = len(range(rh, full_h, dilation)), len(range(rw, full_w, dilation))
            sub = xp[:, rh::dilation, rw::dilation, :][:, : rows + kh - 1, : cols + kw - 1]
            y1[:, rh::dilation, rw::dilation] = backend.dwconv2d_s8(np.ascontiguousarray(sub), w, 1, 0)
    return np.ascontiguousarray(y1[:, ::stride, ::stride])


def _dw_dilated_bwd_weight(backend, err, x, stride, pad, dilation, kernel) -> np.ndarray:
    """A dilated depthwise conv's weight gradient on dwconv2d_bwd_weight_s8: err spread `stride`
    apart on zeros (stride-1 positions a), then per residue class r of a modulo the dilation
    the undilated stride-1 gradient of err's class r against the padded input's class r; the
    classes' int64 sums added. int32 where N*OH*OW*127*127 fits, as ops_ref's."""
    kh, kw = kernel
    dtype = numerics.acc_dtype(err.shape[0] * err.shape[1] * err.shape[2])
    if dilation == 1 or kh == kw == 1:
        return backend.dwconv2d_bwd_weight_s8(err, x, stride, pad, kernel).astype(dtype, copy=False)
    n, oh, ow, c = err.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x
    full_h, full_w = (oh - 1) * stride + 1, (ow - 1) * stride + 1
    spread = np.zeros((n, full_h, full_w, c), err.dtype)
    spread[:, ::stride, ::stride] = err
    total = np.zeros((c, kh, kw, 1), np.int64)
    for rh in _residues(stride, dilation, oh):
        for rw in _residues(stride, dilation, ow):
            e = np.ascontiguousarray(spread[:, rh::dilation, rw::dilation])
            sub = xp[:, rh::dilation, rw::dilation, :][:, : e.shape[1] + kh - 1, : e.shape[2] + kw - 1]
            total += backend.dwconv2d_bwd_weight_s8(e, np.ascontiguousarray(sub), 1, 0, kernel)
    return total.astype(dtype)
