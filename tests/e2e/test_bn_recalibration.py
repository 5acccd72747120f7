"""train.bn_recalibration: before each epoch's evaluation the batch norms' running statistics
are re-estimated over N training batches with the weights as they are, and nothing else
changes (train/recalibrate.py)."""

from __future__ import annotations

import dsptrain
import numpy as np
import pytest
from dsptrain import data as datasets

LAYERS = """model:
  input_shape: [6, 6, 3]
  num_classes: 4
  layers:
    - {kind: batchnorm, name: bn, momentum: 1.0}
    - {kind: conv, name: conv, out: 4, kernel: 3, padding: 1}
    - {kind: batchnorm, name: bn2}
    - relu
    - flatten
    - {kind: linear, name: fc, out: 4}
"""


def _fit(tmp_path, recipe: str, batches: int, name: str):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (96, 6, 6, 3)).astype(np.uint8)
    labels = rng.integers(0, 4, 96)
    run = tmp_path / f"{name}.yaml"
    run.write_text(
        f"name: {name}\nrecipe: {recipe}\nbackend: cpu\n{LAYERS}"
        f"train: {{epochs: 1, batch_size: 16, seed: 0, bn_recalibration: {batches}}}\n"
    )
    trainer = dsptrain.Trainer(
        dsptrain.load_run(run),
        out_dir=tmp_path / name,
        progress=False,
        train_data=(images, labels),
        test_data=(images[:32], labels[:32]),
    )
    try:
        trainer.fit()
    finally:
        trainer.close()
    return trainer


@pytest.mark.parametrize("recipe", ["fp32", "niti"])
def test_recalibration_changes_only_the_running_statistics(tmp_path, recipe):
    plain, recalibrated = _fit(tmp_path, recipe, 0, "plain"), _fit(tmp_path, recipe, 3, "recal")
    statistics = {"bn.mean", "bn.var", "bn2.mean", "bn2.var"}
    assert set(plain.state) == set(recalibrated.state) >= statistics
    for name in plain.state:
        same = _same(plain.state[name], recalibrated.state[name])
        if name in statistics:
            assert not same, f"{name}: recalibration left it as training did"
        else:
            assert same, f"{name}: recalibration changed a weight"


def _same(a, b) -> bool:
    """Equal bit for bit: arrays, or NITI's int8 tensors with their exponents."""
    if hasattr(a, "q"):
        return a.e == b.e and np.array_equal(a.q, b.q)
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_recalibrated_statistics_are_those_of_the_recalibration_batch(tmp_path):
    """With momentum 1.0 a batch norm's running statistics are its last batch's: after
    recalibrating over one batch, those of the first batch in the recalibration order (seed
    + 1), here the pixels' own per-channel mean and unbiased variance (FP32 reads (p - 128) / 128)."""
    trainer = _fit(tmp_path, "fp32", 1, "one")
    first, _ = next(iter(datasets.batches(trainer.train_data, 16, seed=1, epoch=0)))
    x = (first.astype(np.float64) - 128) / 128
    mean, var = x.mean(axis=(0, 1, 2)), x.reshape(-1, 3).var(axis=0, ddof=1)
    assert np.allclose(trainer.state["bn.mean"], mean, rtol=1e-5, atol=1e-6)
    assert np.allclose(trainer.state["bn.var"], var, rtol=1e-5, atol=1e-6)


def test_the_key_is_checked(tmp_path):
    run = tmp_path / "bad.yaml"
    run.write_text(f"name: bad\nrecipe: fp32\n{LAYERS}train: {{bn_recalibration: -1}}\n")
    with pytest.raises(dsptrain.errors.UserError, match="bn_recalibration"):
        dsptrain.load_run(run)
