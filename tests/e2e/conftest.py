import dataclasses

import dsptrain
import pytest
from dsptrain.config import CONFIG_ROOT


@pytest.fixture
def small_run():
    """LeNet-5 + NITI on the first 2000 Fashion-MNIST images (Debian's dataset-fashion-mnist)."""

    def make(recipe="niti", epochs=2, train_limit=2000, **train):
        run = dsptrain.load_run(CONFIG_ROOT / "runs" / f"lenet-fmnist-{recipe}.yaml")
        return dataclasses.replace(
            run,
            data=dataclasses.replace(run.data, train_limit=train_limit, test_limit=1000),
            train=dataclasses.replace(run.train, epochs=epochs, **train),
        )

    return make
