"""Models without Python (YAML layer lists) and Python-defined models the CLI can see
(`model.factory: "module:function"`); every model writes back to the layer-list form."""

from __future__ import annotations

import dsptrain
import pytest
from dsptrain.interchange.layer_spec import describe, from_description
from dsptrain.models import MODELS

from .helpers import cli, write_run

TINY_CNN = """model:
  name: tiny_cnn
  input_shape: [28, 28, 1]
  layers:
    - {kind: conv, out: 4, kernel: 3, padding: 1}
    - relu
    - {kind: maxpool, kernel: 2}
    - {kind: residual, body: [{kind: conv, out: 4, kernel: 3, padding: 1}, relu,
                              {kind: conv, out: 4, kernel: 3, padding: 1}]}
    - relu
    - flatten
    - {kind: linear, out: 10}
train: {epochs: 1, batch_size: 32}
"""


def test_yaml_layers_train_from_the_command_line(tmp_path):
    run = write_run(tmp_path, "niti", TINY_CNN, name="tiny")
    result = cli("train", run, "--quiet", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tiny: tiny_cnn with niti" in result.stderr and "final test accuracy" in result.stdout
    model = dsptrain.Trainer(dsptrain.load_run(run), progress=False).model
    assert [layer.name for layer in model.layers] == [
        "conv1",
        "relu1",
        "maxpool1",
        "residual1.conv1",
        "residual1.relu1",
        "residual1.conv2",
        "residual1.add",
        "relu2",
        "flatten1",
        "linear1",
    ]
    assert model.layers[6].skip_from == "maxpool1"


@pytest.mark.parametrize(
    "item, key, message",
    [
        ("{kind: conv, out: 4}", "model.layers[0].kernel", "is required"),
        (
            "{kind: convolution, out: 4}",
            "model.layers[0].kind",
            "'convolution' is not one of add, avgpool, batchnorm, clip, concat, conv",
        ),
        ("{kind: conv, out: 4, kernel: 3, dilations: 2}", "model.layers[0].dilations", "unknown key for conv"),
        ("{kind: linear, out: 10}", "model.layers[0]", "linear needs a vector input (flatten first)"),
        ("{kind: conv, out: 4, kernel: 40}", "model.layers[0]", "kernel 40 does not fit input 28x28"),
    ],
)
def test_bad_layers_name_file_key_and_value(tmp_path, item, key, message):
    body = f"model:\n  input_shape: [28, 28, 1]\n  layers: [{item}, flatten, {{kind: linear, out: 10}}]\n"
    path = write_run(tmp_path, "fp32", body, name="bad")
    with pytest.raises(dsptrain.ConfigError) as info:
        dsptrain.load_run(path)
    assert str(info.value).startswith(f"{path}: {key}: ") and message in str(info.value)


def test_factory_model_the_cli_can_see(tmp_path):
    (tmp_path / "my_models.py").write_text(
        "from dsptrain.nn import Conv2d, Flatten, Linear, Model, ReLU\n"
        "def tiny_cnn():\n"
        "    return Model('tiny_cnn', (28, 28, 1), 10, (Conv2d('c', 1, 4, 5, 2), ReLU('r'), Flatten('f'),\n"
        "                 Linear('fc', 4 * 12 * 12, 10)))\n"
        "def not_a_model():\n"
        "    return 42\n"
    )
    good = write_run(tmp_path, "niti", "model: {factory: 'my_models:tiny_cnn'}\ntrain: {epochs: 1}\n", name="fac")
    result = cli("train", good, "--quiet", "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "fac: tiny_cnn with niti" in result.stderr
    bad = write_run(tmp_path, "niti", "model: {factory: 'my_models:not_a_model'}\n", name="badfac")
    result = cli("plan", bad, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"dsptrain: error: {bad}: model.factory: my_models:not_a_model returned int, not a dsptrain.nn.Model"
    )


def test_two_model_sources_is_a_config_error(tmp_path):
    path = write_run(tmp_path, "fp32", "model: {onnx: m.onnx, factory: 'a:b'}\n", name="both")
    with pytest.raises(dsptrain.ConfigError, match="model: give one of onnx, layers, factory"):
        dsptrain.load_run(path)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_zoo_model_round_trips_through_the_layer_list(name):
    model = MODELS[name](10)
    assert from_description(describe(model)) == model
