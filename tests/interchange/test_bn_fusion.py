"""NITI's batch norm chains fused in the lowering (algorithms/int_fused.py): MobileNetV2's
and ResNet-18's graphs take niti.bn_act_fwd / niti.bn_act_bwd where a batch norm (with its
ReLU6 or ReLU) sits between int8 tensors, keep the float ops where its output meets a
residual add, and their training steps equal the unfused ones bit for bit: every weight,
gamma, beta, velocity and running statistic after three steps. FP32's lowering is untouched."""

from __future__ import annotations

import warnings

import dsptrain
import numpy as np
import pytest
from dsptrain.data import synthetic
from dsptrain.numerics import QTensor

from .helpers import need_torch, write_run

FUSED = ("niti.bn_act_fwd", "niti.bn_act_bwd")


def _model(name):
    torch = need_torch()
    from tests.zoo_torch import build

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notes about kept biases
        return dsptrain.from_torch(build(name), torch.zeros(2, 3, 32, 32))


def _graph(model, recipe, tmp_path):
    from dsptrain.train.assembly import assemble

    run = dsptrain.load_run(write_run(tmp_path, recipe, "train: {epochs: 1, batch_size: 8}\n"))
    return assemble(run, model=model, progress=False, notes=False).graph


def _unfused(monkeypatch):
    import dsptrain.algorithms.int_fused as int_fused

    monkeypatch.setattr(int_fused, "fuse_bn_casts", lambda ops, eval_ops, tensors: (ops, eval_ops))


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_the_lowering_fuses_chains_between_int8_tensors(name, tmp_path):
    model = _model(name)
    graph = _graph(model, "niti", tmp_path)
    kinds = [op.kind for op in graph.ops]
    fused = [op for op in graph.ops if op.kind == FUSED[0]]
    assert fused and kinds.count(FUSED[1]) == len(fused)
    for op in fused:  # int8 in, int8 out; the float tensors between are gone
        assert graph.tensors[op.inputs[0]].dtype == "int8" and graph.tensors[op.outputs[0]].dtype == "int8"
        assert f"{op.layer}.xhat" not in graph.tensors and graph.tensors[f"{op.layer}.stats"].dtype == "float64"
    acts = {op.attrs["act"][0] for op in fused}
    assert acts == ({"clip", "none"} if name == "mobilenet_v2" else {"relu"})
    # a batch norm whose output a residual add reads keeps FP32's ops
    assert "fp32.bn_fwd" in kinds and "fp32.add" in kinds
    fp32 = [op.kind for op in _graph(model, "fp32", tmp_path).ops]
    assert not any(kind.startswith("niti.") for kind in fp32)


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18"])
def test_fused_steps_equal_unfused_steps(name, tmp_path, monkeypatch):
    model = _model(name)
    data = synthetic("train", (32, 32, 3), count=8, classes=10)

    def three_steps(tag):
        run = dsptrain.load_run(write_run(tmp_path, "niti", "train: {epochs: 1, batch_size: 8}\n", name=tag))
        trainer = dsptrain.Trainer(run, model=model, backend="cpu", progress=False, out_dir=tmp_path / tag)
        try:
            kinds = {op.kind for op in trainer.steps.plans.get(8, True).graph.ops}
            losses = [trainer.step(data.images, data.labels).loss for _ in range(3)]
            return kinds, losses, dict(trainer.state)
        finally:
            trainer.close()

    kinds, losses, state = three_steps("fused")
    _unfused(monkeypatch)
    plain_kinds, plain_losses, plain = three_steps("plain")
    assert set(FUSED) <= kinds and not set(FUSED) & plain_kinds
    assert losses == plain_losses
    assert state.keys() == plain.keys()
    for key, value in state.items():
        other = plain[key]
        if isinstance(value, QTensor):
            assert value.e == other.e and np.array_equal(value.q, other.q), key
        else:
            assert np.asarray(value).dtype == np.asarray(other).dtype and np.array_equal(value, other), key
