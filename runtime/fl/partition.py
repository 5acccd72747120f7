"""Splitting a dataset among federated clients: IID, Dirichlet label skew, label shards.

FEMNIST (LEAF; Caldas et al. 2018) is non-IID because each client is one writer; it
is not available offline, so these splits make Fashion-MNIST non-IID the two ways the
literature does:

- `dirichlet`: for every class, the share each client gets is drawn from
  Dirichlet(alpha) (Hsu et al., "Measuring the Effects of Non-Identical Data
  Distribution for Federated Visual Classification", 2019). alpha 0.5 gives each
  client a few dominant classes; large alpha tends to IID.
- `shards`: sort by label, cut into clients x shards_per_client shards, give each client
  `shards_per_client` of them at random (McMahan et al., AISTATS 2017: 2 shards per
  client, so most clients see only two classes).
- `iid`: a seeded shuffle cut into equal parts.

Every split is a pure function of (labels, settings, seed): each SuperNode computes its
own partition from its partition id, and no index list has to travel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import Dataset
from ..errors import DataError

KINDS = ("iid", "dirichlet", "shards")
_DIRICHLET_TRIES = 100  # redraws until every client has min_examples (bounded)


@dataclass(frozen=True)
class PartitionSpec:
    kind: str = "dirichlet"
    alpha: float = 0.5
    shards_per_client: int = 2
    min_examples: int = 10
    seed: int = 0


def split_indices(labels: np.ndarray, clients: int, spec: PartitionSpec) -> list[np.ndarray]:
    """Index arrays, one per client, that together cover `labels` once each (sorted within a client)."""
    labels = np.asarray(labels)
    if clients < 1:
        raise DataError(f"partition: {clients} clients; need at least 1")
    if clients > len(labels):
        raise DataError(f"partition: {clients} clients for {len(labels)} examples; need at least one each")
    rng = np.random.default_rng([spec.seed, clients])
    if spec.kind == "iid":
        parts = np.array_split(rng.permutation(len(labels)), clients)
    elif spec.kind == "dirichlet":
        parts = _dirichlet(labels, clients, spec, rng)
    elif spec.kind == "shards":
        parts = _shards(labels, clients, spec.shards_per_client, rng)
    else:
        raise DataError(f"partition: kind {spec.kind!r} is not one of {', '.join(KINDS)}")
    return [np.sort(p) for p in parts]


def _dirichlet(labels, clients, spec, rng) -> list[np.ndarray]:
    classes = np.unique(labels)
    floor = min(spec.min_examples, len(labels) // clients)
    for _ in range(_DIRICHLET_TRIES):
        parts = [[] for _ in range(clients)]
        for c in classes:
            members = rng.permutation(np.flatnonzero(labels == c))
            shares = rng.dirichlet(np.full(clients, spec.alpha))
            cuts = (np.cumsum(shares)[:-1] * len(members)).astype(int)
            for client, piece in enumerate(np.split(members, cuts)):
                parts[client].append(piece)
        parts = [np.concatenate(p) for p in parts]
        if min(len(p) for p in parts) >= floor:
            return parts
    raise DataError(
        f"partition: Dirichlet alpha {spec.alpha} left a client with fewer than {floor} "
        f"examples in {_DIRICHLET_TRIES} draws; raise alpha or lower fl.clients"
    )


def _shards(labels, clients, per_client, rng) -> list[np.ndarray]:
    count = clients * per_client
    if count > len(labels):
        raise DataError(f"partition: {clients} clients x {per_client} shards is more than {len(labels)} examples")
    by_label = np.argsort(labels, kind="stable")
    shards = np.array_split(by_label, count)
    order = rng.permutation(count)
    return [np.concatenate([shards[s] for s in order[i * per_client : (i + 1) * per_client]]) for i in range(clients)]


def client_dataset(data: Dataset, clients: int, partition_id: int, spec: PartitionSpec) -> Dataset:
    """The part of `data` that client `partition_id` (0-based) trains on."""
    if not 0 <= partition_id < clients:
        raise DataError(f"partition: partition id {partition_id} is outside 0..{clients - 1}")
    index = split_indices(data.labels, clients, spec)[partition_id]
    return Dataset(data.images[index], data.labels[index], f"{data.name}[{spec.kind} {partition_id + 1}/{clients}]")


def label_histogram(labels: np.ndarray, parts: list[np.ndarray], classes: int = 10) -> np.ndarray:
    """(clients, classes) counts: how skewed a split is."""
    return np.stack([np.bincount(labels[p], minlength=classes) for p in parts])
