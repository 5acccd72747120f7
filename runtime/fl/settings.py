"""Federated run configs (configs/runs/fl-*.yaml): a run config plus an `fl:` section.

The run part (recipe, model, data, train, backend, energy) says how each client trains
locally and how the server evaluates; `fl:` says how many clients, how the data is split
among them, and how the rounds go. Unknown keys and bad values are ConfigErrors naming
the file, the key and the value, like every other config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..config import RunConfig, build, read_yaml, run_from_mapping
from ..errors import ConfigError
from .aggregate import ROUNDINGS
from .partition import PartitionSpec
from .validate import MAX_EXAMPLES


@dataclass(frozen=True)
class PartitionConfig:
    kind: Literal["iid", "dirichlet", "shards"] = "dirichlet"
    alpha: float = 0.5  # dirichlet: concentration (small: skewed labels)
    shards_per_client: int = 2  # shards: label-sorted shards per client
    min_examples: int = 10  # dirichlet: redraw until every client has this many
    seed: int = 0

    def spec(self) -> PartitionSpec:
        return PartitionSpec(self.kind, self.alpha, self.shards_per_client, self.min_examples, self.seed)


@dataclass(frozen=True)
class FLConfig:
    clients: int = 10  # partitions of the training set (one per SuperNode)
    rounds: int = 10
    local_epochs: int = 1  # passes over its partition per round
    local_steps: int = 0  # > 0: exactly this many batches per round instead
    fraction_train: float = 1.0  # share of connected clients sampled each round
    min_train_clients: int = 2  # sampled at least, and valid updates needed to aggregate
    min_available_clients: int = 2  # connected before a round starts
    fraction_evaluate: float = 0.0  # share evaluating the global model on their partition
    round_timeout_s: float = 600.0  # a client slower than this is left out of the round
    max_exponent_shift: int = 4  # bits an update's exponent may move from the global's
    aggregation: Literal["fedavg", "clip", "trimmed_mean", "median"] = "fedavg"  # robust.py
    max_examples: int = 0  # an update claiming more examples is rejected (0: the training split's size)
    max_weight: float = 1.0  # the largest share of the aggregate one client may carry
    clip_norm: float = 0.0  # clip: bound on an update's L2 change (0: the round's median)
    trim: float = 0.2  # trimmed_mean: share dropped at each end, per coordinate
    resume: bool = True  # continue from the server checkpoint when there is one
    partition: PartitionConfig = field(default_factory=PartitionConfig)


@dataclass(frozen=True)
class FLRun:
    run: RunConfig
    fl: FLConfig
    source: str

    @property
    def out_dir(self) -> Path:
        return Path(self.run.out_dir or Path("runs") / self.run.name)

    @property
    def integer(self) -> bool:
        """Integer weights with power-of-two exponents: aggregated exactly (aggregate.py)."""
        w = self.run.recipe.tensors.weights
        return w.format == "int" and w.scale == "pow2"


def load_fl_run(path: str | Path, **overrides) -> FLRun:
    """A federated run config; `overrides` replace keys of the `fl:` section."""
    path = Path(path)
    data = read_yaml(path)
    section = data.pop("fl", None)
    if section is None:
        raise ConfigError(path, "fl", "is required in a federated run config (clients, rounds, partition, ...)")
    if not isinstance(section, dict):
        raise ConfigError(path, "fl", f"expected a mapping, got {section!r}")
    section = {**section, **overrides}
    run = run_from_mapping(data, path)
    fl = build(FLConfig, section, path, "fl")
    _check(fl, run, path, given=set(section))
    return FLRun(run, fl, str(path))


def _check(fl: FLConfig, run: RunConfig, source, given: set = frozenset()) -> None:
    def need(ok, key, value, why):
        if not ok:
            raise ConfigError(source, f"fl.{key}", f"{value!r} {why}")

    need(1 <= fl.clients <= 100_000, "clients", fl.clients, "must be in 1..100000")
    need(1 <= fl.rounds <= 100_000, "rounds", fl.rounds, "must be in 1..100000")
    need(1 <= fl.local_epochs <= 1000, "local_epochs", fl.local_epochs, "must be in 1..1000")
    need(0 <= fl.local_steps <= 1_000_000, "local_steps", fl.local_steps, "must be in 0..1000000 (0: use local_epochs)")
    need(0.0 < fl.fraction_train <= 1.0, "fraction_train", fl.fraction_train, "must be in (0, 1]")
    need(0.0 <= fl.fraction_evaluate <= 1.0, "fraction_evaluate", fl.fraction_evaluate, "must be in [0, 1]")
    need(
        1 <= fl.min_train_clients <= fl.clients,
        "min_train_clients",
        fl.min_train_clients,
        f"must be in 1..fl.clients ({fl.clients})",
    )
    need(
        fl.min_train_clients <= fl.min_available_clients <= fl.clients,
        "min_available_clients",
        fl.min_available_clients,
        f"must be in min_train_clients..clients ({fl.min_train_clients}..{fl.clients})",
    )
    need(0.0 < fl.round_timeout_s <= 86_400, "round_timeout_s", fl.round_timeout_s, "must be in (0, 86400] seconds")
    need(0 <= fl.max_exponent_shift <= 32, "max_exponent_shift", fl.max_exponent_shift, "must be in 0..32")
    need(
        0 <= fl.max_examples <= MAX_EXAMPLES,
        "max_examples",
        fl.max_examples,
        f"must be in 0..{MAX_EXAMPLES} (0: the training split's size)",
    )
    need(0.0 < fl.max_weight <= 1.0, "max_weight", fl.max_weight, "must be in (0, 1]")
    need(0.0 <= fl.clip_norm <= 1e30, "clip_norm", fl.clip_norm, "must be in [0, 1e30] (0: the round's median)")
    need(0.0 <= fl.trim < 0.5, "trim", fl.trim, "must be in [0, 0.5)")
    if fl.aggregation != "clip" and fl.clip_norm:
        raise ConfigError(source, "fl.clip_norm", f"{fl.clip_norm!r} is read only with fl.aggregation: clip")
    if fl.aggregation != "trimmed_mean" and "trim" in given:
        raise ConfigError(source, "fl.trim", f"{fl.trim!r} is read only with fl.aggregation: trimmed_mean")
    p = fl.partition
    need(0.0 < p.alpha <= 1e6, "partition.alpha", p.alpha, "must be > 0")
    need(1 <= p.shards_per_client <= 1000, "partition.shards_per_client", p.shards_per_client, "must be in 1..1000")
    need(1 <= p.min_examples <= 1_000_000, "partition.min_examples", p.min_examples, "must be >= 1")
    weights = run.recipe.tensors.weights
    if weights.format == "int" and weights.scale != "pow2":
        raise ConfigError(
            source,
            "recipe",
            f"{run.recipe.name!r} has int weights with {weights.scale!r} scales; "
            "federated runs take power-of-two (pow2) integer weights or float weights",
        )
    if weights.format == "int" and weights.rounding not in ROUNDINGS:
        raise ConfigError(
            source,
            "recipe",
            f"{run.recipe.name!r} rounds weights with {weights.rounding!r}; "
            f"the server's exact aggregation rounds with {' or '.join(ROUNDINGS)}",
        )
