"""Export reads a checkpoint and writes ONNX (float, QDQ) and npz; ONNX Runtime runs the
files and must agree with dsptrain's own evaluation of the checkpoint on the test set:
at least 99.9 % top-1 agreement for the float export of a float recipe. NITI's integer
evaluation rounds activations to 8 bits at every layer, which a float graph does not:
its agreement is reported (printed) and held to a looser bound, and the onnx-niti form,
which writes that rounding out, must give dsptrain's logits exactly; the QDQ file's int8
weights and scales are checked to be exactly the checkpoint's."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import dsptrain
from dsptrain.data import synthetic
from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
from dsptrain.interchange.layer_spec import model_from_layers
from dsptrain.interchange.weights import pow2_grid

from .helpers import cli, write_run

FLOAT_AGREEMENT = 0.999
NITI_AGREEMENT = 0.97
RESIDUAL_LAYERS = """model:
  name: tiny_resnet
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 8, kernel: 3, stride: 2, padding: 1}
    - batchnorm
    - relu
    - {kind: residual, body: [{kind: conv, out: 8, kernel: 3, padding: 1}, batchnorm, relu,
                              {kind: conv, out: 8, kernel: 3, padding: 1}, batchnorm]}
    - relu
    - {kind: residual, body: [{kind: conv, out: 16, kernel: 3, stride: 2, padding: 1}, relu],
       shortcut: [{kind: conv, out: 16, kernel: 1, stride: 2}]}
    - relu
    - {kind: maxpool, kernel: 2}
    - flatten
    - {kind: dropout, p: 0.2}
    - {kind: linear, out: 10}
"""


def _trained(tmp_path, recipe, body="model: {name: lenet5}\n", name=None):
    name = name or f"exp-{recipe}"
    body += "train: {epochs: 1, batch_size: 32}\n"
    run = dsptrain.load_run(write_run(tmp_path, recipe, body, name=name))
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / name)
    data = synthetic("train", trainer.model.input_shape, count=256)
    try:
        for i in range(0, 256, 32):
            trainer.step(data.images[i:i + 32], data.labels[i:i + 32])
        return trainer.save()
    finally:
        trainer.close()


def _check(checkpoint, path, images):
    return agreement(dsptrain_logits(checkpoint, images), onnxruntime_logits(path, images))


@pytest.fixture(scope="module")
def test_images():
    return synthetic("test", (28, 28, 1), count=1000).images


def test_float_export_of_fp32_agrees_with_dsptrain(tmp_path, test_images):
    checkpoint = _trained(tmp_path, "fp32")
    out = tmp_path / "lenet.onnx"
    result = cli("export", checkpoint.parent, "--format", "onnx", "--out", out)   # the run directory
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    found = _check(checkpoint, out, test_images)
    print(f"fp32 float export: {found}")
    assert found["top1_agreement"] >= FLOAT_AGREEMENT
    assert found["max_logit_diff"] <= 1e-4 * found["logit_scale"]
    # the file imports back into the same model (import of an export)
    again = dsptrain.load_model(out)
    assert [type(layer) for layer in again.layers] == [type(layer) for layer in dsptrain.models.lenet5().layers
                                                       if type(layer).__name__ != "Dropout"]


def test_residual_yaml_model_with_batch_norm_exports(tmp_path):
    checkpoint = _trained(tmp_path, "fp32", RESIDUAL_LAYERS, name="exp-resnet")
    out = tmp_path / "tiny_resnet.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    ops = [node.op_type for node in onnx.load(out).graph.node]
    assert ops.count("Add") == 2 and ops.count("BatchNormalization") == 3 and "Dropout" not in ops
    images = synthetic("test", (28, 28, 1), count=300).images
    found = _check(checkpoint, out, images)
    assert found["top1_agreement"] >= FLOAT_AGREEMENT and found["max_logit_diff"] <= 1e-4 * found["logit_scale"]


def test_niti_exports_float_and_qdq(tmp_path, test_images):
    checkpoint = _trained(tmp_path, "niti")
    state, _ = dsptrain.checkpoint.load(checkpoint)
    results = {}
    for fmt in ("onnx", "onnx-qdq"):
        out = tmp_path / f"lenet.{fmt}"
        dsptrain.export(checkpoint, out, fmt)
        results[fmt] = _check(checkpoint, out, test_images)
        print(f"niti {fmt} export: {results[fmt]}")
        assert results[fmt]["top1_agreement"] >= NITI_AGREEMENT, (fmt, results[fmt])
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(tmp_path / "lenet.onnx-qdq").graph.initializer}
    for layer in ("conv1", "conv2", "fc1", "fc2", "fc3"):
        q, scale = inits[f"{layer}.weight_q"], inits[f"{layer}.weight_scale"]
        stored = state[f"{layer}.w"]
        expected = stored.q.transpose(0, 3, 1, 2) if stored.q.ndim == 4 else stored.q
        if layer == "fc1":   # columns from the engine's (H, W, C) to ONNX's (C, H, W)
            expected = expected.reshape(120, 5, 5, 16).transpose(0, 3, 1, 2).reshape(120, 400)
        assert q.dtype == np.int8 and np.array_equal(q, expected), layer
        assert float(scale) == 2.0 ** stored.e, layer


def test_niti_rounding_export_gives_dsptrains_logits_exactly(tmp_path, test_images):
    """onnx-niti writes NITI's per-batch activation rounding: fed dsptrain's batches, ONNX
    Runtime returns the very logits of dsptrain's integer evaluation."""
    checkpoint = _trained(tmp_path, "niti")
    out = tmp_path / "lenet-niti.onnx"
    dsptrain.export(checkpoint, out, "onnx-niti")
    mine = dsptrain_logits(checkpoint, test_images, batch=250)
    theirs = onnxruntime_logits(out, test_images, batch=250)
    assert np.array_equal(mine, theirs)
    with pytest.raises(dsptrain.UserError, match="format onnx-niti writes NITI's integer evaluation"):
        dsptrain.export(_trained(tmp_path, "fp32"), tmp_path / "x.onnx", "onnx-niti")


