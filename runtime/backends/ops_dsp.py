"""The Hexagon DSP backend: HVX kernels reached through a transport.

Transports (DSPTRAIN_DSP=emulated|fastrpc|auto): `dsp_emulated` runs the kernels in
a static Hexagon server under qemu-hexagon; `dsp_fastrpc` reaches a phone's cDSP.
Both share one memory arena with the host (dsp_arena) and one op contract
(dsp_kernels/ops.h, mirrored by dsp_abi).

Subgraph reuse: results are returned as views into the arena. When such a view comes
back as an input (weights updated on the DSP, activations saved for backward) it is
used in place, so only tensors produced elsewhere cross to the DSP. Op descriptors are
prepared once per (op, shapes, parameters) and patched with offsets per call;
`prepare()` drops them when the plan changes. `reuse=False` copies everything every
call (the baseline of bench/bench_dsp.py). Fused hooks run as one batch and keep the
int32 accumulators in the arena.

Failures: a dead or hung server, or an error status, raises BackendError (NoSupport
for NO_SUPPORT); the next call restarts the server. Caller arrays are never written.

This file holds the hooks; what they stand on is next to it: `dsp_shapes` (what the
kernels accept), `dsp_link` (the transport, the arena traffic, descriptors, batches and
their costs).
"""

from __future__ import annotations

import os

import numpy as np

from .. import numerics
from ..errors import NoSupport
from . import dsp_abi as abi
from . import dsp_shapes as shapes
from .base import DILATED_HOOKS, Backend
from .dsp_link import DspLink, pick_mode
from .grouped_hooks import GROUPED_HOOKS

_TIMEOUT = 120.0
_ARENA_MB = 256


