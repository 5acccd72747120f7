"""torchvision's eight mobile CNNs (tests/zoo_torch/, reduced width and depth) import
unedited through `from_torch`, in eval- and train-mode export with the same layer names,
compute torch's forward under FP32, and train under every recipe with a finite, falling
loss (20 steps on one batch: a model that learns at all fits it). NITI trains them with its
int8 products and float batch norm and activations between them, bit for bit the same on
ref and cpu."""

from __future__ import annotations

import warnings

import dsptrain
import numpy as np
import pytest
from dsptrain.data import synthetic
from dsptrain.nn import ChannelShuffle, Concat, Conv2d, MaxPool2d, Mul, Nonlinearity, SliceChannels

from .helpers import images, need_torch, torch_logits, trainer_for, write_run

MODELS = [
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "squeezenet1_1",
    "resnet18",
    "resnet50",
    "shufflenet_v2_x0_5",
    "mnasnet0_5",
]
RECIPES = ["fp32", "niti", "octo", "wageubn", "afp", "mls", "fp8"]
SHAPE = (3, 32, 32)
STEPS = 20


def _import(name, mode="eval", opset=17):
    torch = need_torch()
    from tests.zoo_torch import build

    net = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notes about kept biases
        model = dsptrain.from_torch(net, torch.zeros(2, *SHAPE), mode=mode, opset=opset)
    return net, model


@pytest.fixture(scope="module")
def imported():
    return {name: _import(name) for name in MODELS}


# what each model must contain once imported: the layers this issue adds, where it has them
EXPECTED = {
    "mobilenet_v2": lambda m: _has(m, Nonlinearity, "clip") and _depthwise(m),
    "mobilenet_v3_small": lambda m: (
        _has(m, Nonlinearity, "hardswish")
        and _has(m, Nonlinearity, "hardsigmoid")
        and any(isinstance(layer, Mul) for layer in m.layers)
    ),
    "efficientnet_b0": lambda m: (
        _has(m, Nonlinearity, "silu")
        and _has(m, Nonlinearity, "sigmoid")
        and any(isinstance(layer, Mul) for layer in m.layers)
    ),
    # at 32x32 its ceil_mode pools add no partial window (test_branch_ops.py checks one that does)
    "squeezenet1_1": lambda m: (
        any(isinstance(layer, Concat) for layer in m.layers) and any(isinstance(layer, MaxPool2d) for layer in m.layers)
    ),
    "resnet18": lambda m: any(isinstance(layer, MaxPool2d) and layer.padding == 1 for layer in m.layers),
    "resnet50": lambda m: any(isinstance(layer, MaxPool2d) and layer.padding == 1 for layer in m.layers),
    "shufflenet_v2_x0_5": lambda m: (
        all(any(isinstance(layer, t) for layer in m.layers) for t in (SliceChannels, ChannelShuffle, Concat))
        and _depthwise(m)
    ),
    "mnasnet0_5": lambda m: _depthwise(m),
}


def _has(model, kind, function):
    return any(isinstance(layer, kind) and layer.function == function for layer in model.layers)


def _depthwise(model):
    return any(isinstance(layer, Conv2d) and layer.depthwise for layer in model.layers)


@pytest.mark.parametrize("name", MODELS)
def test_imports_and_computes_torchs_forward(imported, name, tmp_path):
    net, model = imported[name]
    assert EXPECTED[name](model), [type(layer).__name__ for layer in model.layers]
    pixels = images(4, (32, 32, 3))
    trainer = trainer_for(model, "fp32", tmp_path)
    try:
        got = trainer.predict(pixels)
    finally:
        trainer.close()
    expected = torch_logits(net, pixels)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


@pytest.mark.parametrize("name", MODELS)
def test_train_and_eval_exports_give_the_same_layers(imported, name):
    _, evaluated = imported[name]
    _, trained = _import(name, mode="train")
    kept = [layer for layer in trained.layers if type(layer).__name__ != "Dropout"]  # eval export drops dropout
    assert [layer.name for layer in kept] == [layer.name for layer in evaluated.layers]
    assert [type(layer) for layer in kept] == [type(layer) for layer in evaluated.layers]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_other_opsets_give_the_same_model(imported, opset):
    """Clip's bounds as inputs (11+), Split's sizes as an input (13+), ReduceMean's axes as an input (18+)."""
    for name in ("mobilenet_v2", "shufflenet_v2_x0_5"):
        _, model = _import(name, opset=opset)
        assert model.layers == imported[name][1].layers, (name, opset)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", MODELS)
def test_trains_with_a_falling_loss(imported, name, recipe, tmp_path):
    _, model = imported[name]
    data = synthetic("train", (32, 32, 3), count=16, classes=10)
    trainer = trainer_for(model, recipe, tmp_path)
    try:
        losses = [trainer.step(data.images, data.labels).loss for _ in range(STEPS)]
    finally:
        trainer.close()
    assert np.all(np.isfinite(losses)), losses
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.02, (name, recipe, losses)  # falling, not noise


