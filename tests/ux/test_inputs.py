"""The Python API's input contract: uint8 NHWC, floats in [0, 1] converted, the rest refused."""

import dsptrain
import numpy as np
import pytest
from dsptrain.data import as_images, as_labels
from dsptrain.errors import ShapeError, UserError


@pytest.fixture
def trainer(run_file, tmp_path):
    trainer = dsptrain.Trainer(dsptrain.load_run(run_file()), out_dir=tmp_path / "out", progress=False)
    yield trainer
    trainer.close()


def test_floats_in_0_1_are_the_same_pixels_as_uint8(trainer):
    images, labels = trainer.train_data[:16]
    assert images.dtype == np.uint8 and images.shape == (16, 28, 28, 1) and labels.dtype == np.int64
    as_uint8 = trainer.predict(images)
    for floats in (images / 255.0, (images / 255.0).astype(np.float32), images[..., 0] / 255.0):
        np.testing.assert_array_equal(trainer.predict(floats), as_uint8)
    np.testing.assert_array_equal(trainer.predict(images.astype(np.int64)), as_uint8)
    assert np.abs(as_uint8).sum() > 0


def test_a_float_step_trains_exactly_as_the_uint8_step(run_file, tmp_path):
    a = dsptrain.Trainer(dsptrain.load_run(run_file()), out_dir=tmp_path / "a", progress=False)
    b = dsptrain.Trainer(dsptrain.load_run(run_file()), out_dir=tmp_path / "b", progress=False)
    images, labels = a.train_data[:32]
    assert a.step(images, labels).loss == b.step(images / 255.0, labels.tolist()).loss
    for name in a.state:
        np.testing.assert_array_equal(
            np.asarray(getattr(a.state[name], "q", a.state[name])),
            np.asarray(getattr(b.state[name], "q", b.state[name])),
        )


@pytest.mark.parametrize(
    "images, says",
    [
        (np.full((2, 28, 28, 1), 128.0), r"float64 values must be in \[0, 1\] .* found 128..128"),
        (np.full((2, 28, 28, 1), -0.5, np.float32), r"found -0.5..-0.5"),
        (np.full((2, 28, 28, 1), np.nan), "NaN"),
        (np.full((2, 28, 28, 1), 300, np.int32), r"int32 values must be in 0..255, found 300..300"),
        (np.zeros((2, 1, 28, 28), np.uint8), r"shape \(2, 1, 28, 28\) is not \(N, 28, 28, 1\), NHWC"),
        (np.zeros((2, 28, 28, 1), np.complex64), "neither uint8"),
    ],
)
def test_other_images_are_refused_saying_what_was_found(images, says):
    with pytest.raises(UserError, match=says):
        as_images(images, (28, 28, 1))


def test_labels_are_checked(trainer):
    images, _ = trainer.train_data[:4]
    with pytest.raises(ShapeError, match=r"labels: shape \(3,\) does not match 4 images"):
        trainer.step(images, np.zeros(3, np.int64))
    with pytest.raises(UserError, match=r"0..9, found 0..10"):
        as_labels([0, 10], 2, 10)
    with pytest.raises(UserError, match="dtype float64"):
        as_labels(np.zeros(2), 2, 10)


def test_batches_by_slicing_and_iteration(trainer):
    data = trainer.train_data
    assert len(data) == 160
    first, labels = data[:64]
    assert first.shape == (64, 28, 28, 1) and labels.shape == (64,)
    sizes = [len(labels) for _, labels in data.batches(64)]
    assert sizes == [64, 64, 32]
    np.testing.assert_array_equal(next(iter(data.batches(64)))[0], first)  # unshuffled by default
    shuffled = next(iter(data.batches(64, seed=0)))[1]
    assert sorted(np.concatenate([labels for _, labels in data.batches(64, seed=0)]).tolist()) == sorted(
        data.labels.tolist()
    )
    assert not np.array_equal(shuffled, labels)
