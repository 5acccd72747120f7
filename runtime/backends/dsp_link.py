"""The host's end of the DSP: a transport, the arena traffic, op descriptors, batches.

`DspLink` is what DspBackend (ops_dsp.py) stands on: its hooks check shapes
(dsp_shapes), then hand arrays and an op code to `_product`, `_eltwise` or `_requant`,
which place the arrays in the shared arena, build (or reuse) the op descriptors of
dsp_abi, run them as one batch on the transport and hand back the results. Each batch's
costs (packets, HVX threads, conv paths, bytes) are counted here, read by bench/,
profile/ and cost.dsp_model_time. A status other than OK raises NoSupport or
BackendError naming the op and its shapes.
"""

from __future__ import annotations

import numpy as np

from ..errors import BackendError, NoSupport
from . import dsp_abi as abi
from . import dsp_shapes as shapes


def transport_class(mode: str):
    if mode == "emulated":
        from .dsp_emulated import EmulatedTransport

        return EmulatedTransport
    if mode == "fastrpc":
        from .dsp_fastrpc import FastRpcTransport

        return FastRpcTransport
    raise ValueError(f"DSPTRAIN_DSP={mode!r}: choose emulated, fastrpc or auto")


def pick_mode(mode: str) -> tuple[str | None, str]:
    """(transport name or None, reason); auto prefers a device over the emulator."""
    if mode != "auto":
        ok, why = transport_class(mode).available()
        return (mode if ok else None), why
    reasons = []
    for name in ("fastrpc", "emulated"):
        ok, why = transport_class(name).available()
        if ok:
            return name, why
        reasons.append(why)
    return None, "; ".join(reasons)


def _shape4(shape) -> list[int]:
    """A descriptor's shape: 4 dimensions, a longer one flattened, a shorter one padded with 1s."""
    shape = list(shape)
    if len(shape) > 4:
        shape = [int(np.prod(shape))]
    return shape + [1] * (4 - len(shape))


class DspLink:
    """Transport, arena and descriptor state of one DSP backend, and the batch runners its
    hooks call. A base of DspBackend, never used alone."""

    current_op = None  # the Op being run (set by the executor, as on every Backend): keys descriptors

    def __init__(self, mode: str, timeout: float, reuse: bool, arena_bytes: int, hvx_threads: int):
        self.mode = mode
        # HVX contexts each op's work is split across (the device profile's dsp.hvx_threads):
        # the DSP server runs share t on its worker thread t, which counts its own packets
        self.hvx_threads = hvx_threads
        self.timeout = timeout
        self.reuse = reuse
        self.arena_bytes = arena_bytes
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

    @property
    def transport(self):
        if self._transport is None:
            name, why = pick_mode(self.mode)
            if name is None:
                raise BackendError("dsp", f"no DSP transport: {why}")
            self._transport = transport_class(name)(self.arena_bytes, self.timeout)
        return self._transport

    def take_cost_log(self) -> tuple[list, int]:
        """(per-op cost records, transport calls) since the last take; the log restarts.
        Records are (op, packets, critical packets, bytes): cost.dsp_model_time's input."""
        log, calls = self.cost_log, self.calls
        self.cost_log, self.calls = [], 0
        return log, calls

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

    # ------------------------------------------------------------ the batches hooks run
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
            # out_shape too: backward data's dx size is not fixed by err's (in_hw, e.g. 10 and 9 at stride 2)
            key = (hook, x.shape, w.shape, tuple(out_shape), tuple(sorted(fields.items())), epilogue is not None)
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

    def _requant(self, hook, acc, mode, rng, shift, bits=8, check=True):
        """REQUANT alone: int8 of `acc` and the shift it used."""
        acc = shapes.acc_input(hook, acc)
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
