"""A run that diverges: a forced NaN stops it (exit 3, the last good checkpoint named and
loadable), or is undone under skip_batch / halve_lr; integer saturation counts steps."""

import json

import dsptrain
import numpy as np
import pytest
import yaml
from dsptrain.cli import main
from dsptrain.execute.step import Step
from dsptrain.numerics import QTensor
from dsptrain.train.divergence import Watch

from .helpers import class_images

POISONED_STEP = 5


@pytest.fixture
def poisoned(tmp_path, monkeypatch):
    """An FP32 run on arrays whose step 5 leaves a NaN in fc1's weights."""
    monkeypatch.chdir(tmp_path)
    images, labels = class_images(np.random.default_rng(2), 96, shape=(28, 28, 1))
    np.savez(tmp_path / "d.npz", x=images, y=labels)
    real = Step.train

    def train(self, state, images, labels, step, *rest, **kw):
        state, stats = real(self, state, images, labels, step, *rest, **kw)
        if step == POISONED_STEP:
            weight = next(name for name in state if name.endswith(".w"))
            state[weight] = state[weight].copy()
            state[weight].flat[0] = np.nan
        return state, stats

    monkeypatch.setattr(Step, "train", train)

    def write(**train_keys):
        path = tmp_path / "run.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "name": "nan",
                    "recipe": "fp32",
                    "backend": "cpu",
                    "model": {"name": "lenet5", "num_classes": 3},
                    "data": {"npz": "d.npz", "test_fraction": 0.25},
                    "train": {"epochs": 1, "batch_size": 8, "checkpoint_every_steps": 2, **train_keys},
                }
            )
        )
        return path

    return write


def test_forced_nan_stops_with_status_3_and_the_last_good_checkpoint_loads(poisoned, tmp_path, capsys):
    run = poisoned()
    assert main(["train", str(run), "--quiet", "--out", "out"]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dsptrain: error: ") and f"step {POISONED_STEP}: training diverged" in err
    assert "holds 1 non-finite value" in err and "checkpoint.npz (step 4)" in err
    trainer = dsptrain.Trainer(dsptrain.load_run(run), out_dir="out", progress=False)
    trainer.load()
    assert trainer.global_step == 4 and all(np.isfinite(v).all() for v in trainer.state.values())
    trainer.close()
    assert main(["export", "out", "--format", "npz", "--out", "model.npz"]) == 0
    assert main(["train", str(run), "--quiet", "--out", "out", "--resume"]) == 3  # the same step diverges again


@pytest.mark.parametrize("policy", ["skip_batch", "halve_lr"])
def test_skip_batch_and_halve_lr_undo_the_step_and_go_on(poisoned, tmp_path, policy):
    assert main(["train", str(poisoned(on_divergence=policy)), "--quiet", "--out", "out"]) == 0
    state, meta = dsptrain.checkpoint.load(tmp_path / "out" / "checkpoint.npz")
    assert all(np.isfinite(v).all() for v in state.values())
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    diverged = [r["step"] for r in records if r.get("diverged")]
    assert diverged == [POISONED_STEP] and "non-finite" in records[POISONED_STEP]["diverged"]
    assert meta["divergence"][1] == (1 if policy == "halve_lr" else 0)  # halvings of the learning rate
    assert meta["global_step"] == 9


def test_integer_saturation_diverges_after_k_steps():
    watch = Watch("stop", saturation_steps=3)
    calm = {"fc.w": QTensor(np.array([1, -3, 127, 5], np.int8), -6)}
    pinned = {"fc.w": QTensor(np.array([127, -128, 127, 5], np.int8), -6)}
    assert watch.problem(1.0, calm) is None
    assert watch.problem(1.0, pinned) is None and watch.problem(1.0, pinned) is None
    assert watch.problem(1.0, calm) is None  # a calm step resets the count
    for _ in range(2):
        assert watch.problem(1.0, pinned) is None
    problem = watch.problem(1.0, pinned)
    assert problem == "fc.w has 75% of its int8 values at the limits for 3 steps (train.saturation_steps 3)"
    with pytest.raises(dsptrain.errors.DivergedError, match="training diverged: fc.w has 75%"):
        watch.act(problem, "run.yaml: epoch 1, step 9", "no checkpoint was written before it")
    assert Watch().problem(float("nan"), calm) == "the loss is nan"


def test_a_checkpoint_with_non_finite_weights_is_never_written(tmp_path):
    images, labels = class_images(np.random.default_rng(3), 16, shape=(28, 28, 1))
    run = dsptrain.load_run(dsptrain.config.CONFIG_ROOT / "runs" / "lenet-fmnist-fp32.yaml")
    trainer = dsptrain.Trainer(run, backend="cpu", out_dir=tmp_path, progress=False, train_data=(images, labels))
    trainer.step(images[:8], labels[:8])
    good = trainer.save()
    before = good.read_bytes()
    trainer.state["fc1.w"] = trainer.state["fc1.w"].copy()
    trainer.state["fc1.w"][0, 0] = np.inf
    with pytest.raises(dsptrain.errors.DivergedError, match=r"checkpoint\.npz: not written: fc1\.w holds non-finite"):
        trainer.save()
    assert good.read_bytes() == before
    trainer.close()
