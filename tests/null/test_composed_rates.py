"""The cost model sees what a composed conv runs on: a dilated conv's passes at the GEMM's measured
rate (its patches gathered, cpu_ops/dilated_gather.cpp, then gemm_s8), a grouped conv's at the conv
kernels' (per group) or the depthwise kernels' (groups == channels, dilated too), and the bytes of
their gathered copies beside their tensors."""

from __future__ import annotations

import dsptrain
from dsptrain.graph import lower
from dsptrain.nn import Conv2d, Flatten, Linear, Model
from dsptrain.plan.rates import gather_bytes, op_bytes, rate_key


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
