"""The memory-budget layer on a residual graph (the integer-only ResNet-18, `resnet18_nobn`).
A small ResNet of BasicBlocks -- an identity block and a strided block with a 1x1 conv
shortcut, few channels, 8x8 inputs -- trains under micro-batching and recomputation with
weights bit-identical to the plain step: the residual adds, the error joins where the
branches meet and the global average pool take one shift over all slices and re-runs."""

import dataclasses

import dsptrain
import numpy as np
import pytest
from dsptrain import models
from dsptrain.backends.ops_cpu import CpuBackend
from dsptrain.config import MemoryConfig
from dsptrain.data import synthetic
from dsptrain.nn import Add, Conv2d, GlobalAvgPool, Linear, Model, ReLU

STEPS, BATCH = 3, 24


def small_resnet(num_classes: int = 10) -> Model:
    return Model(
        "small_resnet",
        (8, 8, 3),
        num_classes,
        (
            Conv2d("conv1", 3, 4, 3, 1, 1),
            ReLU("relu1"),
            Conv2d("b1.conv1", 4, 4, 3, 1, 1),
            ReLU("b1.relu1"),
            Conv2d("b1.conv2", 4, 4, 3, 1, 1),
            Add("b1.add", skip_from="relu1"),
            ReLU("b1.relu2"),
            Conv2d("b2.conv1", 4, 8, 3, 2, 1),
            ReLU("b2.relu1"),
            Conv2d("b2.conv2", 8, 8, 3, 1, 1),
            Conv2d("b2.short", 4, 8, 1, 2, 0, source="b1.relu2"),
            Add("b2.add", skip_from="b2.conv2"),
            ReLU("b2.relu2"),
            GlobalAvgPool("avgpool"),
            Linear("fc", 8, num_classes),
        ),
    )


@pytest.fixture(scope="module")
def run():
    patch = pytest.MonkeyPatch()
    patch.setitem(models.MODELS, "small_resnet", small_resnet)
    base = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-niti.yaml")
    yield dataclasses.replace(base, model=dataclasses.replace(base.model, name="small_resnet"))
    patch.undo()


def _train(run, memory, backend, out_dir):
    trainer = dsptrain.Trainer(
        dataclasses.replace(run, memory=memory), backend=backend, progress=False, out_dir=out_dir
    )
    data = synthetic("train", (8, 8, 3), count=BATCH * STEPS)
    stats = [
        trainer.step(data.images[i * BATCH : (i + 1) * BATCH], data.labels[i * BATCH : (i + 1) * BATCH])
        for i in range(STEPS)
    ]
    return stats, {k: (v.q.copy(), v.e) for k, v in trainer.state.items()}


@pytest.mark.parametrize(
    "backend",
    [
        "ref",
        pytest.param("cpu", marks=pytest.mark.skipif(not CpuBackend.available()[0], reason="cpu backend not built")),
    ],
)
@pytest.mark.parametrize("micro_batch, recompute", [(5, "none"), (BATCH, "sqrt"), (7, "all"), (3, "sqrt")])
def test_micro_batched_and_recomputed_resnet_steps_are_bit_identical(run, tmp_path, backend, micro_batch, recompute):
    _, plain = _train(run, MemoryConfig(), backend, tmp_path / "plain")
    stats, ours = _train(
        run, MemoryConfig(arena=True, micro_batch=micro_batch, recompute=recompute), backend, tmp_path / "ours"
    )
    assert plain.keys() == ours.keys()
    for name in plain:
        assert np.array_equal(plain[name][0], ours[name][0]) and plain[name][1] == ours[name][1], name
    assert all(s.spilled_bytes == 0 and s.arena_high_water_bytes == s.arena_bytes for s in stats)
    if recompute != "none":
        assert all(s.recomputed_ops > 0 for s in stats)
    if micro_batch < BATCH:
        assert sum(s.rerun_slices for s in stats) > 0


def test_the_graph_has_adds_joins_and_a_pool_that_are_sliced_and_recomputed(run, tmp_path):
    from dsptrain.memory.recompute import build_schedule

    trainer = dsptrain.Trainer(run, backend="ref", progress=False, out_dir=tmp_path)
    graph = trainer.plans.get(BATCH, True).graph
    ranged = [op for op in graph.ops if op.range_hook()]
    kinds = {op.kind for op in ranged}
    assert {"niti.add", "niti.join", "niti.avgpool_fwd"} <= kinds
    assert all(op.takes_range() and graph.row_local(op) for op in ranged)
    rebuilt = {step.op.kind for step in build_schedule(graph, set(), materialize=False) if step.recompute}
    assert "niti.add" in rebuilt
