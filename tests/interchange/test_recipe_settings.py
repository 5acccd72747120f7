"""Checkpoints carry their recipe's resolved settings: resuming checks them against the run,
exporting writes them (FP8's chunk size, edge layers and chunk sums) or refuses by name what it
cannot write; a checkpoint written before they were stored still resumes and exports, with a note."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain import checkpoint
from dsptrain.agreement import agreement, dsptrain_logits, onnxruntime_logits
from dsptrain.config import load_recipe
from dsptrain.config.settings import recipe_settings
from dsptrain.data import synthetic
from dsptrain.errors import CheckpointError
from dsptrain.interchange.recipe_settings import FIXED, FP8_DEFAULTS, dotted

from .helpers import cli, write_run

DEPTHWISE = """model:
  name: dwnet
  input_shape: [12, 12, 1]
  layers:
    - {kind: conv, out: 8, kernel: 3, padding: 1}
    - relu
    - {kind: conv, out: 8, kernel: 3, padding: 1, groups: 8}
    - relu
    - {kind: conv, out: 12, kernel: 1}
    - flatten
    - {kind: linear, out: 10}
"""
FP8_OTHER = "recipe: {name: fp8, params: {chunk_size: 4, first_last_fp16: false, chunk_sum: fp32}}\n"


def _train(tmp_path, body, name, steps=3, batch=16):
    run = dsptrain.load_run(
        write_run(tmp_path, "fp8", body + f"train: {{epochs: 1, batch_size: {batch}}}\n", name=name)
    )
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / name)
    data = synthetic("train", (12, 12, 1), count=steps * batch)
    try:
        for i in range(0, steps * batch, batch):
            trainer.step(data.images[i : i + batch], data.labels[i : i + batch])
        return run, trainer.save()
    finally:
        trainer.close()


def _rewrite(path, change):
    """The checkpoint at `path` with its fields changed by change(meta), written back as a checkpoint."""
    state, meta = checkpoint.load(path)
    change(meta)
    meta = {k: v for k, v in meta.items() if k not in ("format", "arrays")}
    checkpoint.save(path, state, meta)


def test_fixed_settings_are_the_shipped_recipes():
    """What the exports hard-wire is each shipped recipe's own setting (so a default run exports)."""
    for recipe, fixed in FIXED.items():
        settings = recipe_settings(load_recipe(recipe))
        for key, value in fixed.items():
            assert dotted(settings, key) == value, (recipe, key)
    assert {k: load_recipe("fp8").params[k] for k in FP8_DEFAULTS} == FP8_DEFAULTS


def test_a_checkpoint_stores_its_runs_resolved_settings(tmp_path):
    run, path = _train(tmp_path, DEPTHWISE, "plain")
    _, meta = checkpoint.load(path)
    assert meta["recipe_settings"] == recipe_settings(run.recipe)
    assert meta["recipe_settings"]["params"]["chunk_size"] == 64


def test_fp8_exports_the_settings_it_was_trained_with(tmp_path):
    """chunk 4, float32 chunk sums, FP8 edge layers: the export computes what training evaluated."""
    path = tmp_path / "other.yaml"
    path.write_text(
        f"name: other\n{FP8_OTHER}backend: cpu\nenergy: estimate\n"
        f"data: {{dataset: synthetic, train_limit: 48, test_limit: 32}}\n{DEPTHWISE}train: {{epochs: 1, batch_size: 16}}\n"
    )
    run = dsptrain.load_run(path)
    assert run.recipe.params["chunk_size"] == 4
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "other")
    data = synthetic("train", (12, 12, 1), count=48)
    try:
        for i in range(0, 48, 16):
            trainer.step(data.images[i : i + 16], data.labels[i : i + 16])
        saved = trainer.save()
    finally:
        trainer.close()
    images = synthetic("test", (12, 12, 1), count=48).images
    ours = dsptrain_logits(saved, images, batch=16)
    out = tmp_path / "other.onnx"
    dsptrain.export(saved, out, "onnx")
    found = agreement(ours, onnxruntime_logits(out, images, batch=16))
    assert found["max_logit_diff"] == 0.0 and found["top1_agreement"] == 1.0, found
    # without its settings the same checkpoint exports with the defaults (and says so): other logits
    _rewrite(saved, lambda meta: meta.pop("recipe_settings"))
    with pytest.warns(UserWarning, match="written before checkpoints kept their recipe's settings"):
        dsptrain.export(saved, tmp_path / "defaults.onnx", "onnx")
    assert np.abs(onnxruntime_logits(tmp_path / "defaults.onnx", images, batch=16) - ours).max() > 0


def test_resuming_under_other_settings_names_the_key_and_value(tmp_path):
    _, path = _train(tmp_path, DEPTHWISE, "first")
    other = write_run(tmp_path, "fp8", DEPTHWISE + "train: {epochs: 1, batch_size: 16}\n", name="second")
    other.write_text(other.read_text().replace("recipe: fp8\n", FP8_OTHER))
    trainer = dsptrain.Trainer(dsptrain.load_run(other), progress=False, out_dir=tmp_path / "second")
    try:
        with pytest.raises(CheckpointError) as info:
            trainer.load(path)
    finally:
        trainer.close()
    assert str(info.value) == (
        f"{path}: recipe_settings.params.chunk_size: 64: the checkpoint was trained with this; this run's "
        f"recipe has 4 (resume with the run's original recipe settings)"
    )


def test_an_older_checkpoint_resumes_with_a_note_and_a_malformed_one_is_refused(tmp_path):
    run, path = _train(tmp_path, DEPTHWISE, "old")
    # 3 steps called one by one: the position a fit() would have saved them at (3 of 4 batches)
    _rewrite(path, lambda meta: (meta.pop("recipe_settings"), meta.update(batch_in_epoch=3)))
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "old")
    try:
        with pytest.warns(UserWarning, match=f"{path}: written before checkpoints kept their recipe's settings"):
            trainer.load(path)
        assert trainer.global_step == 3
        _rewrite(path, lambda meta: meta.update(recipe_settings="fp8"))
        with pytest.raises(CheckpointError, match="recipe_settings: 'fp8' is not a mapping"):
            trainer.load(path)
    finally:
        trainer.close()


def test_the_cli_refuses_an_export_it_cannot_write_in_one_line(tmp_path):
    """A NITI checkpoint trained with stochastic activation rounding: the export's graph rounds to
    nearest, so `dsptrain export` names the file, key and value and exits 2; a malformed field too."""
    run = dsptrain.load_run(
        write_run(
            tmp_path,
            "niti",
            "model: {name: lenet5}\ntrain: {epochs: 1, batch_size: 16}\n",
            name="sto",
        )
    )
    trainer = dsptrain.Trainer(run, progress=False, out_dir=tmp_path / "sto")
    try:
        data = synthetic("train", (28, 28, 1), count=16)
        trainer.step(data.images, data.labels)
        path = trainer.save()
    finally:
        trainer.close()
    _rewrite(path, lambda meta: meta["recipe_settings"]["tensors"]["activations"].update(rounding="psto"))
    result = cli("export", path, "--format", "onnx", "--out", tmp_path / "sto.onnx")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"dsptrain: error: {path}: recipe_settings.tensors.activations.rounding: 'psto': "
        f"the export writes niti with 'round' only"
    )
    _rewrite(path, lambda meta: meta.update(recipe_settings=[1, 2]))
    result = cli("export", path, "--format", "onnx", "--out", tmp_path / "bad.onnx")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"dsptrain: error: {path}: recipe_settings: [1, 2] is not the settings of recipe 'niti'"
    )
    assert not (tmp_path / "bad.onnx").exists()
