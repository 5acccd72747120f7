"""Datasets: IDX parsing, Fashion-MNIST discovery, clear errors for bad files."""

import gzip
import struct

import numpy as np
import pytest
from dsptrain import data
from dsptrain.errors import DataError


def idx_bytes(array, type_code=0x08):
    return bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_fmnist(directory, count=5, gz=True, corrupt=None):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files = {
        "train-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)),
        "train-labels-idx1-ubyte": idx_bytes(rng.integers(0, 10, count, dtype=np.uint8)),
    }
    for name, raw in files.items():
        if corrupt == name:
            raw = raw[:-3]
        (directory / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(raw) if gz else raw)


@pytest.mark.parametrize("gz", [True, False])
def test_reads_idx_gzip_or_raw(tmp_path, gz):
    write_fmnist(tmp_path, gz=gz)
    ds = data.load_fashion_mnist("train", tmp_path)
    assert ds.images.shape == (5, 28, 28, 1) and ds.images.dtype == np.uint8
    assert ds.labels.dtype == np.int64 and len(ds) == 5


def test_truncated_file_names_path_and_sizes(tmp_path):
    write_fmnist(tmp_path, corrupt="train-images-idx3-ubyte")
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: IDX shape \(5, 28, 28\) needs 3936 bytes"):
        data.load_fashion_mnist("train", tmp_path)


def test_not_idx(tmp_path):
    (tmp_path / "f").write_bytes(b"hello world")
    with pytest.raises(DataError, match="not an IDX file"):
        data.read_idx(tmp_path / "f")


def test_missing_directory_mentions_debian_package(monkeypatch, tmp_path):
    monkeypatch.setattr(data.fashion_mnist, "FASHION_MNIST_DIR", tmp_path / "nowhere")
    with pytest.raises(DataError, match="dataset-fashion-mnist"):
        data.load_fashion_mnist("train")


def test_missing_file_is_named(tmp_path):
    write_fmnist(tmp_path)
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte"):
        data.load_fashion_mnist("test", tmp_path)


def test_cifar_records(tmp_path):
    rng = np.random.default_rng(0)
    rec = np.concatenate([rng.integers(0, 10, (3, 1)), rng.integers(0, 256, (3, 3072))], axis=1).astype(np.uint8)
    (tmp_path / "test_batch.bin").write_bytes(rec.tobytes())
    ds = data.load_cifar10("test", tmp_path)
    assert ds.images.shape == (3, 32, 32, 3)
    np.testing.assert_array_equal(ds.images[1, :, :, 2], rec[1, 1 + 2048 :].reshape(32, 32))  # CHW -> HWC
    (tmp_path / "test_batch.bin").write_bytes(rec.tobytes()[:-1])
    with pytest.raises(DataError, match="whole number of 3073-byte records"):
        data.load_cifar10("test", tmp_path)


def test_batches_are_seeded_and_resumable():
    ds = data.synthetic("train", count=100)
    first = [labels for _, labels in data.batches(ds, 16, seed=3, epoch=1)]
    again = [labels for _, labels in data.batches(ds, 16, seed=3, epoch=1)]
    other = [labels for _, labels in data.batches(ds, 16, seed=3, epoch=2)]
    assert all((a == b).all() for a, b in zip(first, again))
    assert not all((a == b).all() for a, b in zip(first, other))
    resumed = [labels for _, labels in data.batches(ds, 16, seed=3, epoch=1, start=2)]
    assert len(resumed) == len(first) - 2 and all((a == b).all() for a, b in zip(first[2:], resumed))
    assert len(first[-1]) == 100 % 16
