"""Small trained runs the checkpoint and resume cases start from."""

from __future__ import annotations

import copy

import pytest
import yaml

from .gen_configs import BASE
from .harness import Case, run_in_process


def write_run(path, recipe="niti", **train):
    doc = copy.deepcopy(BASE)
    doc["recipe"] = recipe
    doc["train"].update(train)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """recipe -> (run config, output directory holding checkpoint.npz and metrics.jsonl)."""
    root = tmp_path_factory.mktemp("trained")
    out = {}
    for recipe in ("niti", "fp32"):
        config = write_run(root / f"{recipe}.yaml", recipe)
        code, stderr, _ = run_in_process(Case(recipe, ["train", str(config), "--out", str(root / recipe), "--quiet"]))
        assert code == 0, stderr
        out[recipe] = (config, root / recipe)
    return out
