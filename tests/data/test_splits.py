"""Stratified seeded splits, arrays, npz/npy files and normalisation tables."""

import numpy as np
import pytest
from dsptrain.data import Dataset, Normalize, split_off
from dsptrain.data.arrays import from_arrays, read_npy, read_npz
from dsptrain.errors import DataError


def test_split_is_stratified_seeded_and_keeps_singletons():
    labels = np.array([0] * 50 + [1] * 30 + [2] * 1)
    data = Dataset(np.zeros((81, 2, 2, 1), np.uint8), labels)
    train, val = split_off(data, 0.2, seed=7)
    assert np.bincount(val.labels, minlength=3).tolist() == [10, 6, 0]  # the one-sample class stays in train
    assert len(train) + len(val) == 81
    again = split_off(data, 0.2, seed=7)[1]
    np.testing.assert_array_equal(val.labels, again.labels)
    data.images[:, 0, 0, 0] = np.arange(81)  # each sample tells which it is
    picked = lambda seed: sorted(split_off(data, 0.2, seed)[1].images[:, 0, 0, 0])
    assert picked(7) == picked(7) and picked(7) != picked(8)


def test_split_refuses_an_empty_part():
    data = Dataset(np.zeros((3, 2, 2, 1), np.uint8), np.arange(3))
    with pytest.raises(DataError, match="val_fraction 0.2 of 3 samples holds out none"):
        split_off(data, 0.2, seed=0)


def test_npz_and_npy_read_the_same_arrays(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (6, 5, 5, 3), dtype=np.uint8), np.arange(6) % 2
    np.savez(tmp_path / "d.npz", images=x, labels=y)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    a, b = read_npz(tmp_path / "d.npz", "images", "labels")
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(read_npy(tmp_path / "x.npy"), x)
    with pytest.raises(DataError, match=r"d\.npz: data\.x: no array 'pixels' \(the file has images, labels\)"):
        read_npz(tmp_path / "d.npz", "pixels", "labels")
    (tmp_path / "bad.npz").write_bytes(b"PK not a zip")
    with pytest.raises(DataError, match=r"bad\.npz: not an \.npz file"):
        read_npz(tmp_path / "bad.npz", "x", "y")


def test_arrays_follow_the_input_contract():
    x = np.random.default_rng(1).random((4, 5, 5))  # floats in [0, 1], one channel as (N, H, W)
    data = from_arrays(x, [0, 1, 0, 1], (5, 5, 1), 2, origin="mine.npz")
    assert data.images.dtype == np.uint8 and data.images.shape == (4, 5, 5, 1)
    with pytest.raises(DataError, match=r"mine\.npz: images: float64 values must be in \[0, 1\]"):
        from_arrays(x * 2 - 1, [0, 1, 0, 1], (5, 5, 1), 2, origin="mine.npz")
    with pytest.raises(DataError, match=r"mine\.npz: labels: values must be in 0\.\.1, found 0\.\.2"):
        from_arrays(x, [0, 1, 2, 1], (5, 5, 1), 2, origin="mine.npz")


def test_normalize_tables():
    norm = Normalize(mean=(0.5,), std=(0.25,))
    table = norm.float_table(1)
    np.testing.assert_allclose(table[0], (np.arange(256) / 255 - 0.5) / 0.25, rtol=1e-6)
    q, e = norm.int8_table(1)
    values = (np.arange(256) / 255 - 0.5) / 0.25  # -2 .. 2 = 2**1: exponent 1 - 7
    assert e == -6 and np.abs(q[0] * 2.0**e - values).max() <= 2.0**e + 1e-12  # one step where clipped
    rgb = Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    assert rgb.problem(3) is None and rgb.problem(1)[0] == "mean"
    assert Normalize(std=(0.0,)).problem(1)[0] == "std"


def test_normalize_as_the_default_mapping_is_bit_exact():
    """mean = std = 128/255 is the mapping without normalisation: (p - 128) / 128, NITI's exponent -7."""
    from dsptrain.algorithms import fp32, niti

    pixels = np.arange(256, dtype=np.uint8).reshape(4, 8, 8, 1)
    same = Normalize(mean=(128 / 255,), std=(128 / 255,))
    np.testing.assert_array_equal(fp32.prepare_input(pixels, same), fp32.prepare_input(pixels))
    q, default = niti.prepare_input(pixels, same), niti.prepare_input(pixels)
    assert q.e == default.e == -7
    np.testing.assert_array_equal(q.q, default.q)