def test_qdq_of_a_float_recipe_uses_power_of_two_int8(tmp_path):
    checkpoint = _trained(tmp_path, "fp32")
    out = tmp_path / "q.onnx"
    dsptrain.export(checkpoint, out, "onnx-qdq")
    state, _ = dsptrain.checkpoint.load(checkpoint)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    grid = pow2_grid(state["fc3.w"], 8)
    assert np.array_equal(inits["fc3.weight_q"], grid.q) and float(inits["fc3.weight_scale"]) == 2.0 ** grid.e
    scale = float(inits["fc3.weight_scale"])
    assert np.log2(scale) == int(np.log2(scale))
    assert np.abs(inits["fc3.weight_q"] * scale - state["fc3.w"]).max() <= scale / 2


def test_npz_layout(tmp_path):
    checkpoint = _trained(tmp_path, "niti")
    out = tmp_path / "lenet.npz"
    result = cli("export", checkpoint, "--format", "npz", "--out", out)
    assert result.returncode == 0, result.stderr
    state, _ = dsptrain.checkpoint.load(checkpoint)
    with np.load(out, allow_pickle=False) as arrays:
        header = json.loads(str(arrays["__model__"]))
        assert header["format"] == "dsptrain-npz" and header["version"] == 1 and header["recipe"] == "niti"
        model = model_from_layers(header["name"], header["input_shape"], header["layers"], header["num_classes"])
        assert model == dsptrain.models.lenet5()
        for layer in model.parametric():
            w, q, e = (arrays[f"{layer.name}.{k}"] for k in ("weight", "weight_q", "weight_exponent"))
            assert w.dtype == np.float32 and w.shape == layer.weight_shape
            assert np.array_equal(q, state[f"{layer.name}.w"].q) and int(e) == state[f"{layer.name}.w"].e
            assert np.array_equal(w, (q * 2.0 ** int(e)).astype(np.float32))


def test_export_of_a_missing_checkpoint_is_one_error_line(tmp_path):
    result = cli("export", tmp_path / "nowhere", "--out", tmp_path / "x.onnx")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"dsptrain: error: {tmp_path / 'nowhere'}: no such checkpoint "
        f"(give a checkpoint.npz or the run directory holding one)"]
