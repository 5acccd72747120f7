"""Export reads a checkpoint and writes ONNX (float, QDQ) and npz; ONNX Runtime runs the
files and must agree with dsptrain's own evaluation of the checkpoint on the test set:
at least 99.9 % top-1 agreement for the float export. NITI checkpoints: test_export_niti.py."""

from __future__ import annotations

import json

import dsptrain
import numpy as np
import onnx
import pytest
from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
from dsptrain.data import synthetic
from dsptrain.interchange.layer_spec import model_from_layers
from dsptrain.interchange.weights import pow2_grid

from .helpers import cli
from .helpers import trained_checkpoint as _trained

FLOAT_AGREEMENT = 0.999
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


def _check(checkpoint, path, images):
    return agreement(dsptrain_logits(checkpoint, images), onnxruntime_logits(path, images))


@pytest.fixture(scope="module")
def test_images():
    return synthetic("test", (28, 28, 1), count=1000).images


def test_float_export_of_fp32_agrees_with_dsptrain(tmp_path, test_images):
    checkpoint = _trained(tmp_path, "fp32")
    out = tmp_path / "lenet.onnx"
    result = cli("export", checkpoint.parent, "--format", "onnx", "--out", out)  # the run directory
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    found = _check(checkpoint, out, test_images)
    print(f"fp32 float export: {found}")
    assert found["top1_agreement"] >= FLOAT_AGREEMENT
    assert found["max_logit_diff"] <= 1e-4 * found["logit_scale"]
    # the file imports back into the same model (import of an export)
    again = dsptrain.load_model(out)
    assert [type(layer) for layer in again.layers] == [
        type(layer) for layer in dsptrain.models.lenet5().layers if type(layer).__name__ != "Dropout"
    ]


def test_residual_yaml_model_with_batch_norm_exports(tmp_path):
    checkpoint = _trained(tmp_path, "fp32", RESIDUAL_LAYERS, name="exp-resnet")
    out = tmp_path / "tiny_resnet.onnx"
    dsptrain.export(checkpoint, out, "onnx")
    ops = [node.op_type for node in onnx.load(out).graph.node]
    assert ops.count("Add") == 2 and ops.count("BatchNormalization") == 3 and "Dropout" not in ops
    images = synthetic("test", (28, 28, 1), count=300).images
    found = _check(checkpoint, out, images)
    assert found["top1_agreement"] >= FLOAT_AGREEMENT and found["max_logit_diff"] <= 1e-4 * found["logit_scale"]


def test_qdq_of_a_float_recipe_uses_power_of_two_int8(tmp_path):
    checkpoint = _trained(tmp_path, "fp32")
    out = tmp_path / "q.onnx"
    dsptrain.export(checkpoint, out, "onnx-qdq")
    state, _ = dsptrain.checkpoint.load(checkpoint)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
    grid = pow2_grid(state["fc3.w"], 8)
    assert np.array_equal(inits["fc3.weight_q"], grid.q) and float(inits["fc3.weight_scale"]) == 2.0**grid.e
    scale = float(inits["fc3.weight_scale"])
    assert np.log2(scale) == int(np.log2(scale))
    assert np.abs(inits["fc3.weight_q"] * scale - state["fc3.w"]).max() <= scale / 2


@pytest.mark.parametrize("recipe", ["octo", "afp", "wageubn", "fp8", "mls"])
@pytest.mark.parametrize("fmt", ["onnx", "onnx-qdq"])
def test_int8_emulated_exports_agree_with_dsptrain(tmp_path, test_images, recipe, fmt):
    """The emulated recipes' exports carry their grids (weights; each product's input on its
    batch's range, or FP8's small floats), Octo's compensation layers and FP8's FP16 chunked sums
    (onnx_emulated.py, onnx_fp8.py): fed dsptrain's batches, ONNX Runtime gives its top-1 answers
    (AFP's, WAGEUBN's, FP8's and MLS's: its logits exactly). Without them WAGEUBN agreed on 94.0 % of
    1000 answers, FP8 on 93.0 % (float32 sums of FP8 operands: 99.4 %)."""
    checkpoint = _trained(tmp_path, recipe)
    out = tmp_path / f"lenet.{fmt}"
    dsptrain.export(checkpoint, out, fmt)
    found = agreement(
        dsptrain_logits(checkpoint, test_images, batch=500), onnxruntime_logits(out, test_images, batch=500)
    )
    print(f"{recipe} {fmt}: {found}")
    assert found["top1_agreement"] >= FLOAT_AGREEMENT, found
    # AFP's and WAGEUBN's power-of-two steps: exact products; FP8: its FP16 chunked sums written out
    # (onnx_fp8.py), the same bits; Octo's float scales round once more in
    # float32
    bound = {"afp": 1e-6, "wageubn": 0.0, "fp8": 0.0, "octo": 2e-2, "mls": 0.0}[recipe]
    assert found["max_logit_diff"] <= bound * found["logit_scale"], found
    if fmt == "onnx-qdq" and recipe in (
        "octo",
        "afp",
    ):  # the integers and the scale the recipe's own grid gives its weights
        state, _ = dsptrain.checkpoint.load(checkpoint)
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(out).graph.initializer}
        w = np.asarray(state["fc3.w"], np.float64)
        step = np.abs(w).max() / 127 if recipe == "octo" else 2.0 ** (np.ceil(np.log2(np.abs(w).max())) - 7)
        assert inits["fc3.weight_q"].dtype == np.int8 and np.isclose(float(inits["fc3.weight_scale"]), step)
        assert np.abs(inits["fc3.weight_q"] * step - w).max() <= step / 2 + 1e-12


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
        f"(give a checkpoint.npz or the run directory holding one)"
    ]


@pytest.mark.parametrize("bits", [(5, 2), (5, 10)])
def test_fp8_export_rounds_as_the_recipe(bits):
    """FP8's grid in ONNX operators (onnx_emulated.Grids._round_float) gives float_ops.round_float's
    values bit for bit: subnormals, ties to even, powers of two, saturation, zero."""
    import onnxruntime
    from dsptrain.float_ops import round_float
    from dsptrain.interchange.onnx_emulated import Grids
    from dsptrain.interchange.onnx_export import _Graph

    g = _Graph(onnx, False)
    grids = Grids.__new__(Grids)
    grids.g = g
    g.nodes.append(onnx.helper.make_node("Identity", [grids._round_float("t", "input", *bits)], ["y"]))
    io = lambda name: onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [None])
    graph = onnx.helper.make_graph(g.nodes, "t", [io("input")], [io("y")], g.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(100_000) * np.exp(rng.uniform(-20, 12, 100_000))).astype(np.float32)
    x[:9] = [0, 1, 2, 0.75, 0.625, 2**-16, 3 * 2**-17, 1e6, -0.875]
    y = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    assert np.array_equal(y, round_float(x, *bits, "nearest_even", None))
