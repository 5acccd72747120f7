"""The float half of the backend contract (base.Backend inherits it): the float work
around the emulated recipes' products, the FP32 recipe's, and the mobile CNNs' float
layers (NITI's batch norm and activations between int8 tensors included). The CPU and the
NumPy judge implement them; a backend without them (the DSP) leaves those ops to the next
backend in the placement order. Marked hooks are optional, composed here from required
ones; the others raise `NotImplementedError("<backend>: needs <hook>")`.
"""

from __future__ import annotations

import numpy as np

from .. import float_ops, numerics


class FloatHooks:
    """Declares the float hooks; `Backend` (base.py) is the class backends subclass."""

    name = "base"

    def _needs(self, hook: str):
        raise NotImplementedError(f"{self.name}: needs {hook}")

    # ------------------------------------------------------------ float recipes (Octo, WAGEUBN, AFP, MLS, FP8, FP32)
    # The float work around the products of the emulated recipes. `ops_ref` (float_ops.py)
    # defines each one; a backend without them (the DSP) leaves those ops to the next
    # backend in the placement order. Rounding modes: round, nearest_even, sto.
    def absmax_f(self, x) -> float:
        """max |x| of a float32/float64 array (0.0 when empty)."""
        self._needs("absmax_f")

    def quantize_f(self, x, step: float, bits: int, mode: str, rng) -> np.ndarray:
        """clip(round(x / step), +-(2**(bits-1) - 1)) in float64: int8 (bits <= 8) or int16."""
        self._needs("quantize_f")

    def dequantize(self, acc, scale: float, reuse: bool = False) -> np.ndarray:
        """(optional) float32(float64(acc) * scale): a product's exact sums times its scales.
        Default: NumPy, so any backend that runs an emulated recipe's product has it.
        reuse: `acc` is the caller's temporary, which the backend may overwrite with the
        result (the CPU writes int32 sums' floats over them: no second tensor to fill)."""
        return (np.asarray(acc).astype(np.float64) * float(scale)).astype(np.float32)

    def dequantize_compensate(self, acc, scale: float, comp_scale, comp_shift, reuse: bool = False, relu: bool = False):
        """(optional) Octo's product and compensation layer from the sums: (z, y), z =
        dequantize(acc, scale), y = float32 (1 + comp_scale) * z + comp_shift per channel (the
        last axis); relu: y through relu_f32 (a ReLU that only reads y, algorithms/_fusions.py).
        Default: dequantize, then float_ops.compensation_fwd in NumPy."""
        z = self.dequantize(acc, scale, reuse)
        y = float_ops.compensation_fwd(z, np.asarray(comp_scale, np.float32), np.asarray(comp_shift, np.float32))
        return z, (self.relu_f32(y) if relu else y)

    def prc_squared_errors(self, x, top: float, ratios, qmax: int) -> list:
        """Octo's range-clipping errors, one per ratio (float64 sums, 1e-12 relative)."""
        self._needs("prc_squared_errors")

    def prc_quantize(self, x, prev_ratio: float, momentum: float, ratios, bits: int, mode: str, rng):
        """Octo's error quantizer (float_ops.prc_quantize): (q, step, new ratio); the ratio
        chosen from prc_squared_errors' sums, q bit-exact given the same choice."""
        self._needs("prc_quantize")

    def quantize_mls(self, x, group: int, top: float, tensor_scale: float, kmax: int, qmax: int, mode: str, rng):
        """MLS elements with the group shift applied, q * 2**(kmax - k): int16."""
        self._needs("quantize_mls")

    def quantize_mls_ranged(self, x, group: int, kmax: int, qmax: int, mode: str, rng):
        """(quantize_mls's int16 elements, max|x|) with the tensor scale max|x| / qmax, in one
        call: zeros and 0.0 when x is all zero."""
        self._needs("quantize_mls_ranged")

    def round_float(self, x, exponent_bits: int, mantissa_bits: int, mode: str, rng) -> np.ndarray:
        """x on a (1, exponent_bits, mantissa_bits) float grid (FP8, FP16), float32."""
        self._needs("round_float")

    def matmul_s16(self, a, b, a_transposed: bool = False) -> np.ndarray:
        """int16 (a[K,M].T if a_transposed else a[M,K]) @ b[K,N] -> int64 [M,N], exact (MLS,
        16-bit AFP errors). b is K-major, so no product needs a transposed copy."""
        self._needs("matmul_s16")

    def conv2d_s16(self, x, w, stride: int, pad: int) -> np.ndarray:
        """(optional) A conv's forward on int16 operands, exact int64 NHWC: im2col(x) @
        w[O, KH*KW*C].T. Default: im2col and matmul_s16; the CPU builds each image's patches
        in cache and multiplies them at once (no patch matrix kept)."""
        n, h, wd, _ = x.shape
        o, kh, kw, _ = w.shape
        y = self.matmul_s16(self.im2col(x, kh, kw, stride, pad), np.ascontiguousarray(w.reshape(o, -1).T))
        return y.reshape(n, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1, o)

    def conv2d_bwd_weight_s16(self, err, x, stride: int, pad: int, kernel) -> np.ndarray:
        """(optional) A conv's weight gradient on int16 operands, exact int64 [O, KH, KW, C]:
        err[N*OH*OW, O].T @ im2col(x). Default: im2col and matmul_s16; fused on the CPU."""
        kh, kw = kernel
        o = err.shape[-1]
        cols = self.im2col(x, kh, kw, stride, pad)
        return self.matmul_s16(err.reshape(-1, o), cols, a_transposed=True).reshape(o, kh, kw, x.shape[-1])

    def conv2d_bwd_data_s16(self, err, w, stride: int, pad: int, in_hw) -> np.ndarray:
        """(optional) A conv's backward data on int16 operands, exact int64 NHWC: col2im of
        err[N*OH*OW, O] @ w[O, KH*KW*C]. Default: those two hooks, so a backend that has
        them has this; the CPU runs it fused, one image at a time."""
        o, kh, kw, c = w.shape
        dcols = self.matmul_s16(err.reshape(-1, o), w.reshape(o, -1))
        return self.col2im(dcols, err.shape[:3], (kh, kw, c), stride, pad, in_hw)

    def im2col(self, x, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
        """NHWC int16 or float32 -> [N*OH*OW, KH*KW*C] patches of the same dtype, zero padded."""
        self._needs("im2col")

    def col2im(self, dcols, err_nhw, kernel_hwc, stride: int, pad: int, in_hw) -> np.ndarray:
        """Scatter-add [N*OH*OW, KH*KW*C] int64 or float64 patch sums onto NHWC (a conv's
        backward data; exact, so the order of the additions is free)."""
        self._needs("col2im")

    def matmul_fp16_chunked(self, a, b, a_transposed: bool, chunk: int, fp16_adds: bool) -> np.ndarray:
        """FP16 values (a[K,M].T if a_transposed else a[M,K]) @ b[K,N] with chunk-based FP16
        accumulation, float32 (FP8); b K-major as matmul_s16's."""
        self._needs("matmul_fp16_chunked")

    def relu_f32(self, x):
        self._needs("relu_f32")

    def relu_bwd_f32(self, err, y):
        self._needs("relu_bwd_f32")

    def maxpool_f32(self, x, kernel: int, stride: int):
        """(y, argmax) as maxpool_s8, float32."""
        self._needs("maxpool_f32")

    def maxpool_bwd_f32(self, err, argmax, kernel: int, stride: int, in_hw):
        self._needs("maxpool_bwd_f32")

    def relu_maxpool_f32(self, x, kernel: int, stride: int):
        """(optional) ReLU then max-pool, one op of the float recipes: (y, argmax) of
        maxpool_f32(relu_f32(x)). Default: the two hooks."""
        return self.maxpool_f32(self.relu_f32(x), kernel, stride)

    def relu_maxpool_bwd_f32(self, err, y, argmax, kernel: int, stride: int, in_hw):
        """(optional) relu_maxpool_f32's backward from its pooled `y`: maxpool_bwd_f32 of
        relu_bwd_f32(err, y), which equals relu_bwd_f32(maxpool_bwd_f32(err, argmax), relu_f32(x))
        (a window's error lands on its argmax cell, whose ReLU output is y). Default: the two hooks."""
        return self.maxpool_bwd_f32(self.relu_bwd_f32(err, y), argmax, kernel, stride, in_hw)

    def pool_compensation_bwd(self, err, gate, argmax, kernel: int, stride: int, z, scale):
        """(optional) Octo's compensation backward of a max-pool's input error, windows that
        do not overlap (algorithms/_fusions.py): compensation_bwd of maxpool_bwd_f32(err,
        argmax) (gate None) or relu_maxpool_bwd_f32(err, gate, argmax), the same bits.
        Default: the two hooks."""
        in_hw = tuple(z.shape[1:3])
        dx = (
            self.maxpool_bwd_f32(err, argmax, kernel, stride, in_hw)
            if gate is None
            else self.relu_maxpool_bwd_f32(err, gate, argmax, kernel, stride, in_hw)
        )
        return self.compensation_bwd(dx, z, scale)

    def compensation_fwd(self, z, scale, shift):
        """Octo's compensation layer (1 + scale) * z + shift per channel, float32."""
        self._needs("compensation_fwd")

    def compensation_bwd(self, err, z, scale, gate=None):
        """(d z, d scale, d shift); the channel sums within 1e-12 relative. `gate`: the output
        of a ReLU after the layer (algorithms/_fusions.py), err taken where gate > 0 (relu_bwd_f32)."""
        self._needs("compensation_bwd")

    # ------------------------------------------------------------ mobile CNNs' float layers
    def act_f32(self, x, function: str, params: tuple):
        """nn.Nonlinearity's `function` (clip, hardsigmoid, hardswish, sigmoid, silu, tanh) of float32 x,
        within 1 ulp of float_ops.act_f32 (float64 inside, one rounding)."""
        self._needs("act_f32")

    def act_bwd_f32(self, err, x, function: str, params: tuple):
        """d input of act_f32 from its input x (PyTorch's derivative), within 1 ulp of float_ops."""
        self._needs("act_bwd_f32")

    def mul_f32(self, x, g):
        """x * g, g of x's shape or (N, 1, 1, C) scaling channels; float32, exact as one float32 product."""
        self._needs("mul_f32")

    def mul_bwd_f32(self, err, x, g):
        """(err * g, d g): d g = err * x, summed over H and W when g scales channels (float64 sums)."""
        self._needs("mul_bwd_f32")

    def concat_channels(self, parts):
        """NHWC images of one N, H, W joined along channels, any dtype, exact."""
        self._needs("concat_channels")

    def slice_channels(self, x, start: int, stop: int):
        """Channels [start, stop) of an NHWC image, contiguous, exact."""
        self._needs("slice_channels")

    def pad_channels(self, err, start: int, channels: int):
        """`err` at channels [start, start + C) of a zero image of `channels` channels, exact."""
        self._needs("pad_channels")

    def channel_shuffle(self, x, groups: int):
        """ShuffleNet's channel shuffle of an NHWC image (C as (groups, C / groups), transposed), exact."""
        self._needs("channel_shuffle")

    def bn_fwd_f32(self, x, gamma, beta, mean, var, training: bool, momentum: float, eps: float):
        """Batch norm over every axis but the channels: (y, xhat, inv_std, new running mean, new running
        var), float32; per channel in float64 (float_ops.bn_forward_values), sums within 1e-12 relative."""
        self._needs("bn_fwd_f32")

    def bn_bwd_f32(self, err, xhat, inv_std, gamma):
        """(d x, d gamma, d beta) of bn_fwd_f32 in training (float_ops.bn_backward_values), float32."""
        self._needs("bn_bwd_f32")

    # NITI's batch norm between int8 tensors, its casts fused (algorithms/int_fused.py). The
    # composition here is the chain the fusion replaces, hook by hook: the judge.
    def bn_act_s8(self, x, gamma, beta, mean, var, training: bool, momentum: float, eps: float, act, mode, rng):
        """(optional) int8 QTensor x -> float32 -> batch norm -> act -> int8 as NITI's float-to-int8 cast
        (exponent from the range, `mode` rounding): (QTensor y, stats (2, C) float64: the mean and 1/std
        it normalised with, new running mean, new running var). act: ("none",), ("relu",) or
        ("clip", lo, hi). Default: dequantize, bn_fwd_f32, relu_f32 / act_f32, absmax_f, quantize_f."""
        xf = self.dequantize(x.q, 2.0**x.e)
        y, _, _, new_mean, new_var = self.bn_fwd_f32(xf, gamma, beta, mean, var, training, momentum, eps)
        if act[0] == "relu":
            y = self.relu_f32(y)
        elif act[0] == "clip":
            y = self.act_f32(y, "clip", tuple(act[1:]))
        e = numerics.float_exponent(self.absmax_f(y))
        q = self.quantize_f(y, 2.0**e, 8, mode, rng)
        return numerics.QTensor(q, e), float_ops.bn_stats(xf, mean, var, training, eps), new_mean, new_var

    def bn_act_bwd_s8(self, err, x, stats, gamma, beta, act, mode, rng, input_error: bool = True):
        """(optional) bn_act_s8's backward from int8 QTensors err and x (its input) and its stats:
        (QTensor dx, d gamma, d beta); dx None without `input_error` (no layer below needs it).
        Default: dequantize, x-hat and y recomputed from stats (float_ops.bn_from_stats),
        relu_bwd_f32 / act_bwd_f32, bn_bwd_f32, absmax_f, quantize_f."""
        e = self.dequantize(err.q, 2.0**err.e)
        xhat, y = float_ops.bn_from_stats(self.dequantize(x.q, 2.0**x.e), stats, gamma, beta)
        if act[0] == "relu":
            e = self.relu_bwd_f32(e, self.relu_f32(y))
        elif act[0] == "clip":
            e = self.act_bwd_f32(e, y, "clip", tuple(act[1:]))
        dx, d_gamma, d_beta = self.bn_bwd_f32(e, xhat, stats[1].astype(np.float32), gamma)
        if not input_error:
            return None, d_gamma, d_beta
        shift = numerics.float_exponent(self.absmax_f(dx))
        return numerics.QTensor(self.quantize_f(dx, 2.0**shift, 8, mode, rng), shift), d_gamma, d_beta

    def channel_mean_f32(self, x):
        """(N, C): each image's channels averaged over H and W in float64 (a global average pool)."""
        self._needs("channel_mean_f32")

    def channel_sum_f32(self, x):
        """(C,): each channel summed over every other axis in float64 (a bias gradient)."""
        self._needs("channel_sum_f32")

    def add_f32(self, a, b):
        """a + b, float32, exact (a residual add, a join of errors)."""
        self._needs("add_f32")

    def softmax_xent_grad_f32(self, logits, labels, divisor: float):
        """(softmax(logits) - onehot(labels)) / divisor, float32 (N, classes) from float32 logits and
        int64 labels, in float64 inside: within a float32 ulp of ops_ref (exp and the row's sum order)."""
        self._needs("softmax_xent_grad_f32")

    def bn_fwd_grid_f32(
        self, x, gamma, beta, mean, var, training: bool, momentum: float, eps: float, stat_bits: int, affine_bits: int
    ):
        """bn_fwd_f32 with WAGEUBN's grids (float_ops.Pow2Grids): mean, variance, 1/std and x-hat on a
        `stat_bits` power-of-two grid fitted to each's range, gamma and beta on an `affine_bits` one."""
        self._needs("bn_fwd_grid_f32")

    def bn_bwd_grid_f32(self, err, xhat, inv_std, gamma, error_bits: int, affine_bits: int):
        """bn_bwd_f32 with the incoming error on an `error_bits` grid and gamma on an `affine_bits` one."""
        self._needs("bn_bwd_grid_f32")

    def dropout_apply_f32(self, x, keep, p: float):
        """x / float32(1 - p) where the bool mask `keep` is set, else 0, float32, exact: dropout's
        forward (x) and backward (its error, the same mask)."""
        self._needs("dropout_apply_f32")

    def bias_add_f32(self, y, b):
        """y + b over the last axis (b: (C,)), float32, exact (a conv's or linear layer's bias)."""
        self._needs("bias_add_f32")

    def channel_mean_bwd_f32(self, err, in_hw):
        """The global average pool's input error: err (N, C) or (N, 1, 1, C) divided by H * W in
        float32, at every pixel of (N, H, W, C); exact."""
        self._needs("channel_mean_bwd_f32")

    def maxpool_pad_f32(self, x, kernel: int, stride: int, pad: int, out_hw):
        """(y, argmax) of a max-pool over x padded with -inf (`pad` before each axis, after it as
        many cells as `out_hw` windows reach: ceil_mode), out_hw windows; maxpool_f32's argmax, exact."""
        self._needs("maxpool_pad_f32")

    def maxpool_pad_bwd_f32(self, err, argmax, kernel: int, stride: int, pad: int, in_hw):
        """The input error (N, H, W, C) of maxpool_pad_f32, exact (added in maxpool_bwd_f32's order)."""
        self._needs("maxpool_pad_bwd_f32")

    def wageubn_update(
        self,
        q,
        e: int,
        grad,
        m,
        lr: float,
        momentum: float,
        weight_decay: float,
        grad_bits: int,
        momentum_bits: int,
        acc_bits: int,
        rng,
    ):
        """WAGEUBN's update of int32 weights q * 2**e (float_ops.wageubn_update): (new q, new
        float32 momentum), bit-exact."""
        self._needs("wageubn_update")

    def sgd_f32(self, w, grad, v, lr: float, momentum: float, weight_decay: float, nesterov: bool):
        """PyTorch's SGD step in float32: (new w, new velocity)."""
        self._needs("sgd_f32")

    def sgd_f32_group(self, params, lr: float, momentum: float, weight_decay: float, nesterov: bool):
        """sgd_f32 of each (w, grad, v) in `params` (a layer's parameters, one call):
        [(new w, new velocity)], the same bits as sgd_f32 one by one (which this composes)."""
        return [self.sgd_f32(w, grad, v, lr, momentum, weight_decay, nesterov) for w, grad, v in params]
