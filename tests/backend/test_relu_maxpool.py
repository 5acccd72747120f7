"""The float recipes' ReLU then max-pool as one op each way (algorithms/_fusions.py;
cpu_ops/pool.cpp and pool_f32_pairs.cpp with the ReLU on each tap and the error gated by
the pooled value): bit for bit the two ops it replaces on ops_ref, on the AVX-512 pairs'
shapes (2x2, 1-16 channels, ragged widths) and the shapes pool.cpp's loops take (more
channels, odd sizes, overlapping and wider windows), with ties, signed zeros and windows
of no positive value; and in training, the same losses and weights as the two ops apart.
"""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain.graph import lower
from dsptrain.models import build_model

from .conftest import float_pool_input


def pool_input(rng, shape):
    """Halves (ties inside windows), signed zeros, and whole negative windows (a pooled 0)."""
    x = float_pool_input(rng, shape)
    x[:, :2, :2, :] = -np.abs(x[:, :2, :2, :]) - 0.5
    return x


def assert_bits(got, want):
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def check_against_two_ops(host_be, ref, x, kernel, stride):
    y, argmax = host_be.relu_maxpool_f32(x, kernel, stride)
    relu = ref.relu_f32(x)
    want_y, want_argmax = ref.maxpool_f32(relu, kernel, stride)
    assert_bits(y, want_y)
    np.testing.assert_array_equal(argmax, want_argmax)
    rng = np.random.default_rng(x.size)
    err = rng.standard_normal(y.shape).astype(np.float32)
    err[rng.random(y.shape) < 0.2] = -0.0
    hw = x.shape[1:3]
    dx = host_be.relu_maxpool_bwd_f32(err, y, argmax, kernel, stride, hw)
    # the two ops as the graph ran them: the pool's backward, then the ReLU's on relu(x)
    assert_bits(dx, ref.relu_bwd_f32(ref.maxpool_bwd_f32(err, want_argmax, kernel, stride, hw), relu))
    assert_bits(dx, ref.relu_maxpool_bwd_f32(err, want_y, want_argmax, kernel, stride, hw))


@pytest.mark.parametrize("channels", [1, 2, 3, 5, 6, 8, 11, 16, 17, 20])
@pytest.mark.parametrize("hw", [(2, 2), (4, 6), (28, 28), (10, 34), (3, 5), (7, 8)])
def test_relu_maxpool_two_by_two(host_be, ref, channels, hw):
    check_against_two_ops(
        host_be, ref, pool_input(np.random.default_rng(channels * 100 + hw[1]), (3, *hw, channels)), 2, 2
    )


@pytest.mark.parametrize("kernel,stride", [(3, 2), (2, 1), (3, 3), (3, 1)])
@pytest.mark.parametrize("channels", [1, 6, 40])
def test_relu_maxpool_other_windows(host_be, ref, kernel, stride, channels):
    """Overlapping windows (stride < kernel: a cell's error is a sum), wider and uncovered cells."""
    x = pool_input(np.random.default_rng(kernel * 10 + stride + channels), (2, 9, 11, channels))
    check_against_two_ops(host_be, ref, x, kernel, stride)


def test_relu_maxpool_checks_its_operands(host_be):
    x = np.zeros((1, 4, 4, 3), np.float32)
    y, argmax = host_be.relu_maxpool_f32(x, 2, 2)
    with pytest.raises(Exception, match="relu_maxpool_bwd_f32|shape"):
        host_be.relu_maxpool_bwd_f32(np.zeros((1, 2, 2, 3), np.float32), y[:, :1], argmax, 2, 2, (4, 4))


@pytest.mark.parametrize("recipe", ["octo", "fp32"])
def test_lenet_pools_take_their_relu(recipe):
    """LeNet-5's conv ReLUs feed only their pools: each pair is one op each way (forward; and
    backward under FP32), the ReLU's output and the error between the two backward ops are gone; the linear layers' ReLUs stay
    (FP32; Octo folds them into their layers, test_octo_hooks.py)."""
    graph = lower(build_model("lenet5"), dsptrain.load_recipe(recipe), 8)
    kinds = {op.name: op.kind for op in graph.ops}
    for pool, relu in (("pool1", "relu1"), ("pool2", "relu2")):
        assert kinds[f"{pool}.fwd"] == "fp32.relu_maxpool_fwd"
        assert f"{relu}.fwd" not in kinds and f"{relu}.bwd" not in kinds
        assert f"{relu}.out" not in graph.tensors and f"err.{pool}" not in graph.tensors
        if recipe == "fp32":  # (Octo's goes on into its conv's compensation backward: test_pool_compensation.py)
            assert kinds[f"{pool}.bwd"] == "fp32.relu_maxpool_bwd"
            assert graph.op(f"{pool}.bwd").outputs == (f"err.{relu}",)
    if recipe == "fp32":
        assert kinds["relu3.fwd"] == "fp32.relu_fwd" and kinds["relu3.bwd"] == "fp32.relu_bwd"
    assert [op.kind for op in graph.eval_ops].count("fp32.relu_maxpool_fwd") == 2
    ids = [op.id for op in graph.ops]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("recipe", ["octo", "fp32"])
def test_training_with_the_fused_pools_matches_the_two_ops(recipe, monkeypatch, tmp_path):
    """Three cpu steps: the same losses and every state array, bit for bit, as with the
    rewrites turned off (this one, Octo's ReLUs folded into their linear layers and its pool
    backwards into the compensation's)."""
    from dsptrain.algorithms import _fusions
    from dsptrain.data import synthetic

    pytest.importorskip("dsptrain._cpu_ops", reason="native extension not built")
    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / f"lenet-fmnist-{recipe}.yaml")
    data = synthetic("train", (28, 28, 1), count=96, seed=3)

    def train(out):
        trainer = dsptrain.Trainer(run, backend="cpu", progress=False, out_dir=tmp_path / out)
        losses = [trainer.step(data.images[i : i + 32], data.labels[i : i + 32]).loss for i in (0, 32, 64)]
        state = {k: np.array(v, copy=True) for k, v in trainer.state.items()}
        trainer.close()
        return losses, state, trainer

    fused_losses, fused_state, fused = train("fused")
    monkeypatch.setattr(_fusions, "fuse_relu_pool", lambda ops, eval_ops, tensors: (ops, eval_ops))
    monkeypatch.setattr(_fusions, "fuse_relu_into_compensation", lambda ops, eval_ops, tensors: (ops, eval_ops))
    monkeypatch.setattr(_fusions, "fuse_pool_into_compensation", lambda ops, eval_ops, tensors: (ops, eval_ops))
    losses, state, apart = train("apart")
    fused_kinds = [op.kind for op in fused.plans.get(32, True).graph.ops]
    apart_kinds = [op.kind for op in apart.plans.get(32, True).graph.ops]
    assert "fp32.relu_maxpool_fwd" in fused_kinds and "fp32.relu_maxpool_fwd" not in apart_kinds
    assert apart_kinds.count("fp32.relu_fwd") == 4 and fused_kinds.count("fp32.relu_fwd") == (
        0 if recipe == "octo" else 2
    )
    assert (
        fused_kinds.count("octo.pool_comp_bwd") == (2 if recipe == "octo" else 0)
        and "octo.pool_comp_bwd" not in apart_kinds
    )
    assert fused_losses == losses
    assert state.keys() == fused_state.keys()
    for name in state:
        np.testing.assert_array_equal(
            fused_state[name].reshape(-1).view(np.uint8), state[name].reshape(-1).view(np.uint8), err_msg=name
        )