class DspBackend(DspLink, Backend):
    name = "dsp"
    hooks = frozenset(
        {
            "gemm_s8",
            "conv2d_s8",
            "conv2d_bwd_data_s8",
            "conv2d_bwd_weight_s8",
            *DILATED_HOOKS,  # base.py's patches (host) into gemm.c
            *GROUPED_HOOKS,  # grouped_hooks.py: per group on conv.c / gemm.c, depthwise on dwconv*.c
            "absmax",
            "shift_round",
            "requantize",
            "conv2d_requant_s8",
            "gemm_requant_s8",
            "conv2d_bwd_data_requant_s8",
            "relu_s8",
            "relu_bwd_s8",
            "maxpool_s8",
            "maxpool_bwd_s8",
            "niti_update_s8",
            "dwconv2d_s8",
            "dwconv2d_requant_s8",
            "dwconv2d_bwd_data_s8",
            "dwconv2d_bwd_data_requant_s8",
            "dwconv2d_bwd_weight_s8",
        }
    )
    _HOOK_OPS = {  # hook -> DSP op codes it needs (checked against the server's table)
        "gemm_s8": (abi.OP_GEMM_S8,),
        "conv2d_s8": (abi.OP_CONV2D_S8,),
        "conv2d_bwd_data_s8": (abi.OP_CONV2D_BWD_DATA_S8,),
        "conv2d_bwd_weight_s8": (abi.OP_CONV2D_BWD_WEIGHT_S8,),
        **{hook: (abi.OP_GEMM_S8, abi.OP_REQUANT) for hook in DILATED_HOOKS},
        # per group on the conv / GEMM kernels, depthwise (dilated too) on the depthwise ones
        **{
            hook: (abi.OP_CONV2D_S8, abi.OP_CONV2D_BWD_DATA_S8, abi.OP_CONV2D_BWD_WEIGHT_S8, abi.OP_GEMM_S8)
            + (abi.OP_DWCONV2D_S8, abi.OP_DWCONV2D_BWD_DATA_S8, abi.OP_DWCONV2D_BWD_WEIGHT_S8, abi.OP_REQUANT)
            for hook in GROUPED_HOOKS
        },
        "absmax": (abi.OP_ABSMAX,),
        "shift_round": (abi.OP_REQUANT,),
        "requantize": (abi.OP_REQUANT,),
        "conv2d_requant_s8": (abi.OP_CONV2D_S8, abi.OP_REQUANT),
        "gemm_requant_s8": (abi.OP_GEMM_S8, abi.OP_REQUANT),
        "conv2d_bwd_data_requant_s8": (abi.OP_CONV2D_BWD_DATA_S8, abi.OP_REQUANT),
        "relu_s8": (abi.OP_RELU_S8,),
        "relu_bwd_s8": (abi.OP_RELU_BWD_S8,),
        "maxpool_s8": (abi.OP_MAXPOOL_S8,),
        "maxpool_bwd_s8": (abi.OP_MAXPOOL_BWD_S8,),
        "niti_update_s8": (abi.OP_NITI_UPDATE_S8,),
        "dwconv2d_s8": (abi.OP_DWCONV2D_S8,),
        "dwconv2d_requant_s8": (abi.OP_DWCONV2D_S8, abi.OP_REQUANT),
        "dwconv2d_bwd_data_s8": (abi.OP_DWCONV2D_BWD_DATA_S8,),
        "dwconv2d_bwd_data_requant_s8": (abi.OP_DWCONV2D_BWD_DATA_S8, abi.OP_REQUANT),
        "dwconv2d_bwd_weight_s8": (abi.OP_DWCONV2D_BWD_WEIGHT_S8,),
    }

    def __init__(
        self,
        transport: str | None = None,
        timeout: float | None = None,
        reuse: bool = True,
        arena_mb: int | None = None,
        hvx_threads: int = 4,
    ):
        super().__init__(
            mode=transport or os.environ.get("DSPTRAIN_DSP", "auto"),
            timeout=timeout or float(os.environ.get("DSPTRAIN_DSP_TIMEOUT", _TIMEOUT)),
            reuse=reuse,
            arena_bytes=(arena_mb or int(os.environ.get("DSPTRAIN_DSP_ARENA_MB", _ARENA_MB))) << 20,
            hvx_threads=hvx_threads,
        )

    # ------------------------------------------------------------ discovery
    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            name, why = pick_mode(os.environ.get("DSPTRAIN_DSP", "auto"))
        except ValueError as exc:
            return False, str(exc)
        return name is not None, why

    @classmethod
    def chosen_by_auto(cls) -> tuple[bool, str]:
        """auto takes a real DSP only: the emulator checks correctness, at a fraction of the CPU's speed."""
        name, why = pick_mode(os.environ.get("DSPTRAIN_DSP", "auto"))
        if name == "emulated":
            return False, f"{why}; the emulated DSP runs only when asked for (--backend dsp)"
        return name is not None, why

    def supports(self, op) -> tuple[bool, str]:
        ok, why = super().supports(op)
        if not ok or self._transport is None or not self._transport.op_mask:
            return ok, why
        table = self._transport.op_mask
        missing = [h for h in op.hooks if any(not table >> c & 1 for c in self._HOOK_OPS.get(h, ()))]
        if missing:
            return False, f"the DSP server's op table lacks {', '.join(missing)}"
        return True, why

    def prepare(self, graph, ops) -> None:
        """A new plan: forget prepared descriptors and start the DSP now, not mid-step."""
        self._templates.clear()
        self.transport.start()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # ------------------------------------------------------------ int8 products
    def accumulate(self, into, hook: str, *args):
        """into + hook(*args) for an int32 product hook (gemm_s8, conv2d_s8, ...), the sum
        made on the DSP: the kernel adds into the buffer (DSPT_F_ACCUMULATE) instead of
        writing it, as a product split over its reduction sums its parts there."""
        self._into = np.ascontiguousarray(into, dtype=np.int32)
        try:
            return getattr(self, hook)(*args)
        finally:
            self._into = None

    def gemm_s8(self, a, b):
        a, b, shape = shapes.gemm_args(a, b)
        return self._product("gemm_s8", abi.OP_GEMM_S8, a, b, shape)

    def gemm_requant_s8(self, a, b, mode, rng, shift=None):
        a, b, shape = shapes.gemm_args(a, b)
        return self._product("gemm_requant_s8", abi.OP_GEMM_S8, a, b, shape, (mode, rng, shift))

    def conv2d_s8(self, x, w, stride, pad):
        x, w, shape = shapes.conv_out(x, w, stride, pad)
        return self._product(
            "conv2d_s8", abi.OP_CONV2D_S8, x, w, shape, stride=stride, pad=pad, kernel_h=w.shape[1], kernel_w=w.shape[2]
        )

    def conv2d_requant_s8(self, x, w, stride, pad, mode, rng, shift=None):
        x, w, shape = shapes.conv_out(x, w, stride, pad)
        return self._product(
            "conv2d_requant_s8",
            abi.OP_CONV2D_S8,
            x,
            w,
            shape,
            (mode, rng, shift),
            stride=stride,
            pad=pad,
            kernel_h=w.shape[1],
            kernel_w=w.shape[2],
        )

    def conv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        err, w, shape = shapes.bwd_data_out(err, w, in_hw)
        return self._product(
            "conv2d_bwd_data_s8",
            abi.OP_CONV2D_BWD_DATA_S8,
            err,
            w,
            shape,
            stride=stride,
            pad=pad,
            kernel_h=w.shape[1],
            kernel_w=w.shape[2],
        )

    def conv2d_bwd_data_requant_s8(self, err, w, stride, pad, in_hw, mode, rng, shift=None):
        err, w, shape = shapes.bwd_data_out(err, w, in_hw)
        return self._product(
            "conv2d_bwd_data_requant_s8",
            abi.OP_CONV2D_BWD_DATA_S8,
            err,
            w,
            shape,
            (mode, rng, shift),
            stride=stride,
            pad=pad,
            kernel_h=w.shape[1],
            kernel_w=w.shape[2],
        )

    def conv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        err, x = np.asarray(err), np.asarray(x)
        shapes.check_s8("conv2d_bwd_weight_s8", err, x)
        o = err.shape[-1]
        shapes.check_depth("conv2d_bwd_weight_s8", err.size // max(o, 1))
        shape = (o, kernel[0], kernel[1], x.shape[-1])
        return self._product(
            "conv2d_bwd_weight_s8",
            abi.OP_CONV2D_BWD_WEIGHT_S8,
            err,
            x,
            shape,
            stride=stride,
            pad=pad,
            kernel_h=kernel[0],
            kernel_w=kernel[1],
        )

    # ------------------------------------------------------------ depthwise products
    # The DSP reads depthwise weights tap-major, w[KH, KW, C] (its lanes are channels), and
    # writes the weight gradient so: shapes.dw_weights and dwconv2d_bwd_weight_s8 transpose.
    def _dwconv(self, hook, x, w, stride, pad, epilogue=None):
        x, wt = shapes.dw_weights(hook, x, w)
        n, h, wd, c = x.shape
        kh, kw = wt.shape[:2]
        shape = (n, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1, c)
        return self._product(
            hook, abi.OP_DWCONV2D_S8, x, wt, shape, epilogue, stride=stride, pad=pad, kernel_h=kh, kernel_w=kw
        )

    def _dwconv_bwd_data(self, hook, err, w, stride, pad, in_hw, epilogue=None):
        err, wt = shapes.dw_weights(hook, err, w)
        shape = (err.shape[0], in_hw[0], in_hw[1], err.shape[3])
        return self._product(
            hook,
            abi.OP_DWCONV2D_BWD_DATA_S8,
            err,
            wt,
            shape,
            epilogue,
            stride=stride,
            pad=pad,
            kernel_h=wt.shape[0],
            kernel_w=wt.shape[1],
        )

    def dwconv2d_s8(self, x, w, stride, pad):
        return self._dwconv("dwconv2d_s8", x, w, stride, pad)

    def dwconv2d_requant_s8(self, x, w, stride, pad, mode, rng, shift=None):
        return self._dwconv("dwconv2d_requant_s8", x, w, stride, pad, (mode, rng, shift))

    def dwconv2d_bwd_data_s8(self, err, w, stride, pad, in_hw):
        return self._dwconv_bwd_data("dwconv2d_bwd_data_s8", err, w, stride, pad, in_hw)

    def dwconv2d_bwd_data_requant_s8(self, err, w, stride, pad, in_hw, mode, rng, shift=None):
        return self._dwconv_bwd_data("dwconv2d_bwd_data_requant_s8", err, w, stride, pad, in_hw, (mode, rng, shift))

    def dwconv2d_bwd_weight_s8(self, err, x, stride, pad, kernel):
        err, x = np.asarray(err), np.asarray(x)
        shapes.check_s8("dwconv2d_bwd_weight_s8", err, x)
        if err.ndim != 4 or x.ndim != 4 or err.shape[3] != x.shape[3] or err.shape[0] != x.shape[0]:
            raise NoSupport("dsp", f"dwconv2d_bwd_weight_s8: err {err.shape} and x {x.shape} do not pair")
        shapes.check_depth("dwconv2d_bwd_weight_s8", err.size // max(err.shape[3], 1))
        c, (kh, kw) = x.shape[3], kernel
        into = self._into
        if into is not None:  # the kernel adds into its own (tap-major) layout
            self._into = np.ascontiguousarray(np.asarray(into)[..., 0].transpose(1, 2, 0))
        dw = self._product(
            "dwconv2d_bwd_weight_s8",
            abi.OP_DWCONV2D_BWD_WEIGHT_S8,
            err,
            x,
            (kh, kw, c),
            stride=stride,
            pad=pad,
            kernel_h=kh,
            kernel_w=kw,
        )
        return np.ascontiguousarray(np.asarray(dw).transpose(2, 0, 1))[..., None]

    # ------------------------------------------------------------ epilogue
    def requantize(self, acc, mode, rng, shift=None, bits=8):
        if mode not in abi.ROUND_MODES:
            raise ValueError(f"rounding mode {mode!r} is not one of {numerics.ROUNDING_MODES}")
        return self._requant("requantize", acc, mode, rng, shift, bits)

    def shift_round(self, acc, shift, mode, rng):
        if mode not in abi.ROUND_MODES:
            raise ValueError(f"rounding mode {mode!r} is not one of {numerics.ROUNDING_MODES}")
        if mode == "sto" and rng is None:
            raise ValueError("stochastic rounding needs an RngKey")
        return self._requant("shift_round", acc, mode, rng, max(int(shift), 0), check=False)[0]

    def absmax(self, acc):
        acc = shapes.acc_input("absmax", acc)
        if acc.size == 0:
            return 0

        def go(temps):
            d = self._desc(abi.OP_ABSMAX, abi.I32, (self._put(acc, np.int32, temps),), a=(acc.size,))
            self._run([d])
            return int(d.result_absmax)

        return self._call(go)

    # ------------------------------------------------------------ element-wise
    def relu_s8(self, x):
        x = np.asarray(x)
        shapes.check_s8("relu_s8", x)
        return self._eltwise("relu_s8", abi.OP_RELU_S8, [x], [(x.shape, np.int8)])

    def relu_bwd_s8(self, err, y):
        err, y = np.asarray(err), np.asarray(y)
        shapes.check_s8("relu_bwd_s8", err, y)
        return self._eltwise("relu_bwd_s8", abi.OP_RELU_BWD_S8, [err, y], [(err.shape, np.int8)])

    def maxpool_s8(self, x, kernel, stride):
        x = np.asarray(x)
        shapes.check_s8("maxpool_s8", x)
        n, h, w, c = x.shape
        shape = (n, (h - kernel) // stride + 1, (w - kernel) // stride + 1, c)
        return self._eltwise(
            "maxpool_s8",
            abi.OP_MAXPOOL_S8,
            [x],
            [(shape, np.int8), (shape, np.uint8)],
            kernel_h=kernel,
            kernel_w=kernel,
            stride=stride,
        )

    def maxpool_bwd_s8(self, err, argmax, kernel, stride, in_hw):
        err, argmax = np.asarray(err), np.asarray(argmax)
        shapes.check_s8("maxpool_bwd_s8", err)
        shape = (err.shape[0], in_hw[0], in_hw[1], err.shape[3])
        return self._eltwise(
            "maxpool_bwd_s8",
            abi.OP_MAXPOOL_BWD_S8,
            [err, argmax.astype(np.uint8, copy=False)],
            [(shape, np.int8)],
            kernel_h=kernel,
            kernel_w=kernel,
            stride=stride,
        )

    # ------------------------------------------------------------ NITI update
    def niti_update_s8(self, w, grad, mu, mode, rng):
        w, grad = np.asarray(w), shapes.acc_input("niti_update_s8", grad)
        shapes.check_s8("niti_update_s8", w)
        if grad.shape != w.shape:
            raise NoSupport("dsp", f"niti_update_s8: grad {grad.shape} does not match w {w.shape}")

        def go(temps):
            ow, og = self._put(w, np.int8, temps), self._put(grad, np.int32, temps)
            out = self._new(w.shape, np.int8, temps)
            d = self._desc(
                abi.OP_NITI_UPDATE_S8,
                abi.I8,
                (ow, og),
                (out,),
                a=(w.size,),
                b=(w.size,),
                out=(w.size,),
                bits=int(mu),
                round_mode=abi.ROUND_MODES[mode],
                rng=self._rng(rng),
            )
            self._run([d])
            return self._get(out, w.shape, np.int8, temps)

        return self._call(go)

    # ------------------------------------------------------------ debugging (tests)
    def debug_sleep(self, ms: int) -> None:
        """Make the DSP sleep `ms` milliseconds (emulated only): a hung server for tests."""
        self._run([self._desc(abi.OP_DEBUG_SLEEP, 0, shift=int(ms))])

    def debug_crash(self) -> None:
        """Make the DSP exit without answering (emulated only)."""
        self._run([self._desc(abi.OP_DEBUG_CRASH, 0)])
