"""Federated training on Flower: phones train their own data, the server averages.

    aggregate.py   exact FedAvg of integer (q, e) weights (pure NumPy)
    validate.py    checks on a client's update before it is averaged
    partition.py   IID, Dirichlet and label-shard splits of a dataset among clients
    records.py     a model as a Flower ArrayRecord and back; bytes on the wire
    settings.py    configs/runs/fl-*.yaml: a run config plus its `fl:` section
    client.py      the ClientApp (train / evaluate handlers around dsptrain.Trainer)
    strategy.py    FedAvg subclass: validation, integer aggregation, resumable rounds
    server.py      the ServerApp: rounds, server-side evaluation, a checkpoint per round
    simulate.py    the same apps in one process (tests, benches)
    deploy.py      a SuperLink and SuperNodes on 127.0.0.1, and `flwr run` against them

Flower itself is imported only by the modules that talk to it; aggregate.py,
validate.py and partition.py need NumPy only.
"""

from .aggregate import aggregate_state, aggregate_tensor
from .partition import PartitionSpec, client_dataset, split_indices
from .validate import UpdateError, check_update

__all__ = [
    "aggregate_state",
    "aggregate_tensor",
    "PartitionSpec",
    "client_dataset",
    "split_indices",
    "UpdateError",
    "check_update",
]
