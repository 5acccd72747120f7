"""FP8 trains a depthwise model on its depthwise hooks: every depthwise op on the CPU's native
kernels (none left to ref), and ref and cpu end the steps with the same bits in every tensor."""

from __future__ import annotations

import dsptrain
import numpy as np
from dsptrain.data import synthetic

from tests.interchange.helpers import write_run

STEPS, BATCH = 5, 16
BODY = """model:
  name: dwnet
  input_shape: [12, 12, 1]
  layers:
    - {kind: conv, out: 8, kernel: 3, padding: 1}
    - relu
    - {kind: conv, out: 8, kernel: 3, padding: 1, groups: 8}
    - relu
    - {kind: conv, out: 12, kernel: 3, stride: 2, padding: 1}
    - relu
    - {kind: conv, out: 12, kernel: 3, stride: 2, groups: 12}
    - flatten
    - {kind: linear, out: 10}
train: {epochs: 1, batch_size: 16}
"""
FP8_DW_HOOKS = {"dwconv2d_fp16_chunked", "dwconv2d_bwd_data_fp16", "dwconv2d_bwd_weight_fp16_chunked"}


def _train(tmp_path, backend):
    run = dsptrain.load_run(write_run(tmp_path, "fp8", BODY, name="dwnet"))
    trainer = dsptrain.Trainer(run, backend=backend, progress=False, out_dir=tmp_path / backend)
    data = synthetic("train", (12, 12, 1), count=STEPS * BATCH)
    try:
        losses = [
            float(trainer.step(data.images[i : i + BATCH], data.labels[i : i + BATCH]).loss)
            for i in range(0, STEPS * BATCH, BATCH)
        ]
        plan = trainer.plans.get(BATCH, True)
        placed = {op.name: plan.backend_of(op) for op in plan.graph.ops if FP8_DW_HOOKS & set(op.hooks)}
        return losses, {k: np.asarray(v) for k, v in trainer.state.items()}, placed
    finally:
        trainer.close()


def test_fp8_depthwise_trains_to_the_same_bits_on_ref_and_cpu(tmp_path):
    losses, state, placed = _train(tmp_path, "cpu")
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert len(placed) == 6 and set(placed.values()) == {"cpu"}, placed  # two layers, three passes each
    ref_losses, ref_state, ref_placed = _train(tmp_path, "ref")
    assert set(ref_placed.values()) == {"ref"}
    assert ref_losses == losses
    for name, value in state.items():
        np.testing.assert_array_equal(ref_state[name], value, err_msg=name)
