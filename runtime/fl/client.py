"""The Flower ClientApp: a phone that trains the global model on its own partition.

Flower's Message API (flwr >= 1.21): the server sends the global weights in an
ArrayRecord; the `train` handler loads them into a `dsptrain.Trainer`, trains the
configured local epochs or steps with the run's recipe and backend, and replies with
the new weights, the number of examples and metrics (loss, accuracy, time and energy
per batch, bytes uploaded). `evaluate` scores the global model on the client's part of
the test split. The Trainer is used through its public API only: `state`, `epoch`,
`global_step`, `step()`, `evaluate()`.

Which partition a node holds comes from its node config (`partition-id`,
`num-partitions`: set by the simulation engine, or `flower-supernode --node-config`);
which run from the app's run config (`config`: an fl-*.yaml path).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .. import data as datasets
from ..config import CONFIG_ROOT
from ..errors import UserError
from .partition import client_dataset
from .records import from_record, model_names, record_bytes, to_record
from .settings import FLRun, load_fl_run

WEIGHT_KEY = "num-examples"  # the metric FedAvg weights by (Flower's default name)


def resolve_config(value: str) -> Path:
    """A config path as given, else relative to the project (the checkout holding configs/)."""
    path = Path(value)
    if path.is_absolute() or path.exists():
        return path
    return CONFIG_ROOT.parent / path


class ClientSession:
    """One client: its Trainer, its partition of the data, and the model's tensor names."""

    def __init__(self, flrun: FLRun, partition_id: int, num_partitions: int):
        from ..train import Trainer

        if num_partitions != flrun.fl.clients:
            raise UserError(
                f"{flrun.source}: fl.clients is {flrun.fl.clients} but the node config says "
                f"num-partitions={num_partitions}"
            )
        self.flrun, self.partition_id = flrun, partition_id
        run = flrun.run
        # each client shuffles and rounds with its own seed; the weights come from the server
        run = dataclasses.replace(run, train=dataclasses.replace(run.train, seed=run.train.seed + 1 + partition_id))
        self.trainer = Trainer(run, progress=False, out_dir=flrun.out_dir / f"client-{partition_id}")
        spec = flrun.fl.partition.spec()
        self.train_data = client_dataset(self.trainer.train_data, flrun.fl.clients, partition_id, spec)
        self.test_data = client_dataset(self.trainer.test_data, flrun.fl.clients, partition_id, spec)
        self.names = model_names(self.trainer.model, self.trainer.state)
        self.fresh_state = dict(self.trainer.state)  # optimizer state starts afresh each round

    def load_global(self, arrays: ArrayRecord) -> None:
        state = from_record(arrays, "global model")
        missing = [n for n in self.names if n not in state]
        if missing:
            raise UserError(f"global model lacks {', '.join(missing)}")
        self.trainer.state = {**self.fresh_state, **{n: state[n] for n in self.names}}

    def steps_per_round(self) -> int:
        fl = self.flrun.fl
        return fl.local_steps or fl.local_epochs * datasets.batch_count(
            self.train_data, self.flrun.run.train.batch_size
        )

    def train(self, arrays: ArrayRecord, server_round: int) -> tuple[ArrayRecord, MetricRecord]:
        self.load_global(arrays)
        bs = self.flrun.run.train.batch_size
        steps = self.steps_per_round()
        per_epoch = datasets.batch_count(self.train_data, bs)
        # Round r continues where round r - 1 stopped in the client's own data, as one
        # uninterrupted local run would: the batch order (shuffled by epoch) and the
        # recipe's schedule (NITI's mu, FP32's learning rate) follow the client's epochs
        # over its partition, not the round number.
        position = (server_round - 1) * steps
        epoch, start = divmod(position, per_epoch)
        trainer = self.trainer
        trainer.global_step = position
        # Adaptive rescaling starts afresh each round, as in a new process: a SuperNode may
        # run every round in a new ClientApp process, and all engines must train alike.
        trainer.rescale.restore({})
        done, seen, loss_sum, correct, seconds, joules, metered = 0, 0, 0.0, 0, 0.0, 0.0, 0
        while done < steps:
            trainer.epoch = epoch
            for images, labels in datasets.batches(self.train_data, bs, trainer.seed, epoch, start):
                stats = trainer.step(images, labels)
                done, seen = done + 1, seen + stats.batch
                loss_sum, correct = loss_sum + stats.loss * stats.batch, correct + stats.correct
                seconds += stats.time_s
                if stats.energy_j is not None:
                    joules, metered = joules + stats.energy_j, metered + 1
                if done == steps:
                    break
            epoch, start = epoch + 1, 0
        record = to_record(trainer.state, self.names)
        metrics = MetricRecord(
            {
                WEIGHT_KEY: len(self.train_data),
                "train_loss": loss_sum / seen,
                "train_accuracy": correct / seen,
                "steps": done,
                "time_s": seconds,
                "time_s_per_batch": seconds / done,
                # NaN, not 0, when no meter could read this device: unknown is not free
                "energy_j": joules if metered else math.nan,
                "energy_j_per_batch": joules / metered if metered else math.nan,
                "upload_bytes": record_bytes(record),
            }
        )
        return record, metrics

    def evaluate(self, arrays: ArrayRecord) -> MetricRecord:
        self.load_global(arrays)
        accuracy = self.trainer.evaluate(self.test_data)
        return MetricRecord({WEIGHT_KEY: len(self.test_data), "eval_accuracy": accuracy})


_SESSIONS: dict[tuple, ClientSession] = {}


def session_for(context: Context) -> ClientSession:
    """The session of this node, built once per process and reused every round."""
    config = resolve_config(str(context.run_config.get("config", "configs/runs/fl-lenet-fmnist-niti.yaml")))
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    key = (str(config), partition_id, num_partitions)
    if key not in _SESSIONS:
        flrun = load_fl_run(config)
        out = str(context.run_config.get("out-dir", "") or "")
        if out:
            flrun = dataclasses.replace(flrun, run=dataclasses.replace(flrun.run, out_dir=out))
        _SESSIONS[key] = ClientSession(flrun, partition_id, num_partitions)
    return _SESSIONS[key]


def close_sessions() -> None:
    """Close every session of this process (their Trainers' backends and meters)."""
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        session.trainer.close()


app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    session = session_for(context)
    server_round = int(msg.content["config"].get("server-round", 1)) if "config" in msg.content else 1
    record, metrics = session.train(msg.content["arrays"], server_round)
    return Message(RecordDict({"arrays": record, "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    metrics = session_for(context).evaluate(msg.content["arrays"])
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
