"""The cost model sees what a composed conv runs on: a dilated conv's passes at the GEMM's measured
rate (its patches gathered, cpu_ops/dilated_gather.cpp, then gemm_s8), a grouped conv's at the conv
kernels' (per group) or the depthwise kernels' (groups == channels, dilated too), the bytes of
their gathered copies beside their tensors, and how many kernel calls each makes on each backend
(the DSP's per group, the CPU's one native call a grouped pass)."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain.backends.grouped_hooks import GroupedHooks
from dsptrain.backends.ops_ref import RefBackend
from dsptrain.cost import speeds
from dsptrain.graph import lower
from dsptrain.nn import Conv2d, Flatten, Linear, Model
from dsptrain.plan import rates
from dsptrain.plan.rates import gather_bytes, kernel_calls, op_bytes, op_time, rate_key


def _graph():
    model = Model(
        "composed",
        (12, 12, 8),
        10,
        (
            Conv2d("dense", 8, 8, 3, padding=1),
            Conv2d("dilated", 8, 8, 3, padding=2, dilation=2),
            Conv2d("grouped", 8, 8, 3, padding=1, groups=2),
            Conv2d("dw_dilated", 8, 8, 3, padding=2, dilation=2, groups=8),
            Flatten("flatten"),
            Linear("fc", 12 * 12 * 8, 10),
        ),
    )
    return lower(model, dsptrain.load_recipe("niti"), batch=4)


def test_composed_products_take_the_rate_of_the_kernel_they_run_on():
    graph = _graph()
    keys = {op.name: rate_key(graph, op) for op in graph.ops if op.layer != "fc" and op.macs}
    assert keys == {
        "dense.fwd": "conv2d_s8",
        "dense.bwd_weight": "conv2d_bwd_weight_s8",
        "dilated.fwd": "gemm_s8",
        "dilated.bwd_data": "gemm_s8",
        "dilated.bwd_weight": "gemm_s8",
        "grouped.fwd": "conv2d_s8",
        "grouped.bwd_data": "conv2d_bwd_data_s8",
        "grouped.bwd_weight": "conv2d_bwd_weight_s8",
        "dw_dilated.fwd": "dwconv2d_s8",
        "dw_dilated.bwd_data": "dwconv2d_bwd_data_s8",
        "dw_dilated.bwd_weight": "dwconv2d_bwd_weight_s8",
    }


def test_gathered_copies_count_in_the_bytes_moved():
    graph = _graph()
    for op in graph.ops:
        tensors = sum(graph.tensors[t].nbytes for t in (*op.inputs, *op.outputs) if t in graph.tensors)
        per_row, whole = gather_bytes(op)
        if op.layer in ("dilated", "grouped", "dw_dilated") and op.macs:
            assert per_row > 0, op.name  # the patches or slices, written and read back
            per_row_ws, whole_ws = op.attrs["workspace"]
            assert (per_row, whole) == (2 * per_row_ws, 2 * whole_ws)
        elif op.layer == "dense":
            assert (per_row, whole) == (0, 0), op.name
        assert op_bytes(graph, op) == tensors + per_row * graph.batch + whole


_PRODUCTS = (
    "conv2d_s8",
    "conv2d_bwd_data_s8",
    "conv2d_bwd_weight_s8",
    "conv2d_dilated_s8",
    "conv2d_dilated_bwd_data_s8",
    "conv2d_dilated_bwd_weight_s8",
    "dwconv2d_s8",
    "dwconv2d_bwd_data_s8",
    "dwconv2d_bwd_weight_s8",
)


class _CountingBackend(RefBackend):
    """ops_ref's products, but the grouped hooks composed as every other backend composes them
    (grouped_hooks.py), each product call counted."""

    conv2d_grouped_s8 = GroupedHooks.conv2d_grouped_s8
    conv2d_grouped_bwd_data_s8 = GroupedHooks.conv2d_grouped_bwd_data_s8
    conv2d_grouped_bwd_weight_s8 = GroupedHooks.conv2d_grouped_bwd_weight_s8

    def __init__(self):
        super().__init__()
        self.calls, self._inside = 0, False
        for name in _PRODUCTS:
            setattr(self, name, self._counted(getattr(self, name)))

    def _counted(self, fn):
        def call(*args):  # a product ops_ref builds from another counts once
            if self._inside:
                return fn(*args)
            self.calls, self._inside = self.calls + 1, True
            try:
                return fn(*args)
            finally:
                self._inside = False

        return call


def _run(backend, graph, op, rng):
    """Runs `op`'s grouped hook on random int8 operands of the graph's shapes."""
    a = op.attrs
    data = [rng.integers(-128, 128, graph.tensors[t].shape, dtype=np.int8) for t in op.inputs]
    common = (a["stride"], a["pad"], a["dilation"], a["groups"])
    if op.name.endswith(".fwd"):
        return backend.conv2d_grouped_s8(*data, *common)
    if op.name.endswith(".bwd_data"):
        return backend.conv2d_grouped_bwd_data_s8(*data, *common, a["in_hw"])
    return backend.conv2d_grouped_bwd_weight_s8(*data, *common, a["kernel"])


def _calls_graph():
    model = Model(
        "calls",
        (13, 13, 12),
        10,
        (
            Conv2d("grouped4", 12, 12, 3, padding=1, groups=4),
            Conv2d("grouped3", 12, 12, 1, groups=3),
            Conv2d("dw_d2", 12, 12, 3, padding=2, dilation=2, groups=12),
            Conv2d("dw_d2_s2", 12, 12, 3, stride=2, padding=2, dilation=2, groups=12),
            Conv2d("dw_d3_s2", 12, 12, 3, stride=2, padding=3, dilation=3, groups=12),
            Conv2d("dw", 12, 12, 3, padding=1, groups=12),
            Flatten("flatten"),
            Linear("fc", 4 * 4 * 12, 10),
        ),
    )
    return lower(model, dsptrain.load_recipe("niti"), batch=2)


def _calls_checked(graph, backend, counter, device: str, rng) -> dict:
    """Each grouped op of `graph` run on `backend`: the product calls `counter` saw, checked
    against rates.kernel_calls for `device`; op name -> calls."""
    seen = {}
    for op in graph.ops:
        if op.attrs.get("groups", 1) == 1 or not op.macs:
            continue
        counter.calls = 0
        _run(backend, graph, op, rng)
        assert kernel_calls(graph, op, device) == counter.calls, op.name
        seen[op.name] = counter.calls
    return seen


def test_the_cost_model_counts_each_kernel_call_a_composed_conv_makes():
    """rates.kernel_calls on the DSP (a call's fixed cost each: a FastRPC round trip) is the number
    of product calls grouped_hooks.py makes: per group, per dilation residue class met."""
    graph = _calls_graph()
    backend = _CountingBackend()
    seen = _calls_checked(graph, backend, backend, "dsp", np.random.default_rng(0))
    assert seen["grouped4.fwd"] == 4 and seen["grouped3.bwd_data"] == 3
    assert seen["dw_d2.bwd_data"] == 4 and seen["dw_d3_s2.fwd"] == 9
    assert seen["dw_d2_s2.fwd"] == 1 and kernel_calls(graph, graph.op("dw.fwd"), "dsp") == 1  # dwconv2d_s8 itself


class _CountingNative:
    """The native module with its product entry points counted (every other name passed through)."""

    def __init__(self, native):
        self._native, self.calls = native, 0

    def __getattr__(self, name):
        fn = getattr(self._native, name)
        if not name.startswith(("conv2d_", "dwconv2d_", "gemm_")):
            return fn

        def call(*args):
            self.calls += 1
            return fn(*args)

        return call


def test_the_cpu_runs_a_grouped_pass_in_one_native_call(monkeypatch):
    """On the CPU rates.kernel_calls is the number of native product calls the CpuBackend makes:
    one a pass for a grouped conv (cpu_ops/conv_grouped.cpp), the depthwise compositions' as on
    the DSP."""
    native = pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    from dsptrain.backends import ops_cpu

    graph = _calls_graph()
    counting = _CountingNative(native)
    monkeypatch.setattr(ops_cpu, "_native", counting)
    backend = ops_cpu.CpuBackend()
    seen = _calls_checked(graph, backend, counting, "cpu", np.random.default_rng(1))
    assert seen["grouped4.fwd"] == seen["grouped3.bwd_data"] == seen["grouped3.bwd_weight"] == 1
    assert seen["dw_d3_s2.fwd"] == 9


def test_each_kernel_call_adds_the_call_cost(monkeypatch):
    graph = _graph()
    device = dsptrain.config.load_device("v66")
    op = graph.op("grouped.fwd")  # two groups: two calls on the DSP, one on the CPU
    grouped = op_time(device, graph, op, "dsp").seconds
    on_cpu = op_time(device, graph, op, "cpu").seconds
    monkeypatch.setattr(rates, "kernel_calls", lambda graph, op, backend: 1)
    assert grouped - op_time(device, graph, op, "dsp").seconds == pytest.approx(speeds(device, "dsp").call_s)
    assert on_cpu == op_time(device, graph, op, "cpu").seconds
