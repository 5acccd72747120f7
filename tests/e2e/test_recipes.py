"""Every emulated recipe trains LeNet-5 well above chance on a slice of Fashion-MNIST,
and keeps the state its paper describes."""
import dataclasses

import numpy as np
import pytest

import dsptrain
from dsptrain.numerics import QTensor


def fit(small_run, tmp_path, recipe, train_limit=2000):
    run = small_run(recipe, epochs=1, train_limit=train_limit)
    run = dataclasses.replace(run, data=dataclasses.replace(run.data, test_limit=500))
    trainer = dsptrain.Trainer(run, backend="ref", out_dir=tmp_path, progress=False)
    return trainer, trainer.fit()[-1]


@pytest.mark.parametrize("recipe", ["octo", "afp", "mls", "wageubn-bn"])
def test_recipe_learns_well_above_chance(small_run, tmp_path, recipe):
    trainer, last = fit(small_run, tmp_path, recipe)
    assert last["test_accuracy"] > 0.5, last          # chance is 0.1
    assert last["train_loss"] < 2.0, last


def test_fp8_learns_and_keeps_fp16_weights(small_run, tmp_path):
    trainer, last = fit(small_run, tmp_path, "fp8", train_limit=1280)   # FP16 emulation is slow: fewer steps
    assert last["test_accuracy"] > 0.45, last
    w = trainer.state["conv2.w"]
    assert w.dtype == np.float16 and np.all(np.isfinite(w))


def test_wageubn_weights_stay_on_the_24_bit_grid(small_run, tmp_path):
    trainer = dsptrain.Trainer(small_run("wageubn"), backend="ref", out_dir=tmp_path, progress=False)
    before = trainer.state["fc1.w"]
    images, labels = trainer.train_data.images[:64], trainer.train_data.labels[:64]
    for _ in range(3):
        stats = trainer.step(images, labels)
    after = trainer.state["fc1.w"]
    assert isinstance(after, QTensor) and after.q.dtype == np.int32 and after.e == before.e
    assert np.abs(after.q).max() < 2**23 and not np.array_equal(after.q, before.q)
    assert np.isfinite(stats.loss)


def test_afp_records_a_width_per_layer(small_run, tmp_path):
    trainer = dsptrain.Trainer(small_run("afp"), backend="ref", out_dir=tmp_path, progress=False)
    images, labels = trainer.train_data.images[:64], trainer.train_data.labels[:64]
    trainer.step(images, labels)
    widths = {name: int(v[0]) for name, v in trainer.state.items() if name.endswith(".afp")}
    assert set(widths) == {f"{n}.afp" for n in ("conv1", "conv2", "fc1", "fc2", "fc3")}
    assert set(widths.values()) <= {8, 16}
