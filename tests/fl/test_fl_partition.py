"""Client partitions (dsptrain.fl.partition): complete, disjoint, deterministic, skewed as asked."""

import numpy as np
import pytest
from dsptrain.data import Dataset
from dsptrain.errors import DataError
from dsptrain.fl.partition import PartitionSpec, client_dataset, label_histogram, split_indices


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """6000 labels of 10 classes, the same every run."""
    return np.random.default_rng(3).integers(0, 10, 6000)


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "shards"])
def test_every_example_goes_to_exactly_one_client(labels, kind):
    parts = split_indices(labels, 10, PartitionSpec(kind=kind))
    joined = np.concatenate(parts)
    assert len(parts) == 10 and len(joined) == len(labels)
    assert np.array_equal(np.sort(joined), np.arange(len(labels)))
    again = split_indices(labels, 10, PartitionSpec(kind=kind))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = split_indices(labels, 10, PartitionSpec(kind=kind, seed=1))
    assert any(not np.array_equal(a, b) for a, b in zip(parts, other))


def test_iid_parts_are_balanced(labels):
    hist = label_histogram(labels, split_indices(labels, 10, PartitionSpec(kind="iid")))
    assert hist.sum(axis=1).max() - hist.sum(axis=1).min() <= 1
    assert (hist > 20).all()  # every client sees every class


def test_dirichlet_half_is_skewed_and_large_alpha_is_not(labels):
    def dominant_share(alpha):
        hist = label_histogram(labels, split_indices(labels, 10, PartitionSpec(kind="dirichlet", alpha=alpha)))
        return float(np.mean(hist.max(axis=1) / hist.sum(axis=1)))

    skewed, flat = dominant_share(0.5), dominant_share(1000.0)
    assert skewed > 0.3 and flat < 0.15, (skewed, flat)


def test_dirichlet_gives_every_client_its_minimum(labels):
    parts = split_indices(labels, 20, PartitionSpec(kind="dirichlet", alpha=0.1, min_examples=30))
    assert min(len(p) for p in parts) >= 30


def test_two_shards_per_client_means_at_most_four_classes(labels):
    hist = label_histogram(labels, split_indices(labels, 10, PartitionSpec(kind="shards", shards_per_client=2)))
    assert ((hist > 0).sum(axis=1) <= 4).all()
    top_two = np.sort(hist, axis=1)[:, -2:].sum(axis=1) / hist.sum(axis=1)
    assert top_two.mean() >= 0.8, top_two  # shards cut across class borders only at the edges


def test_client_dataset_and_bad_requests(labels):
    data = Dataset(np.zeros((len(labels), 2, 2, 1), np.uint8), labels, "toy")
    part = client_dataset(data, 4, 3, PartitionSpec(kind="iid"))
    assert len(part) == 1500 and "iid 4/4" in part.name
    with pytest.raises(DataError, match="partition id 4 is outside 0..3"):
        client_dataset(data, 4, 4, PartitionSpec(kind="iid"))
    with pytest.raises(DataError, match="7000 clients for 6000 examples"):
        split_indices(labels, 7000, PartitionSpec(kind="iid"))
    with pytest.raises(DataError, match="fewer than 500"):
        split_indices(labels, 10, PartitionSpec(kind="dirichlet", alpha=0.01, min_examples=500))
