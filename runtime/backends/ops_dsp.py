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
"""

from __future__ import annotations

import os

import numpy as np

from .. import numerics
from ..errors import BackendError, NoSupport
from . import dsp_abi as abi
from .base import DILATED_HOOKS, Backend

_MAX_DEPTH = (2**31 - 1) // (127 * 127)  # beyond it accumulators are int64: not on the DSP
_TIMEOUT = 120.0
_ARENA_MB = 256


def _transport_class(mode: str):
    if mode == "emulated":
        from .dsp_emulated import EmulatedTransport

        return EmulatedTransport
    if mode == "fastrpc":
        from .dsp_fastrpc import FastRpcTransport

        return FastRpcTransport
    raise ValueError(f"DSPTRAIN_DSP={mode!r}: choose emulated, fastrpc or auto")


def _pick_mode(mode: str) -> tuple[str | None, str]:
    """(transport name or None, reason); auto prefers a device over the emulator."""
    if mode != "auto":
        ok, why = _transport_class(mode).available()
        return (mode if ok else None), why
    reasons = []
    for name in ("fastrpc", "emulated"):
        ok, why = _transport_class(name).available()
        if ok:
            return name, why
        reasons.append(why)
    return None, "; ".join(reasons)


def _shape4(shape) -> list[int]:
    shape = list(shape)
    if len(shape) > 4:
        shape = [int(np.prod(shape))]
    return shape + [1] * (4 - len(shape))


class DspBackend(Backend):
    name = "dsp"
    hooks = frozenset(
        {
            "gemm_s8",
            "conv2d_s8",
            "conv2d_bwd_data_s8",
            "conv2d_bwd_weight_s8",
            *DILATED_HOOKS,  # base.py's patches (host) into gemm.c
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
        self.mode = transport or os.environ.get("DSPTRAIN_DSP", "auto")
        # HVX contexts each op's work is split across (the device profile's dsp.hvx_threads):
        # the DSP server runs share t on its worker thread t, which counts its own packets
        self.hvx_threads = hvx_threads
        self.timeout = timeout or float(os.environ.get("DSPTRAIN_DSP_TIMEOUT", _TIMEOUT))
        self.reuse = reuse
        self.arena_bytes = (arena_mb or int(os.environ.get("DSPTRAIN_DSP_ARENA_MB", _ARENA_MB))) << 20
        self._transport = None
        self._templates: dict = {}
        self.last_costs: list[tuple[str, int, int, int]] = []  # (op, packets, insns, hvx)
        self.cost_log: list[tuple[str, int, int, int]] = []  # (op, packets, critical, bytes) per op run
        self.calls = 0  # transport calls (FastRPC round trips)
        self.total_costs = [0, 0, 0]  # packets, insns, hvx since creation
        self.last_thread_packets: list[tuple[int, ...]] = []  # per op of the last batch: packets of each HVX thread
        self.last_paths: list[tuple[str, str]] = []  # per conv product of the last batch: (op, path)
        self.total_thread_packets = [0] * abi.MAX_THREADS  # the same, summed since creation
        self.bytes_in = 0  # host -> arena copies
        self._into = None  # accumulate(): the buffer a product adds into

    # ------------------------------------------------------------ discovery
    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            name, why = _pick_mode(os.environ.get("DSPTRAIN_DSP", "auto"))
        except ValueError as exc:
            return False, str(exc)
        return name is not None, why

    @classmethod
    def chosen_by_auto(cls) -> tuple[bool, str]:
        """auto takes a real DSP only: the emulator checks correctness, at a fraction of the CPU's speed."""
        name, why = _pick_mode(os.environ.get("DSPTRAIN_DSP", "auto"))
        if name == "emulated":
            return False, f"{why}; the emulated DSP runs only when asked for (--backend dsp)"
        return name is not None, why

    @property
    def transport(self):
        if self._transport is None:
            name, why = _pick_mode(self.mode)
            if name is None:
                raise BackendError("dsp", f"no DSP transport: {why}")
            self._transport = _transport_class(name)(self.arena_bytes, self.timeout)
        return self._transport

    def supports(self, op) -> tuple[bool, str]:
        ok, why = super().supports(op)
        if not ok or self._transport is None or not self._transport.op_mask:
            return ok, why
        table = self._transport.op_mask
        missing = [h for h in op.hooks if any(not table >> c & 1 for c in self._HOOK_OPS.get(h, ()))]
        if missing:
            return False, f"the DSP server's op table lacks {', '.join(missing)}"
        return True, why

    def take_cost_log(self) -> tuple[list, int]:
        """(per-op cost records, transport calls) since the last take; the log restarts.
        Records are (op, packets, critical packets, bytes): cost.dsp_model_time's input."""
        log, calls = self.cost_log, self.calls
        self.cost_log, self.calls = [], 0
        return log, calls

    def prepare(self, graph, ops) -> None:
        """A new plan: forget prepared descriptors and start the DSP now, not mid-step."""
        self._templates.clear()
        self.transport.start()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # ------------------------------------------------------------ arena traffic
    def _put(self, array: np.ndarray, dtype, temps: list) -> int:
        """Arena offset holding `array` as `dtype`: in place when it already lives there."""
        arena = self.transport.arena
        array = np.asarray(array)
        if array.dtype != dtype:
            array = array.astype(dtype)
        if self.reuse:
            off = arena.find(array)
            if off is not None:
                return off
        off = arena.alloc(array.nbytes)
        temps.append(off)
        arena.view(off, array.shape, array.dtype)[...] = array
        self.bytes_in += array.nbytes
        return off

    def _new(self, shape, dtype, temps: list) -> int:
        off = self.transport.arena.alloc(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        temps.append(off)
        return off

    def _get(self, off: int, shape, dtype, temps: list) -> np.ndarray:
        """The result at `off` handed to the caller (a view that owns it, or a copy)."""
        arena = self.transport.arena
        if self.reuse:
            temps.remove(off)
            return arena.export(off, shape, dtype)
        return arena.view(off, shape, dtype).copy()

    # ------------------------------------------------------------ descriptors
    def _desc(self, op, dtype, ins=(), outs=(), a=(1,), b=(1,), out=(1,), **fields) -> abi.OpDesc:
        d = abi.OpDesc()
        d.op, d.dtype = op, dtype
        for i, off in enumerate(ins):
            d.in_[i] = off
        for i, off in enumerate(outs):
            d.out[i] = off
        d.shape_a[:], d.shape_b[:], d.shape_out[:] = _shape4(a), _shape4(b), _shape4(out)
        for key, value in fields.items():
            setattr(d, key, value)
        return d

    def _prepared(self, key, build) -> list[abi.OpDesc]:
        """Descriptors for `key` (hook, shapes, static parameters): built once with reuse."""
        key = (getattr(self.current_op, "name", None),) + key
        if not self.reuse or key not in self._templates:
            self._templates[key] = [bytes(d) for d in build()]
        return [abi.OpDesc.from_buffer_copy(raw) for raw in self._templates[key]]

    def _run(self, descs: list[abi.OpDesc]) -> None:
        for d in descs:
            d.threads = self.hvx_threads
        self.calls += 1
        try:
            self.transport.run(descs)
        except BackendError:
            self.last_costs, self.last_thread_packets = [], []
            raise
        self.last_costs = [(abi.OP_NAMES.get(d.op, str(d.op)), d.cost.packets, d.cost.insns, d.cost.hvx) for d in descs]
        for _, packets, insns, hvx in self.last_costs:
            self.total_costs[0] += packets
            self.total_costs[1] += insns
            self.total_costs[2] += hvx
        self.last_thread_packets = [tuple(d.cost.thread_packets[: max(d.threads, 1)]) for d in descs]
        self.last_paths = [
            (abi.OP_NAMES[d.op], abi.PATH_NAMES.get(d.result_shift, str(d.result_shift)))
            for d in descs
            if d.op in abi.PATH_OPS
        ]
        for shares in self.last_thread_packets:
            for t, packets in enumerate(shares):
                self.total_thread_packets[t] += packets
        self.cost_log.extend(
            (abi.OP_NAMES.get(d.op, str(d.op)), d.cost.packets, d.cost.critical, abi.desc_bytes(d)) for d in descs
        )
        for d in descs:
            if d.status == abi.OK:
                continue
            what = f"{abi.OP_NAMES.get(d.op, d.op)} shapes {list(d.shape_a)} x {list(d.shape_b)} -> {list(d.shape_out)}"
            if getattr(self.current_op, "name", None):
                what = f"{self.current_op.name}: {what}"
            if d.status == abi.NO_SUPPORT:
                raise NoSupport("dsp", f"{what}: not supported by the DSP kernel")
            raise BackendError("dsp", f"{what}: {abi.STATUS_NAMES.get(d.status, d.status)}")

    def _call(self, build_and_run):
        """Run with temporaries freed whatever happens."""
        temps: list[int] = []
        try:
            return build_and_run(temps)
        finally:
            arena = self.transport.arena
            for off in temps:
                arena.free(off)

    @staticmethod
    def _rng(rng) -> abi.Rng:
        if rng is None:
            return abi.Rng()
        m = 0xFFFFFFFF
        return abi.Rng(rng.seed & m, rng.step & m, rng.tensor_id & m, rng.offset & m)

    @staticmethod
    def _check_s8(hook: str, *arrays) -> None:
        for a in arrays:
            if np.asarray(a).dtype != np.int8:
                raise NoSupport("dsp", f"{hook}: the DSP takes int8, got {np.asarray(a).dtype}")

    @staticmethod
    def _check_depth(hook: str, depth: int) -> None:
        if depth > _MAX_DEPTH or depth <= 0:
            raise NoSupport("dsp", f"{hook}: reduction depth {depth} needs int64 accumulators")

    def _acc_input(self, hook: str, acc) -> np.ndarray:
        acc = np.asarray(acc)
        if acc.dtype in (np.int8, np.int16, np.int32):
            return acc
        raise NoSupport("dsp", f"{hook}: the DSP epilogue takes int32 accumulators, got {acc.dtype}")

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

    def _product(self, hook, code, x, w, out_shape, epilogue=None, **fields):
        """One product op, optionally followed by REQUANT in the same batch."""
        into = self._into
        if into is not None:
            if epilogue is not None or into.shape != tuple(out_shape):
                raise NoSupport(
                    "dsp", f"{hook}: accumulates only an int32 product into {tuple(out_shape)}, got {into.shape}"
                )
            fields = dict(fields, flags=abi.F_ACCUMULATE)

        def go(temps):
            ox, ow_ = self._put(x, np.int8, temps), self._put(w, np.int8, temps)
            oacc = self._new(out_shape, np.int32, temps)
            if into is not None:
                self.transport.arena.view(oacc, out_shape, np.int32)[...] = into
            key = (hook, x.shape, w.shape, tuple(sorted(fields.items())), epilogue is not None)
            if epilogue is None:
                descs = self._prepared(
                    key, lambda: [self._desc(code, abi.I8, a=x.shape, b=w.shape, out=out_shape, **fields)]
                )
                descs[0].in_[:] = [ox, ow_]
                descs[0].out[0] = oacc
                self._run(descs)
                return self._get(oacc, out_shape, np.int32, temps)
            mode, rng, shift = epilogue
            o8 = self._new(out_shape, np.int8, temps)
            n = int(np.prod(out_shape))
            descs = self._prepared(
                key,
                lambda: [
                    self._desc(code, abi.I8, a=x.shape, b=w.shape, out=out_shape, **fields),
                    self._desc(abi.OP_REQUANT, abi.I32, a=(n,), out=(n,), bits=8),
                ],
            )
            descs[0].in_[:] = [ox, ow_]
            descs[0].out[0] = oacc
            descs[1].in_[0], descs[1].out[0] = oacc, o8
            descs[1].round_mode = abi.ROUND_MODES[mode]
            descs[1].shift = abi.SHIFT_ESTIMATE if shift is None else max(int(shift), 0)
            descs[1].flags = abi.F_SATURATE_CHECK  # base.requantize: a stale given shift gives way
            descs[1].rng = self._rng(rng)
            self._run(descs)
            return self._get(o8, out_shape, np.int8, temps), int(descs[1].result_shift)

        return self._call(go)

    def _gemm_args(self, a, b):
        a, b = np.asarray(a), np.asarray(b)
        self._check_s8("gemm_s8", a, b)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise NoSupport("dsp", f"gemm_s8 needs a[M,K], b[N,K]; got {a.shape} and {b.shape}")
        self._check_depth("gemm_s8", a.shape[1])
        return a, b, (a.shape[0], b.shape[0])

    def _conv_out(self, x, w, stride, pad):
        x, w = np.asarray(x), np.asarray(w)
        self._check_s8("conv2d_s8", x, w)
        n, h, wd, _ = x.shape
        o, kh, kw, c = w.shape
        self._check_depth("conv2d_s8", kh * kw * c)
        return x, w, (n, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1, o)

    def _bwd_data_out(self, err, w, in_hw):
        err, w = np.asarray(err), np.asarray(w)
        self._check_s8("conv2d_bwd_data_s8", err, w)
        o, kh, kw, c = w.shape
        self._check_depth("conv2d_bwd_data_s8", o * kh * kw)
        return err, w, (err.shape[0], in_hw[0], in_hw[1], c)

    def gemm_s8(self, a, b):
        a, b, shape = self._gemm_args(a, b)
        return self._product("gemm_s8", abi.OP_GEMM_S8, a, b, shape)

    def gemm_requant_s8(self, a, b, mode, rng, shift=None):
        a, b, shape = self._gemm_args(a, b)
        return self._product("gemm_requant_s8", abi.OP_GEMM_S8, a, b, shape, (mode, rng, shift))

    def conv2d_s8(self, x, w, stride, pad):
        x, w, shape = self._conv_out(x, w, stride, pad)
        return self._product(
            "conv2d_s8", abi.OP_CONV2D_S8, x, w, shape, stride=stride, pad=pad, kernel_h=w.shape[1], kernel_w=w.shape[2]
        )

    def conv2d_requant_s8(self, x, w, stride, pad, mode, rng, shift=None):
        x, w, shape = self._conv_out(x, w, stride, pad)
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
        err, w, shape = self._bwd_data_out(err, w, in_hw)
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
        err, w, shape = self._bwd_data_out(err, w, in_hw)
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
        self._check_s8("conv2d_bwd_weight_s8", err, x)
        o = err.shape[-1]
        self._check_depth("conv2d_bwd_weight_s8", err.size // max(o, 1))
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
    # writes the weight gradient so: the host transposes those C * KH * KW elements.
    def _dw_weights(self, hook, x, w):
        x, w = np.asarray(x), np.asarray(w)
        self._check_s8(hook, x, w)
        if x.ndim != 4 or w.ndim != 4 or w.shape[3] != 1 or w.shape[0] != x.shape[3]:
            raise NoSupport("dsp", f"{hook}: needs x[N,H,W,C] and w[C,KH,KW,1]; got {x.shape} and {w.shape}")
        self._check_depth(hook, w.shape[1] * w.shape[2])
        return x, np.ascontiguousarray(w[..., 0].transpose(1, 2, 0))

    def _dwconv(self, hook, x, w, stride, pad, epilogue=None):
        x, wt = self._dw_weights(hook, x, w)
        n, h, wd, c = x.shape
        kh, kw = wt.shape[:2]
        shape = (n, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1, c)
        return self._product(
            hook, abi.OP_DWCONV2D_S8, x, wt, shape, epilogue, stride=stride, pad=pad, kernel_h=kh, kernel_w=kw
        )

    def _dwconv_bwd_data(self, hook, err, w, stride, pad, in_hw, epilogue=None):
        err, wt = self._dw_weights(hook, err, w)
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
        self._check_s8("dwconv2d_bwd_weight_s8", err, x)
        if err.ndim != 4 or x.ndim != 4 or err.shape[3] != x.shape[3] or err.shape[0] != x.shape[0]:
            raise NoSupport("dsp", f"dwconv2d_bwd_weight_s8: err {err.shape} and x {x.shape} do not pair")
        self._check_depth("dwconv2d_bwd_weight_s8", err.size // max(err.shape[3], 1))
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
    def _requant(self, hook, acc, mode, rng, shift, bits=8, check=True):
        acc = self._acc_input(hook, acc)
        if acc.size == 0:
            return np.zeros(acc.shape, np.int8), 0 if shift is None else max(int(shift), 0)

        def go(temps):
            oacc = self._put(acc, np.int32, temps)
            o8 = self._new(acc.shape, np.int8, temps)
            d = self._desc(
                abi.OP_REQUANT,
                abi.I32,
                (oacc,),
                (o8,),
                a=(acc.size,),
                out=(acc.size,),
                round_mode=abi.ROUND_MODES[mode],
                bits=bits,
                rng=self._rng(rng),
                shift=abi.SHIFT_ESTIMATE if shift is None else max(int(shift), 0),
                flags=abi.F_SATURATE_CHECK if check else 0,
            )
            self._run([d])
            return self._get(o8, acc.shape, np.int8, temps), int(d.result_shift)

        return self._call(go)

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
        acc = self._acc_input("absmax", acc)
        if acc.size == 0:
            return 0

        def go(temps):
            d = self._desc(abi.OP_ABSMAX, abi.I32, (self._put(acc, np.int32, temps),), a=(acc.size,))
            self._run([d])
            return int(d.result_absmax)

        return self._call(go)

    # ------------------------------------------------------------ element-wise
    def _eltwise(self, hook, code, inputs, outputs, **fields):
        """inputs: arrays (int8 or uint8); outputs: (shape, dtype) pairs."""

        def go(temps):
            ins = [self._put(a, a.dtype, temps) for a in inputs]
            outs = [self._new(shape, dtype, temps) for shape, dtype in outputs]
            key = (hook,) + tuple(a.shape for a in inputs) + tuple(sorted(fields.items()))
            descs = self._prepared(
                key,
                lambda: [self._desc(code, abi.I8, a=inputs[0].shape, b=inputs[-1].shape, out=outputs[0][0], **fields)],
            )
            descs[0].in_[: len(ins)] = ins
            descs[0].out[: len(outs)] = outs
            self._run(descs)
            got = [self._get(off, shape, dtype, temps) for off, (shape, dtype) in zip(outs, outputs)]
            return got[0] if len(got) == 1 else tuple(got)

        return self._call(go)

    def relu_s8(self, x):
        x = np.asarray(x)
        self._check_s8("relu_s8", x)
        return self._eltwise("relu_s8", abi.OP_RELU_S8, [x], [(x.shape, np.int8)])

    def relu_bwd_s8(self, err, y):
        err, y = np.asarray(err), np.asarray(y)
        self._check_s8("relu_bwd_s8", err, y)
        return self._eltwise("relu_bwd_s8", abi.OP_RELU_BWD_S8, [err, y], [(err.shape, np.int8)])

    def maxpool_s8(self, x, kernel, stride):
        x = np.asarray(x)
        self._check_s8("maxpool_s8", x)
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
        self._check_s8("maxpool_bwd_s8", err)
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
        w, grad = np.asarray(w), self._acc_input("niti_update_s8", grad)
        self._check_s8("niti_update_s8", w)
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
