"""The Flower ServerApp: rounds of FedAvg, server-side evaluation, a checkpoint per round.

`run_server(grid, flrun)` is the whole server; the ServerApp below only reads the run
config and calls it, and the in-process simulation (simulate.py) calls it with its own
Grid. After every round the global model is evaluated on the run's test split and
written atomically (checkpoint.py: temp file, fsync, rename) with the round number and
the history so far; a server killed at any point and started again continues after the
last round it wrote.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from .. import checkpoint
from ..config.settings import recipe_settings
from ..errors import UserError
from .client import resolve_config
from .records import from_record, model_names, record_bytes, to_record
from .settings import FLRun, load_fl_run
from .strategy import IntegerFedAvg

log = logging.getLogger("dsptrain.fl")
CHECKPOINT_NAME = "server.npz"
HISTORY_NAME = "rounds.json"


def _ensure_logging() -> None:
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("dsptrain.fl %(levelname)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def _mean(values) -> float | None:
    """The plain mean over clients; None with no client (round 0), NaN if any is unknown."""
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else None


def load_server_checkpoint(path: Path, flrun: FLRun, names: list[str]) -> tuple[dict, int, list]:
    """(the global model, the last round written, the history) of a round checkpoint, held to this
    run: its model, its recipe and the recipe's settings (resume.check_recipe_settings: other
    settings are refused naming the key and both values; a checkpoint written before the server
    stored them resumes with a warning)."""
    from ..resume import ABSENT, check_recipe_settings

    state, meta = checkpoint.load(path)
    run = flrun.run
    if (meta.get("recipe"), meta.get("model")) != (run.recipe.name, run.model.name):
        raise UserError(
            f"{path}: server checkpoint is {meta.get('model')} with {meta.get('recipe')}, "
            f"this run is {run.model.name} with {run.recipe.name}"
        )
    check_recipe_settings(path, meta.get("recipe_settings", ABSENT), run.recipe, stacklevel=3)
    missing = [n for n in names if n not in state]
    if missing:
        raise UserError(f"{path}: server checkpoint lacks {', '.join(missing)}")
    return {n: state[n] for n in names}, int(meta["round"]), list(meta["history"])


def run_server(grid: Grid, flrun: FLRun, out_dir: str | Path | None = None) -> list[dict]:
    """Run the federated rounds still to do; returns the history (one dict per round, 0 = initial)."""
    from ..train import Trainer

    _ensure_logging()
    fl, run = flrun.fl, flrun.run
    out = Path(out_dir or flrun.out_dir)
    evaluator = Trainer(run, progress=False, out_dir=out / "server")
    names = model_names(evaluator.model, evaluator.state)
    state, done, history = {n: evaluator.state[n] for n in names}, 0, []
    ckpt = out / CHECKPOINT_NAME
    if ckpt.exists() and fl.resume:
        state, done, history = load_server_checkpoint(ckpt, flrun, names)
        log.info("%s: resuming after round %d of %d from %s", run.name, done, fl.rounds, ckpt)
    if done >= fl.rounds:
        log.info("%s: all %d rounds are done (%s)", run.name, fl.rounds, ckpt)
        evaluator.close()
        return history
    strategy = _strategy(flrun, state, done, len(evaluator.train_data))

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        number = server_round + done
        if number == done and history:  # the checkpoint's model, evaluated before it was written
            return MetricRecord({"test_accuracy": history[-1]["test_accuracy"]})
        model = from_record(arrays, "global model")
        evaluator.state = {**evaluator.state, **model}
        accuracy = evaluator.evaluate()
        entry = _round_entry(number, accuracy, strategy.reports.get(number), arrays)
        history.append(entry)
        if number > done or not ckpt.exists():
            checkpoint.save(
                ckpt,
                model,
                {
                    "round": number,
                    "run": run.name,
                    "recipe": run.recipe.name,
                    "recipe_settings": recipe_settings(run.recipe),  # a resumed server checks them
                    "model": run.model.name,
                    "history": history,
                },
            )
            checkpoint.atomic_write(out / HISTORY_NAME, lambda f: f.write(json.dumps(history, indent=1).encode()))
        _log_round(run.name, fl.rounds, entry)
        return MetricRecord({"test_accuracy": accuracy})

    try:
        strategy.start(
            grid,
            to_record(state, names),
            num_rounds=fl.rounds - done,
            timeout=fl.round_timeout_s,
            train_config=ConfigRecord({"run": run.name}),
            evaluate_fn=evaluate_fn,
        )
    finally:
        evaluator.close()
    return history


def _strategy(flrun: FLRun, state: dict, done: int, train_examples: int) -> IntegerFedAvg:
    """The run's aggregation strategy (fl: section), its rounds numbered after the `done` ones."""
    fl, weights = flrun.fl, flrun.run.recipe.tensors.weights
    return IntegerFedAvg(
        state,
        integer=flrun.integer,
        bits=weights.bits,
        rounding=weights.rounding,
        max_exponent_shift=fl.max_exponent_shift,
        round_offset=done,
        connect_timeout_s=fl.round_timeout_s,
        aggregation=fl.aggregation,
        max_examples=fl.max_examples or train_examples,
        max_weight=fl.max_weight,
        clip_norm=fl.clip_norm,
        trim=fl.trim,
        fraction_train=fl.fraction_train,
        fraction_evaluate=fl.fraction_evaluate,
        min_train_nodes=fl.min_train_clients,
        min_evaluate_nodes=fl.min_train_clients if fl.fraction_evaluate else 0,
        min_available_nodes=fl.min_available_clients,
    )


def _round_entry(number: int, accuracy: float, report: dict | None, arrays: ArrayRecord) -> dict:
    """A round's line in the history: the global model's accuracy and what its clients did
    (the strategy's report; none for round 0)."""
    report = report or {"accepted": [], "rejected": [], "failed": [], "clients": [], "clipped": [], "missing": 0}
    clients = report.get("clients", [])
    return {
        "round": number,
        "test_accuracy": accuracy,
        "accepted": len(report["accepted"]),
        "rejected": report["rejected"],
        "failed": report["failed"],
        "missing": report["missing"],
        "clipped": report.get("clipped", []),
        "download_bytes": record_bytes(arrays),
        "upload_bytes_per_client": _mean(c["upload_bytes"] for c in clients),
        "time_s_per_client": _mean(c["time_s"] for c in clients),
        "time_s_per_batch": _mean(c["time_s_per_batch"] for c in clients),
        "energy_j_per_client": _mean(c["energy_j"] for c in clients),
        "train_loss": _mean(c["train_loss"] for c in clients),
    }


def _log_round(run_name: str, rounds: int, entry: dict) -> None:
    log.info(
        "%s round %d/%d: test accuracy %.4f, %d updates accepted, %d rejected, %d failed, %d missing, %d cut back",
        run_name,
        entry["round"],
        rounds,
        entry["test_accuracy"],
        entry["accepted"],
        len(entry["rejected"]),
        len(entry["failed"]),
        entry["missing"],
        len(entry["clipped"]),
    )


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    flrun = load_fl_run(resolve_config(str(context.run_config.get("config", "configs/runs/fl-lenet-fmnist-niti.yaml"))))
    out = str(context.run_config.get("out-dir", "") or "")
    if out:
        flrun = dataclasses.replace(flrun, run=dataclasses.replace(flrun.run, out_dir=out))
    run_server(grid, flrun)
