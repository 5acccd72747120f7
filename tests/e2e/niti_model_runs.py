"""What the NITI end-to-end tests of one model (dilated, grouped) share: a few steps on a
backend with where each op of the kinds under test ran, the weights compared bit for bit, and
the three exports read back by ONNX Runtime."""

from __future__ import annotations

import dsptrain
import numpy as np
from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
from dsptrain.data import synthetic

from tests.interchange.helpers import write_run

STEPS, BATCH = 12, 16


def train_steps(tmp_path, backend, model_yaml, kinds, name, extra=""):
    """STEPS steps on `backend`; (the losses, the weights, where each op of `kinds` ran, the checkpoint)."""
    run = dsptrain.load_run(write_run(tmp_path, "niti", model_yaml + extra, name=name))
    trainer = dsptrain.Trainer(run, backend=backend, progress=False, out_dir=tmp_path / backend)
    data = synthetic("train", (28, 28, 1), count=STEPS * BATCH)
    try:
        losses = [
            float(trainer.step(data.images[i : i + BATCH], data.labels[i : i + BATCH]).loss)
            for i in range(0, STEPS * BATCH, BATCH)
        ]
        plan = trainer.plans.get(BATCH, True)
        placed = {op.name: plan.backend_of(op) for op in plan.graph.ops if op.kind in kinds}
        weights = {k: (np.array(v.q), v.e) for k, v in trainer.state.items() if hasattr(v, "q")}
        return losses, weights, placed, trainer.save()
    finally:
        trainer.close()


def assert_same_weights(expected, found):
    """Every int8 weight and its exponent equal, layer by layer."""
    assert found.keys() == expected.keys()
    for name, (q, e) in expected.items():
        np.testing.assert_array_equal(found[name][0], q, err_msg=name)
        assert found[name][1] == e, name


def assert_exports_exact(checkpoint, tmp_path, name):
    """onnx, onnx-qdq and onnx-niti give dsptrain's logits bit for bit in ONNX Runtime."""
    images = synthetic("test", (28, 28, 1), count=64).images
    for fmt in ("onnx", "onnx-qdq", "onnx-niti"):
        out = tmp_path / f"{name}.{fmt}"
        dsptrain.export(checkpoint, out, fmt)
        found = agreement(dsptrain_logits(checkpoint, images, batch=32), onnxruntime_logits(out, images, batch=32))
        assert found["top1_agreement"] == 1.0 and found["max_logit_diff"] == 0.0, (fmt, found)
