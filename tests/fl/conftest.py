"""Small federated configs: LeNet-5 + NITI on a few thousand Fashion-MNIST images."""

import pytest
import yaml


def write_config(
    path, name="fl-test", recipe="niti", clients=3, rounds=2, local_steps=20, train_limit=3000, test_limit=1000, **fl
):
    section = {
        "clients": clients,
        "rounds": rounds,
        "local_steps": local_steps,
        "min_train_clients": 2,
        "min_available_clients": min(clients, 3),
        "partition": {"kind": "iid", "seed": 0},
    }
    section.update(fl)
    config = {
        "name": name,
        "recipe": recipe,
        "model": {"name": "lenet5"},
        "data": {"dataset": "fashion-mnist", "train_limit": train_limit, "test_limit": test_limit},
        "train": {"batch_size": 32, "seed": 0},
        "backend": "auto",
        "energy": "estimate",
        "fl": section,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def fl_config(tmp_path):
    """`fl_config(**settings)` writes a config under tmp_path and returns its path."""
    counter = iter(range(1000))

    def make(**settings):
        return write_config(tmp_path / f"fl-{next(counter)}.yaml", **settings)

    return make
