"""`dsptrain fl ...`: federated runs without typing Flower's commands.

    dsptrain fl simulate RUN.yaml   every client in this process (Flower's apps, no SuperLink)
    dsptrain fl deploy RUN.yaml     a SuperLink and fl.clients SuperNodes on 127.0.0.1, then `flwr run`
    dsptrain fl partition RUN.yaml  how the training set is split: examples per class per client

Flower's own way works too: `flwr run .` (simulation engine, needs the `simulation`
extra: Ray) or `flwr run . <connection>` against a SuperLink you started.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UserError


def _simulate(args) -> int:
    from .settings import load_fl_run
    from .simulate import simulate

    overrides = {"rounds": args.rounds} if args.rounds is not None else {}
    flrun = load_fl_run(args.run, **overrides)
    out = Path(args.out or flrun.out_dir)
    history = simulate(flrun, Path(args.run).resolve(), out)
    _summary(history, out)
    return 0


def _deploy(args) -> int:
    import json

    from .deploy import deploy
    from .server import HISTORY_NAME
    from .settings import load_fl_run

    flrun = load_fl_run(args.run)
    out = Path(args.out or flrun.out_dir)
    if args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout} must be > 0 seconds")
    print(
        f"{flrun.run.name}: a SuperLink and {flrun.fl.clients} SuperNodes on 127.0.0.1, "
        f"{flrun.fl.rounds} rounds, output in {out}",
        file=sys.stderr,
    )
    deploy(Path(args.run), flrun.fl.clients, out, args.timeout)
    history_path = out / HISTORY_NAME
    if not history_path.exists():
        raise UserError(f"{history_path}: the ServerApp wrote no history; see the logs it named")
    _summary(json.loads(history_path.read_text()), out)
    return 0


def _partition(args) -> int:
    import numpy as np

    from .. import data as datasets
    from ..models import build_model
    from .partition import label_histogram, split_indices
    from .settings import load_fl_run

    flrun = load_fl_run(args.run)
    model = build_model(flrun.run.model.name, flrun.run.model.num_classes)
    train = datasets.load_dataset(flrun.run.data, "train", model.input_shape)
    parts = split_indices(train.labels, flrun.fl.clients, flrun.fl.partition.spec())
    hist = label_histogram(train.labels, parts, flrun.run.model.num_classes)
    print(f"{flrun.run.name}: {len(train)} examples, {flrun.fl.partition.kind} split among {flrun.fl.clients} clients")
    print("client  examples  " + " ".join(f"{c:>5}" for c in range(hist.shape[1])))
    for i, row in enumerate(hist):
        print(f"{i:>6}  {int(row.sum()):>8}  " + " ".join(f"{int(v):>5}" for v in row))
    print(f"mean share of each client's largest class: {np.mean(hist.max(axis=1) / hist.sum(axis=1)):.2f}")
    return 0


def _summary(history: list[dict], out: Path) -> None:
    if not history:
        return
    last = history[-1]
    print(f"round {last['round']}: test accuracy {last['test_accuracy']:.4f} (history in {out})")


def add_actions(parser, common) -> None:
    """The actions of `dsptrain fl` (runtime/cli/fl.py registers the subcommand)."""
    actions = parser.add_subparsers(dest="fl_command", required=True, metavar="ACTION")
    sim = actions.add_parser(
        "simulate", parents=[common], help="run a federated config with every client in this process"
    )
    sim.add_argument("run", help="federated run config (configs/runs/fl-*.yaml)")
    sim.add_argument("--out", help="output directory (default runs/<name>); a checkpoint there is resumed")
    sim.add_argument("--rounds", type=int, help="override fl.rounds")
    sim.set_defaults(fl_action=_simulate)
    dep = actions.add_parser(
        "deploy", parents=[common], help="a SuperLink and fl.clients SuperNodes on 127.0.0.1, then flwr run"
    )
    dep.add_argument("run", help="federated run config (configs/runs/fl-*.yaml)")
    dep.add_argument("--out", help="output directory (default runs/<name>)")
    dep.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is stopped (default 3600)")
    dep.set_defaults(fl_action=_deploy)
    part = actions.add_parser("partition", parents=[common], help="examples per class per client of a federated config")
    part.add_argument("run", help="federated run config (configs/runs/fl-*.yaml)")
    part.set_defaults(fl_action=_partition)
