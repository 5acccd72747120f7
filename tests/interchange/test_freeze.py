"""train.freeze: frozen layers get no weight gradient and no update (weights unchanged bit
for bit), no error flows into a frozen stem, and the memory plan shows the saving."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain.data import synthetic
from dsptrain.numerics import QTensor

from .helpers import write_run

FROZEN = ["conv*", "fc1"]  # a glob and a name: conv1, conv2, fc1 of the zoo's LeNet-5


def _trainer(tmp_path, recipe, freeze):
    body = f"model: {{name: lenet5}}\ntrain: {{epochs: 1, batch_size: 16, freeze: {freeze}}}\n"
    run = dsptrain.load_run(write_run(tmp_path, recipe, body, name=f"freeze-{recipe}-{len(freeze)}"))
    return dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "out")


def _raw(value):
    return value.q.copy() if isinstance(value, QTensor) else np.array(value)


@pytest.mark.parametrize("recipe", ["niti", "fp32"])
def test_frozen_weights_unchanged_bit_for_bit(recipe, tmp_path):
    trainer = _trainer(tmp_path, recipe, FROZEN)
    data = synthetic("train", (28, 28, 1), count=48)
    before = {k: _raw(v) for k, v in trainer.state.items()}
    try:
        for i in range(0, 48, 16):
            trainer.step(data.images[i : i + 16], data.labels[i : i + 16])
    finally:
        trainer.close()
    for name in ("conv1.w", "conv2.w", "fc1.w"):
        assert np.array_equal(before[name], _raw(trainer.state[name])), name
        assert before[name].dtype == _raw(trainer.state[name]).dtype
    for name in ("fc2.w", "fc3.w"):
        assert not np.array_equal(before[name], _raw(trainer.state[name])), name


def test_graph_has_no_work_for_frozen_layers(tmp_path):
    trainer = _trainer(tmp_path, "niti", FROZEN)
    graph = trainer.plans.get(16, True).graph
    trainer.close()
    backward_layers = {op.layer for op in graph.ops if op.phase in ("backward", "update")}
    # no error flows below fc2: nothing of the frozen stem runs backward
    assert backward_layers == {"fc2", "relu4", "fc3"}
    assert "fc2.bwd_data" not in {op.name for op in graph.ops}  # fc2's input error has no consumer
    assert not any(
        t.startswith(("conv1.", "conv2.", "fc1.")) and spec.role == "grad" for t, spec in graph.tensors.items()
    )


def test_memory_plan_shows_the_saving(tmp_path):
    peaks = {}
    for freeze in ([], FROZEN):
        trainer = _trainer(tmp_path, "niti", freeze)
        plan = trainer.plans.get(64, True)
        peaks[len(freeze)] = plan.fitter(None, "none").choose(None).peak
        trainer.close()
    assert peaks[len(FROZEN)] < 0.8 * peaks[0], peaks


def test_pattern_matching_nothing_is_a_config_error(tmp_path):
    path = write_run(tmp_path, "niti", "train: {freeze: [features.*]}\n", name="nomatch")
    with pytest.raises(
        dsptrain.ConfigError,
        match=r"train.freeze\[0\]: 'features.\*' matches no layer of lenet5 "
        r"\(layers: conv1, relu1",
    ):
        dsptrain.load_run(path)
