"""Bad configs fail before training, naming file, key and value."""

import dataclasses
import subprocess
import sys

import dsptrain
import pytest
from dsptrain.config import CONFIG_ROOT
from dsptrain.errors import ConfigError, LoweringError


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_configs_load():
    from dsptrain.fl.settings import load_fl_run

    for path in sorted((CONFIG_ROOT / "runs").glob("*.yaml")):
        federated = path.name.startswith("fl-")  # run config + `fl:` section (runtime/fl/settings.py)
        run = load_fl_run(path).run if federated else dsptrain.load_run(path)
        assert run.name == path.stem
    niti = dsptrain.load_recipe("niti")
    assert niti.integer and niti.tensors.gradients.rounding == "psto"
    assert dataclasses.is_dataclass(niti)
    with pytest.raises(dataclasses.FrozenInstanceError):
        niti.name = "x"


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("name: r\nrecipe: niti\ntrain: {epochs: 0}\n", "train.epochs", "0 must be >= 1"),
        ("name: r\nrecipe: niti\ntrain: {batch_size: 'big'}\n", "train.batch_size", "'big'"),
        ("name: r\nrecipe: niti\nmodel: {nam: lenet5}\n", "model.nam", "unknown key"),
        ("name: r\nrecipe: niti\nmodel: {name: resnet99}\n", "model.name", "'resnet99'"),
        ("name: r\nrecipe: niti\nbackend: gpu\n", "backend", "'gpu'"),
        ("name: r\nrecipe: {name: niti, schedule: {mu: [[0, 12]]}}\n", "schedule.mu", "mu 12"),
        ("name: r\nrecipe: {name: niti, tensors: {errors: {rounding: up}}}\n", "tensors.errors.rounding", "'up'"),
        ("name: r\nrecipe: {name: niti, tensors: {weights: {bits: 40}}}\n", "tensors.weights.bits", "40"),
        ("name: r\n", "recipe", "is required"),
        ("name: r\nrecipe: nosuch\n", None, "no such recipe"),
    ],
)
def test_bad_values_name_file_key_and_value(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dsptrain.load_run(path)
    message = str(info.value)
    assert words in message
    if key:
        assert f"{path}: {key}" in message or (key in message and str(path) in message)


def test_malformed_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "name: r\nrecipe: niti\nmodel: [oops\n")
    with pytest.raises(ConfigError, match=r"malformed YAML at line \d+"):
        dsptrain.load_run(path)


def test_recipe_that_cannot_lower_a_layer_names_it():
    """Every recipe lowers every layer of nn.py (NITI's grouped convs included since
    int_products.grouped); a layer kind outside its tables is refused by name."""
    from dataclasses import dataclass

    from dsptrain.graph import lower
    from dsptrain.nn import Flatten, Linear, Model

    @dataclass(frozen=True)
    class Swirl:  # a layer kind no recipe has
        name: str

        def out_shape(self, shape):
            return shape

    model = Model("swirl", (4, 4, 4), 2, (Swirl("swirl"), Flatten("f"), Linear("fc", 64, 2)))
    with pytest.raises(LoweringError, match="'niti' cannot lower layer 'swirl' \\(Swirl\\)"):
        lower(model, dsptrain.load_recipe("niti"), 2)


def test_command_line_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, "name: r\nrecipe: niti\ntrain: {epochs: -1}\n")
    result = subprocess.run([sys.executable, "-m", "dsptrain.cli", "train", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.epochs" in lines[0] and "-1" in lines[0]
