"""Octo's max-pool backward folded into its compensation backward (pool_compensation_bwd,
cpu_ops/pool.cpp; the rewrite in algorithms/_fusions.py): dz bit for bit the two ops on
ops_ref, and dz with both channel sums bit for bit the two ops on the same backend, plain
and with the ReLU's gate, on LeNet-5's shape, ragged and odd sizes (cells no window
covers), wider windows and strides past the kernel; and in LeNet-5 under Octo, the ops it
replaces gone and the error between them with them.
"""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain.graph import lower
from dsptrain.models import build_model

from .conftest import float_pool_input


def operands(ref, shape, kernel, stride, seed):
    """(err, gate, argmax, z, scale) for a pool of `shape` (its input): the pooled error
    with signed zeros, the pooled y of the ReLU then pool (some windows <= 0), argmax."""
    rng = np.random.default_rng(seed)
    x = float_pool_input(rng, shape)
    y, argmax = ref.relu_maxpool_f32(x, kernel, stride)
    err = rng.standard_normal(y.shape).astype(np.float32)
    err.reshape(-1)[::5] = -0.0
    z = rng.standard_normal(shape).astype(np.float32)
    scale = (rng.standard_normal(shape[-1]) * 0.1).astype(np.float32)
    scale[0] = -1.5  # 1 + scale < 0: the zeros' signs in dz
    return err, y, argmax, z, scale


def two_ops(be, err, gate, argmax, kernel, stride, z, scale):
    in_hw = z.shape[1:3]
    dx = (
        be.maxpool_bwd_f32(err, argmax, kernel, stride, in_hw)
        if gate is None
        else be.relu_maxpool_bwd_f32(err, gate, argmax, kernel, stride, in_hw)
    )
    return be.compensation_bwd(dx, z, scale)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize(
    "shape,kernel,stride",
    [
        ((64, 28, 28, 6), 2, 2),
        ((3, 7, 9, 5), 2, 2),
        ((2, 10, 10, 16), 2, 2),
        ((2, 9, 11, 3), 3, 3),
        ((2, 8, 9, 7), 2, 3),
        ((1, 2, 2, 1), 2, 2),
        ((5, 6, 6, 33), 1, 2),
        ((40, 13, 11, 3), 2, 3),
        ((30, 15, 9, 6), 2, 2),
    ],
)
def test_pool_compensation_bwd_is_the_two_ops(host_be, ref, shape, kernel, stride, gated):
    err, y, argmax, z, scale = operands(ref, shape, kernel, stride, sum(shape) * 10 + kernel + stride)
    gate = y if gated else None
    dz, d_scale, d_shift = host_be.pool_compensation_bwd(err, gate, argmax, kernel, stride, z, scale)
    want_dz, want_scale, want_shift = two_ops(ref, err, gate, argmax, kernel, stride, z, scale)
    np.testing.assert_array_equal(dz.view(np.uint32), want_dz.view(np.uint32))
    np.testing.assert_allclose(d_scale, want_scale, rtol=1e-12, atol=1e-30)
    np.testing.assert_allclose(d_shift, want_shift, rtol=1e-12, atol=1e-30)
    for mine, apart in zip((dz, d_scale, d_shift), two_ops(host_be, err, gate, argmax, kernel, stride, z, scale)):
        np.testing.assert_array_equal(mine.view(np.uint32), apart.view(np.uint32))


def test_pool_compensation_bwd_names_bad_operands(host_be, ref):
    err, y, argmax, z, scale = operands(ref, (2, 8, 8, 4), 2, 2, 1)
    with pytest.raises(ValueError, match="pool_compensation_bwd: windows overlap \\(kernel 3, stride 2\\)"):
        host_be.pool_compensation_bwd(err[:, :3, :3], None, argmax[:, :3, :3], 3, 2, z, scale)
    with pytest.raises(ValueError, match="pool_compensation_bwd: err \\(2, 3, 4, 4\\) is not the pooled shape"):
        host_be.pool_compensation_bwd(err[:, 1:], None, argmax[:, 1:], 2, 2, z, scale)
    with pytest.raises(ValueError, match="pool_compensation_bwd: scale \\(3,\\) must have z's 4 channels"):
        host_be.pool_compensation_bwd(err, y, argmax, 2, 2, z, scale[:3])


def test_octo_lenet_pool_backwards_go_into_the_compensation():
    """conv1's and conv2's compensation backward take their pool's backward (with its ReLU)
    in: one op each, the full-size error between them gone; fc1's keeps its ReLU gate."""
    graph = lower(build_model("lenet5"), dsptrain.load_recipe("octo"), 8)
    ops = {op.name: op for op in graph.ops}
    for layer, pool, relu in (("conv1", "pool1", "relu1"), ("conv2", "pool2", "relu2")):
        op = ops[f"{layer}.comp_bwd"]
        assert op.kind == "octo.pool_comp_bwd" and op.hooks == ("pool_compensation_bwd",)
        assert op.inputs[1:] == (f"{pool}.argmax", f"{layer}.out", f"{layer}.comp_scale", f"{pool}.out")
        assert (op.attrs["kernel"], op.attrs["stride"]) == (2, 2)
        assert f"{pool}.bwd" not in ops and f"err.{relu}" not in graph.tensors
    assert ops["fc1.comp_bwd"].kind == "octo.comp_bwd"
    ids = [op.id for op in graph.ops]
    assert len(set(ids)) == len(ids)
