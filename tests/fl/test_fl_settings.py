"""Federated configs (configs/runs/fl-*.yaml) load, and bad ones fail by file, key and value."""

import subprocess
import sys
import tomllib
from pathlib import Path

import dsptrain
import pytest
from dsptrain.config import CONFIG_ROOT
from dsptrain.errors import ConfigError
from dsptrain.fl.settings import load_fl_run

ROOT = CONFIG_ROOT.parent


@pytest.mark.parametrize("name, integer", [("fl-lenet-fmnist-niti", True), ("fl-lenet-fmnist-fp32", False)])
def test_shipped_configs_load(name, integer):
    flrun = load_fl_run(CONFIG_ROOT / "runs" / f"{name}.yaml")
    assert flrun.run.name == name and flrun.integer is integer
    assert flrun.fl.clients >= 10 and flrun.fl.partition.kind == "dirichlet" and flrun.fl.partition.alpha == 0.5


@pytest.mark.parametrize(
    "fl, key, value",
    [
        ({"rounds": 0}, "fl.rounds", "0"),
        ({"clients": 3, "min_train_clients": 4}, "fl.min_train_clients", "4"),
        ({"fraction_train": 1.5}, "fl.fraction_train", "1.5"),
        ({"partition": {"kind": "writers"}}, "fl.partition.kind", "'writers'"),
        ({"partition": {"alpha": -1}}, "fl.partition.alpha", "-1"),
        ({"local_steps": "ten"}, "fl.local_steps", "'ten'"),
        ({"round_timeout": 5}, "fl.round_timeout", "unknown key"),
    ],
)
def test_bad_values_name_file_key_and_value(tmp_path, fl_config, fl, key, value):
    path = fl_config(**fl)
    with pytest.raises(ConfigError) as info:
        load_fl_run(path)
    message = str(info.value)
    assert str(path) in message and key in message and value in message, message


def test_a_run_config_without_fl_and_a_bad_run_key(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("recipe: niti\n")
    with pytest.raises(ConfigError, match="plain.yaml: fl: is required"):
        load_fl_run(plain)
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe: niti\ntrain: {batch_size: 0}\nfl: {clients: 2}\n")
    with pytest.raises(ConfigError, match="bad.yaml: train.batch_size"):
        load_fl_run(bad)


def test_the_command_prints_one_line_and_exits_2(fl_config):
    path = fl_config(partition={"kind": "dirichlet", "alpha": 0})
    done = subprocess.run(
        [sys.executable, "-m", "dsptrain.cli", "fl", "simulate", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"dsptrain: error: {path}: fl.partition.alpha: 0.0 must be > 0"]


def test_pyproject_declares_the_flower_app():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    app = project["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "dsptrain.fl.server:app", "clientapp": "dsptrain.fl.client:app"}
    assert (ROOT / app["config"]["config"]).exists()
    assert project["project"]["version"] == dsptrain.__version__  # Flower needs a static version
    assert any(dep.startswith("flwr") for dep in project["project"]["dependencies"])
    assert Path(ROOT / "runtime" / "fl" / "server.py").exists()
