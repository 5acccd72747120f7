"""The backend contract: the hooks a backend implements, and which are optional.

Layouts: activations are NHWC, conv weights are (O, KH, KW, C), matrices are
row-major. `gemm_s8(a, b)` computes `a @ b.T` so both operands keep the reduction
dimension contiguous, which is what int8 dot-product instructions (VNNI, vrmpy,
NEON sdot) want.

Required hooks raise `NotImplementedError("<backend>: needs <hook>")` (`_needs`). Optional hooks
(marked so) have a default composed from required ones; a backend overrides them
only to go faster (a fused epilogue, a kernel that stays on the device).
Every hook returns exactly what `ops_ref` returns, bit for bit, for integer dtypes.
"""

from __future__ import annotations

import numpy as np

from .. import layout, numerics
from ..numerics import RngKey
from .float_hooks import FloatHooks
from .grouped_hooks import GroupedHooks


class Backend(FloatHooks, GroupedHooks):
    """Base of every backend. Subclasses set `name` and override hooks. The float hooks of
    the emulated recipes and the mobile CNNs' float layers (those the CPU and the NumPy
    judge implement, the DSP leaves to them) are declared in float_hooks.py; the grouped
    convolution's (composed from the dense and depthwise hooks) in grouped_hooks.py."""

    name = "base"
    #: hooks this backend implements natively; `supports` consults it.
    hooks: frozenset[str] = frozenset()
    #: (optional) True when its product kernels block their operands for the caches
    #: themselves: batch splitting (plan.py) then bounds only their accumulator scratch.
    blocks_for_cache: bool = False

    # ------------------------------------------------------------ discovery
    @classmethod
    def available(cls) -> tuple[bool, str]:
        """(usable here, why or why not) -- shown by `dsptrain info`."""
        return True, "always available"

    @classmethod
    def chosen_by_auto(cls) -> tuple[bool, str]:
        """(optional) Should `--backend auto` use it? Default: whenever it is available."""
        return cls.available()

    def supports(self, op) -> tuple[bool, str]:
        """Can this backend run `op`? Returns (answer, reason)."""
        missing = [h for h in op.hooks if h not in self.hooks]
        if missing:
            return False, f"{self.name} has no {', '.join(missing)}"
        return True, f"{self.name} implements {', '.join(op.hooks) or 'it'}"

    def close(self) -> None:
        """Release devices, threads and files. Safe to call twice."""

    #: the Op being run; the executor sets it before calling hooks, so a backend can
    #: key per-op state (resident weights, prepared descriptors) by `current_op.name`.
    current_op = None

    def prepare(self, graph, ops) -> None:
        """(optional) Called once each time a plan is built, with the TrainGraph and the
        ops placed on this backend: pack weights, build op descriptors. Default: nothing."""

    def scratch_bytes(self, graph, op, rows: int) -> dict[str, int]:
        """(optional) Bytes the backend allocates for itself (beyond the arrays it returns)
        to run `op` of TrainGraph `graph` on `rows` rows of the batch, by buffer name. A name is one
        buffer that is reused and grows to its largest request, then is kept (a
        high-water), so the memory planner counts per name the largest over a step, for
        the whole step. Default: {} (nothing kept; only what the planner already counts)."""
        return {}

    def release_scratch(self) -> int:
        """(optional) Free the scratch `scratch_bytes` says is kept, so that a smaller memory
        plan adopted between steps holds again; returns the bytes freed. Called only between
        steps. Default: 0 (nothing kept)."""
        return 0

    # ------------------------------------------------------------ int8 products (required)
    def gemm_s8(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """int8 a[M,K] @ b[N,K].T -> int32 [M,N] (int64 when K*127*127 >= 2**31)."""
        self._needs("gemm_s8")

    def conv2d_s8(self, x, w, stride: int, pad: int) -> np.ndarray:
        """int8 x[N,H,W,C] * w[O,KH,KW,C] -> int32 [N,OH,OW,O]."""
        self._needs("conv2d_s8")

    def conv2d_bwd_data_s8(self, err, w, stride: int, pad: int, in_hw: tuple[int, int]) -> np.ndarray:
        """Transposed conv: int8 err[N,OH,OW,O], w[O,KH,KW,C] -> int32 [N,H,W,C]."""
        self._needs("conv2d_bwd_data_s8")

    def conv2d_bwd_weight_s8(self, err, x, stride: int, pad: int, kernel: tuple[int, int]) -> np.ndarray:
        """Weight gradient: int8 err[N,OH,OW,O], x[N,H,W,C] -> int32 [O,KH,KW,C]."""
        self._needs("conv2d_bwd_weight_s8")

    # ------------------------------------------------------------ dilated products (optional)
    # Taps `dilation` pixels apart (weight (O, KH, KW, C), pad symmetric). Default: the patches
    # gathered with their gaps (layout.patches, a copy) times the weight in one gemm_s8 or
    # gemm_requant_s8, so every product runs on the backend's own exact GEMM; backward data is
    # the stride-1 conv of err spread on zeros (layout.transposed_input) with the taps flipped.
    # The dtype follows gemm_s8's rule on the reduction depth, as ops_ref's does.
    def conv2d_dilated_s8(self, x, w, stride: int, pad: int, dilation: int) -> np.ndarray:
        """(optional) int8 x[N,H,W,C] * w[O,KH,KW,C], taps dilation apart -> int32 [N,OH,OW,O]."""
        cols, shape = layout.gemm_patches(x, w.shape, stride, pad, dilation)
        return self.gemm_s8(cols, layout.gemm_weight(w)).reshape(shape)

    def conv2d_dilated_requant_s8(
        self, x, w, stride: int, pad: int, dilation: int, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_dilated_s8 then requantize (the GEMM's fused epilogue)."""
        cols, shape = layout.gemm_patches(x, w.shape, stride, pad, dilation)
        q, shift = self.gemm_requant_s8(cols, layout.gemm_weight(w), mode, rng, shift)
        return q.reshape(shape), shift

    def conv2d_dilated_bwd_data_s8(self, err, w, stride: int, pad: int, dilation: int, in_hw) -> np.ndarray:
        """(optional) Transposed dilated conv: int8 err[N,OH,OW,O], w[O,KH,KW,C] -> int32 [N,H,W,C]."""
        cols, shape, flipped = layout.gemm_transposed(err, w, stride, pad, dilation, in_hw)
        return self.gemm_s8(cols, flipped).reshape(shape)

    def conv2d_dilated_bwd_data_requant_s8(
        self, err, w, stride: int, pad: int, dilation: int, in_hw, mode: str, rng: RngKey | None, shift=None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_dilated_bwd_data_s8 then requantize."""
        cols, shape, flipped = layout.gemm_transposed(err, w, stride, pad, dilation, in_hw)
        q, shift = self.gemm_requant_s8(cols, flipped, mode, rng, shift)
        return q.reshape(shape), shift

    def conv2d_dilated_bwd_weight_s8(self, err, x, stride: int, pad: int, dilation: int, kernel) -> np.ndarray:
        """(optional) Weight gradient: int8 err[N,OH,OW,O], x[N,H,W,C] -> int32 [O,KH,KW,C]
        (int64 when N*OH*OW*127*127 >= 2**31): err^T times the dilated patches."""
        o, (kh, kw), c = err.shape[-1], kernel, x.shape[-1]
        cols, _ = layout.gemm_patches(x, (o, kh, kw, c), stride, pad, dilation)
        err_t = np.ascontiguousarray(err.reshape(-1, o).T)
        return self.gemm_s8(err_t, np.ascontiguousarray(cols.T)).reshape(o, kh, kw, c)

    # ------------------------------------------------------------ depthwise products
    # One filter per channel: groups == C, weight (C, KH, KW, 1), pad symmetric, no dilation.
    # The int8 hooks return exact sums, ops_ref's bits; the float32 ones the sums in the
    # order ops_ref states (each product rounded, then added; no fused multiply-add).
    def dwconv2d_s8(self, x, w, stride: int, pad: int) -> np.ndarray:
        """int8 x[N,H,W,C] * w[C,KH,KW,1], channel by channel -> int32 [N,OH,OW,C]."""
        self._needs("dwconv2d_s8")

    def dwconv2d_bwd_data_s8(self, err, w, stride: int, pad: int, in_hw: tuple[int, int]) -> np.ndarray:
        """Transposed depthwise conv: int8 err[N,OH,OW,C], w[C,KH,KW,1] -> int32 [N,H,W,C]."""
        self._needs("dwconv2d_bwd_data_s8")

    def dwconv2d_bwd_weight_s8(self, err, x, stride: int, pad: int, kernel: tuple[int, int]) -> np.ndarray:
        """Weight gradient: int8 err[N,OH,OW,C], x[N,H,W,C] -> int32 [C,KH,KW,1] (int64 when
        N*OH*OW*127*127 >= 2**31)."""
        self._needs("dwconv2d_bwd_weight_s8")

    def dwconv2d_requant_s8(
        self, x, w, stride: int, pad: int, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) dwconv2d_s8 then requantize, so the int32 sums can stay in cache."""
        return self.requantize(self.dwconv2d_s8(x, w, stride, pad), mode, rng, shift)

    def dwconv2d_bwd_data_requant_s8(
        self, err, w, stride: int, pad: int, in_hw, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) dwconv2d_bwd_data_s8 then requantize."""
        return self.requantize(self.dwconv2d_bwd_data_s8(err, w, stride, pad, in_hw), mode, rng, shift)

    def dwconv2d_f32(self, x, w, stride: int, pad: int) -> np.ndarray:
        """float32 depthwise forward: x[N,H,W,C] * w[C,KH,KW,1] -> [N,OH,OW,C]."""
        self._needs("dwconv2d_f32")

    def dwconv2d_bwd_data_f32(self, err, w, stride: int, pad: int, in_hw) -> np.ndarray:
        """float32 depthwise backward data -> [N,H,W,C]."""
        self._needs("dwconv2d_bwd_data_f32")

    def dwconv2d_bwd_weight_f32(self, err, x, stride: int, pad: int, kernel) -> np.ndarray:
        """float32 depthwise weight gradient -> [C,KH,KW,1]."""
        self._needs("dwconv2d_bwd_weight_f32")

    # FP8's depthwise passes (ref_fp8_depthwise.py states the rule): FP8/FP16 values as float32,
    # each product rounded to FP16, a dot product summed over its own terms in chunked FP16.
    def dwconv2d_fp16_chunked(self, x, w, stride: int, pad: int, chunk: int, fp16_adds: bool) -> np.ndarray:
        """float32 x[N,H,W,C] * w[C,KH,KW,1] -> [N,OH,OW,C] FP16 values: each output's taps chunked."""
        self._needs("dwconv2d_fp16_chunked")

    def dwconv2d_bwd_data_fp16(self, err, w, stride: int, pad: int, in_hw) -> np.ndarray:
        """FP16 products err * w scattered onto [N,H,W,C], each pixel's added exactly, rounded once."""
        self._needs("dwconv2d_bwd_data_fp16")

    def dwconv2d_bwd_weight_fp16_chunked(self, err, x, stride: int, pad: int, kernel, chunk: int, fp16_adds: bool):
        """[C,KH,KW,1] FP16 values: each channel's tap summed over the N*OH*OW pixels, chunked."""
        self._needs("dwconv2d_bwd_weight_fp16_chunked")

    # ------------------------------------------------------------ epilogue (required)
    def absmax(self, acc: np.ndarray) -> int:
        """max |acc| as a Python int (0 for an empty tensor)."""
        self._needs("absmax")

    def shift_round(self, acc, shift: int, mode: str, rng: RngKey | None) -> np.ndarray:
        """numerics.shift_round on the device: int32/int64 -> int8."""
        self._needs("shift_round")

    # ------------------------------------------------------------ epilogue (optional)
    def requantize(
        self, acc, mode: str, rng: RngKey | None, shift: int | None = None, bits: int = 8
    ) -> tuple[np.ndarray, int]:
        """(optional) Range estimate + shift in one call. Returns (int8 tensor, shift used).

        `shift=None`: the shift is estimated, `activation_shift(absmax(acc), bits)`.
        `shift=s` (s >= 0, a given shift, e.g. from self-adaptive rescaling): the shift used
        is `max(s, activation_shift(absmax(acc), bits))`. A given shift at least as large
        as the estimate is used as is (no separate range pass: a fused backend reads `acc`
        once and checks the range in that same pass; the DSP's rounding keeps its largest
        rounded magnitude, dsp_kernels/requant.c); a smaller one would saturate, so the
        estimated shift is used instead and returned (`shift_used != s` tells the caller
        its shift was stale). This rule is also what makes micro-batches agree: over
        slices of a batch, max(s, estimate of each slice) peaks at max(s, estimate of the
        whole batch). Every backend implements it bit for bit.
        """
        needed = numerics.activation_shift(self.absmax(acc), bits)
        if shift is None or needed > shift:
            shift = needed
        return self.shift_round(acc, shift, mode, rng), shift

    def conv2d_requant_s8(
        self, x, w, stride: int, pad: int, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_s8 then requantize, so the int32 accumulators can stay on the device."""
        return self.requantize(self.conv2d_s8(x, w, stride, pad), mode, rng, shift)

    def gemm_requant_s8(self, a, b, mode: str, rng: RngKey | None, shift: int | None = None) -> tuple[np.ndarray, int]:
        """(optional) gemm_s8 then requantize."""
        return self.requantize(self.gemm_s8(a, b), mode, rng, shift)

    def conv2d_bwd_data_requant_s8(
        self, err, w, stride: int, pad: int, in_hw, mode: str, rng: RngKey | None, shift: int | None = None
    ) -> tuple[np.ndarray, int]:
        """(optional) conv2d_bwd_data_s8 then requantize."""
        return self.requantize(self.conv2d_bwd_data_s8(err, w, stride, pad, in_hw), mode, rng, shift)

    # ------------------------------------------------------------ element-wise int8 (required)
    def relu_s8(self, x: np.ndarray) -> np.ndarray:
        self._needs("relu_s8")

    def relu_bwd_s8(self, err: np.ndarray, y: np.ndarray) -> np.ndarray:
        """err where the forward output y > 0, else 0."""
        self._needs("relu_bwd_s8")

    def maxpool_s8(self, x, kernel: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
        """NHWC max-pool, no padding. Returns (y, argmax) with argmax the uint8 index
        kh*kernel+kw of the first maximum in each window."""
        self._needs("maxpool_s8")

    def maxpool_bwd_s8(self, err, argmax, kernel: int, stride: int, in_hw) -> np.ndarray:
        """Scatter err to each window's argmax; overlapping windows add, then clip to +-127."""
        self._needs("maxpool_bwd_s8")

    # ------------------------------------------------------------ NITI loss and update (required)
    def niti_loss_grad_s8(self, logits, exponent: int, labels, rng: RngKey) -> np.ndarray:
        """NITI's integer softmax cross-entropy gradient, int8 [B, classes], exponent -7."""
        self._needs("niti_loss_grad_s8")

    def niti_update_s8(self, w, grad, mu: int, mode: str, rng: RngKey | None) -> np.ndarray:
        """w - round(grad >> (range(grad) - mu)), clipped: NITI's integer SGD step."""
        self._needs("niti_update_s8")


#: FP8's depthwise hooks (required where a backend takes FP8's depthwise ops)
FP8_DEPTHWISE_HOOKS = ("dwconv2d_fp16_chunked", "dwconv2d_bwd_data_fp16", "dwconv2d_bwd_weight_fp16_chunked")
#: the dilated convolution's hooks (optional: composed from gemm_s8 above)
DILATED_HOOKS = ("conv2d_dilated_s8", "conv2d_dilated_bwd_data_s8", "conv2d_dilated_bwd_weight_s8")
