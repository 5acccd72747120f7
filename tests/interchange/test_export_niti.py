"""Exports of NITI checkpoints. NITI rounds every activation to int8 on a step taken from
the batch's range; the float and QDQ files write that rounding out in float operators, so
ONNX Runtime, fed the batches dsptrain evaluates (or one image at a time), must return
dsptrain's logits: at least 99.9 % top-1 agreement and, as the rounding is exact, no
logit difference at all. Chains (LeNet-5) and residual networks (Add, global average
pool, a projection shortcut). The QDQ file's int8 weights and scales are the checkpoint's."""

from __future__ import annotations

import dsptrain
import numpy as np
import onnx
import pytest
from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
from dsptrain.data import synthetic

from .helpers import trained_checkpoint

FLOAT_AGREEMENT = 0.999
EVAL_BATCH = 250
RESIDUAL_NITI_LAYERS = """model:
  name: tiny_resnet_nobn
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 8, kernel: 5}
    - relu
    - {kind: maxpool, kernel: 3}
    - {kind: residual, body: [{kind: conv, out: 8, kernel: 3, padding: 1}, relu,
                              {kind: conv, out: 8, kernel: 3, padding: 1}]}
    - relu
    - {kind: residual, body: [{kind: conv, out: 16, kernel: 3, stride: 2, padding: 1}, relu,
                              {kind: conv, out: 16, kernel: 3, padding: 1}],
       shortcut: [{kind: conv, out: 16, kernel: 1, stride: 2}]}
    - relu
    - globalavgpool
    - {kind: linear, out: 10}
"""


@pytest.fixture(scope="module")
def test_images():
    return synthetic("test", (28, 28, 1), count=1000).images


def _agreement(checkpoint, path, images, batch=EVAL_BATCH):
    """dsptrain's evaluation and ONNX Runtime's on the same batches of `images`."""
    return agreement(dsptrain_logits(checkpoint, images, batch=batch), onnxruntime_logits(path, images, batch=batch))


def test_lenet_float_and_qdq_exports_give_dsptrains_logits(tmp_path, test_images):
    checkpoint = trained_checkpoint(tmp_path, "niti")
    for fmt in ("onnx", "onnx-qdq", "onnx-niti"):
        out = tmp_path / f"lenet.{fmt}"
        summary = dsptrain.export(checkpoint, out, fmt)
        assert "NITI-rounding ONNX" in summary
        found = _agreement(checkpoint, out, test_images)
        print(f"niti {fmt} export: {found}")
        assert found["top1_agreement"] >= FLOAT_AGREEMENT and found["max_logit_diff"] == 0.0, (fmt, found)
    one_by_one = _agreement(checkpoint, tmp_path / "lenet.onnx", test_images[:40], batch=1)
    assert one_by_one["max_logit_diff"] == 0.0, one_by_one
    state, _ = dsptrain.checkpoint.load(checkpoint)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(tmp_path / "lenet.onnx-qdq").graph.initializer}
    for layer in ("conv1", "conv2", "fc1", "fc2", "fc3"):
        q, scale = inits[f"{layer}.weight_q"], inits[f"{layer}.weight_scale"]
        stored = state[f"{layer}.w"]
        expected = stored.q.transpose(0, 3, 1, 2) if stored.q.ndim == 4 else stored.q
        if layer == "fc1":  # columns from the engine's (H, W, C) to ONNX's (C, H, W)
            expected = expected.reshape(120, 5, 5, 16).transpose(0, 3, 1, 2).reshape(120, 400)
        assert q.dtype == np.int8 and np.array_equal(q, expected), layer
        assert float(scale) == 2.0**stored.e, layer


def test_without_the_rounding_a_float_graph_disagrees(tmp_path, test_images):
    """Why the rounding is there: the same weights in a plain float graph miss dsptrain's
    logits (and, on a trained model, some of its answers)."""
    from dsptrain.interchange import read_checkpoint
    from dsptrain.interchange.onnx_export import build_onnx

    checkpoint = trained_checkpoint(tmp_path, "niti")
    plain = tmp_path / "plain.onnx"
    plain.write_bytes(build_onnx(read_checkpoint(checkpoint), niti=False).SerializeToString())
    found = _agreement(checkpoint, plain, test_images)
    print(f"niti plain float graph: {found}")
    assert found["max_logit_diff"] > 0.0


def test_residual_network_exports_with_niti_rounding(tmp_path, test_images):
    checkpoint = trained_checkpoint(tmp_path, "niti", RESIDUAL_NITI_LAYERS, name="exp-res-niti", steps=4)
    out = tmp_path / "res.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    ops = [node.op_type for node in onnx.load(out).graph.node]
    assert ops.count("Conv") == 6 and "GlobalAveragePool" in ops
    found = _agreement(checkpoint, out, test_images[:500])
    print(f"niti residual onnx export: {found}")
    assert found["top1_agreement"] >= FLOAT_AGREEMENT and found["max_logit_diff"] == 0.0, found


def test_onnx_niti_refuses_other_recipes(tmp_path):
    with pytest.raises(dsptrain.UserError, match="format onnx-niti writes NITI's integer evaluation"):
        dsptrain.export(trained_checkpoint(tmp_path, "fp32", steps=1), tmp_path / "x.onnx", "onnx-niti")


AVGPOOL_LENET = """model:
  name: lenet_avgpool
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 6, kernel: 5, padding: 2}
    - relu
    - {kind: avgpool, kernel: 2}
    - {kind: conv, out: 16, kernel: 5}
    - relu
    - {kind: avgpool, kernel: 2}
    - flatten
    - {kind: linear, out: 10}
"""


def test_average_pool_windows_under_niti_export_exactly(tmp_path, test_images):
    """LeNet-5 with its original average pools (2x2, stride 2): NITI trains it and the
    export, which rounds each window mean as NITI does, gives dsptrain's logits."""
    checkpoint = trained_checkpoint(tmp_path, "niti", AVGPOOL_LENET, name="exp-avg-niti", steps=4)
    out = tmp_path / "avg.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    assert [n.op_type for n in onnx.load(out).graph.node].count("AveragePool") == 2
    found = _agreement(checkpoint, out, test_images[:500])
    print(f"niti average-pool onnx export: {found}")
    assert found["top1_agreement"] >= FLOAT_AGREEMENT and found["max_logit_diff"] == 0.0, found


def test_average_pool_windows_micro_batched_are_bit_identical(tmp_path):
    """The pool takes one shift over every slice of the batch, as the global pool does."""
    import dataclasses

    from dsptrain.config import MemoryConfig
    from dsptrain.numerics import QTensor

    from .helpers import write_run

    run = dsptrain.load_run(write_run(tmp_path, "niti", AVGPOOL_LENET, name="avg-mb"))
    data = synthetic("train", (28, 28, 1), count=48)
    states = []
    for memory in (MemoryConfig(), MemoryConfig(arena=True, micro_batch=5, recompute="sqrt")):
        trainer = dsptrain.Trainer(
            dataclasses.replace(run, memory=memory),
            backend="cpu",
            progress=False,
            out_dir=tmp_path / f"out{len(states)}",
        )
        try:
            for i in range(0, 48, 24):
                trainer.step(data.images[i : i + 24], data.labels[i : i + 24])
        finally:
            trainer.close()
        states.append({k: (v.q.copy(), v.e) if isinstance(v, QTensor) else v for k, v in trainer.state.items()})
    plain, sliced = states
    for name in plain:
        assert np.array_equal(plain[name][0], sliced[name][0]) and plain[name][1] == sliced[name][1], name