@pytest.mark.parametrize("name", MODELS)
def test_niti_is_bit_exact_on_ref_and_cpu(imported, name, tmp_path):
    """Three NITI steps on each backend: the same losses, and the same bits in every weight,
    gamma, beta and velocity. Batch norm's running statistics (read only at evaluation) are
    float64 sums in another order on the CPU: within a few float32 ulps of the reference."""
    from dsptrain.numerics import QTensor

    _, model = imported[name]
    data = synthetic("train", (32, 32, 3), count=16, classes=10)
    states, losses = {}, {}
    for backend in ("ref", "cpu"):
        run = dsptrain.load_run(write_run(tmp_path, "niti", "train: {epochs: 1, batch_size: 16}\n", name=backend))
        trainer = dsptrain.Trainer(run, model=model, backend=backend, progress=False, out_dir=tmp_path / backend)
        try:
            losses[backend] = [trainer.step(data.images, data.labels).loss for _ in range(3)]
            states[backend] = {
                k: (v.q, v.e) if isinstance(v, QTensor) else np.asarray(v) for k, v in trainer.state.items()
            }
        finally:
            trainer.close()
    assert losses["ref"] == losses["cpu"], losses
    assert states["ref"].keys() == states["cpu"].keys()
    for key, value in states["ref"].items():
        other = states["cpu"][key]
        if isinstance(value, tuple):
            assert value[1] == other[1] and np.array_equal(value[0], other[0]), key
        elif key.endswith((".mean", ".var")):  # within a few float32 ulps of the tensor's largest value
            assert np.abs(value - other).max() <= 1e-6 * np.abs(value).max(), key
        else:
            assert value.dtype == other.dtype and np.array_equal(value, other), key


@pytest.mark.parametrize("name", MODELS)
def test_the_layer_list_round_trips_through_yaml(imported, name):
    """What a checkpoint keeps (layer_spec.describe) rebuilds the same model: the YAML layer kinds."""
    from dsptrain.interchange.layer_spec import describe, from_description

    _, model = imported[name]
    assert from_description(describe(model)).layers == model.layers


EMULATED = ("octo", "afp", "wageubn", "fp8", "mls")
EXPORTS = (
    [(name, "fp32", "onnx") for name in MODELS]
    + [(name, recipe, "onnx") for name in MODELS for recipe in EMULATED]
    + [(name, recipe, "onnx-qdq") for name in ("mobilenet_v2", "resnet18") for recipe in EMULATED]
)


@pytest.mark.parametrize("name,recipe,fmt", EXPORTS)
def test_export_agrees_in_onnxruntime(imported, name, tmp_path, recipe, fmt):
    """Trained a few steps (the YAML form of the imported model: checkpoints keep it), exported,
    run in ONNX Runtime beside dsptrain's own evaluation of the checkpoint."""
    import json

    from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
    from dsptrain.interchange.layer_spec import layers_of

    from .helpers import trained_checkpoint

    _, model = imported[name]
    body = (
        "model: "
        + json.dumps({"name": name, "input_shape": list(model.input_shape), "layers": layers_of(model)})
        + "\n"
    )  # JSON is YAML
    checkpoint = trained_checkpoint(tmp_path, recipe, body, steps=2, batch=16)
    out = tmp_path / f"{name}.onnx"
    dsptrain.export(checkpoint, out, fmt)
    pixels = images(64, (32, 32, 3), seed=3)
    found = agreement(dsptrain_logits(checkpoint, pixels), onnxruntime_logits(out, pixels))
    print(f"{name} {recipe} {fmt}: {found}")
    assert found["top1_agreement"] >= 0.999, found
    # (64 samples) AFP's, WAGEUBN's and FP8's exports compute what dsptrain does, bit for bit (their grids,
    # FP8's FP16 chunked sums, batch norm in float64). MLS's products are exact too; efficientnet_b0
    # differs by 0.7 % of the logits' scale (not yet traced; its sigmoid-family float ops between the
    # products are the suspects). Octo's float scales round once more in float32: 2.8 % (mnasnet0_5)
    bound = {"fp32": 1e-4, "afp": 0.0, "wageubn": 0.0, "fp8": 0.0, "mls": 1e-2, "octo": 5e-2}[recipe]
    assert found["max_logit_diff"] <= bound * found["logit_scale"], found


@pytest.mark.parametrize("name", MODELS)
def test_niti_export_gives_dsptrains_logits_in_onnxruntime(imported, name, tmp_path):
    """A NITI checkpoint (float batch norm, activations and biases between int8 layers) exported
    with NITI's rounding written out: ONNX Runtime gives dsptrain's own logits, fed the same batches."""
    import json

    from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
    from dsptrain.interchange.layer_spec import layers_of

    from .helpers import trained_checkpoint

    _, model = imported[name]
    body = (
        "model: "
        + json.dumps({"name": name, "input_shape": list(model.input_shape), "layers": layers_of(model)})
        + "\n"
    )
    checkpoint = trained_checkpoint(tmp_path, "niti", body, steps=2, batch=16)
    pixels = images(64, (32, 32, 3), seed=3)
    mine = dsptrain_logits(checkpoint, pixels)
    for fmt in ("onnx-niti", "onnx-qdq") if name == "mobilenet_v2" else ("onnx-niti",):
        out = tmp_path / f"{name}-{fmt}.onnx"
        dsptrain.export(checkpoint, out, fmt)
        found = agreement(mine, onnxruntime_logits(out, pixels, batch=500))
        assert found["top1_agreement"] == 1.0 and found["max_logit_diff"] == 0.0, (fmt, found)
