"""Command-line overrides of a run config, shared by the subcommands that load one."""

from __future__ import annotations

import dataclasses

from ..backends import CHOICES as BACKEND_CHOICES
from ..errors import UserError


def add_run_options(parser, *, training: bool = True) -> None:
    """--batch-size and --backend (every command that loads a run); with `training`, also
    --epochs, --train-limit, --test-limit, --energy and --out."""
    parser.add_argument("--batch-size", type=int, metavar="N", help="override train.batch_size")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, help="override backend")
    if not training:
        return
    parser.add_argument("--epochs", type=int, metavar="N", help="override train.epochs")
    parser.add_argument(
        "--train-limit", type=int, metavar="N", help="override data.train_limit: train on the first N samples"
    )
    parser.add_argument(
        "--test-limit", type=int, metavar="N", help="override data.test_limit: evaluate on the first N samples"
    )
    parser.add_argument("--energy", help="override energy: auto | rapl | battery | trace:FILE | estimate[:DEVICE]")
    parser.add_argument("--out", metavar="DIR", help="override out_dir (default runs/<name>)")


def _at_least(flag: str, value, low: int):
    if value is not None and value < low:
        raise UserError(f"{flag} {value} must be >= {low}")
    return value


def apply_run_options(run, args):
    """`run` with the overrides given on the command line (options not given leave it as is),
    but for --backend (`backend_choice`)."""
    train, data = run.train, run.data
    if _at_least("--batch-size", getattr(args, "batch_size", None), 1) is not None:
        train = dataclasses.replace(train, batch_size=args.batch_size)
    if _at_least("--epochs", getattr(args, "epochs", None), 1) is not None:
        train = dataclasses.replace(train, epochs=args.epochs)
    if _at_least("--train-limit", getattr(args, "train_limit", None), 1) is not None:
        data = dataclasses.replace(data, train_limit=args.train_limit)
    if _at_least("--test-limit", getattr(args, "test_limit", None), 1) is not None:
        data = dataclasses.replace(data, test_limit=args.test_limit)
    energy = getattr(args, "energy", None)
    if energy is not None:
        from ..energy import spec_problem

        if spec_problem(energy):
            raise UserError(f"--energy {spec_problem(energy)}")
    # --backend is not written into the run: it goes to the plan builder (`planned_parts`).
    return dataclasses.replace(
        run,
        train=train,
        data=data,
        energy=getattr(args, "energy", None) or run.energy,
        out_dir=getattr(args, "out", None) or run.out_dir,
    )


def backend_choice(run, args) -> str:
    """--backend if given, else the run's `backend:`."""
    return getattr(args, "backend", None) or run.backend


def planned_parts(run, args, notes: bool = True):
    """(the run's parts: train/assembly.assemble; the plan builder of the backend choice:
    plan.Planner), what `dsptrain train` and `dsptrain plan` share. The command line hands
    its backend choice to the Planner here, directly: the Trainer gets the Planner, not the
    choice (docs/ARCHITECTURE.md, "Choosing a backend"). The caller closes the Planner."""
    from ..inputs import check_environment
    from ..plan import Planner
    from ..train.assembly import assemble

    check_environment()  # a bad DSPTRAIN_* value fails here, naming it, before a backend reads it
    parts = assemble(run, notes=notes)
    return parts, Planner(backend_choice(run, args), parts.algorithm, parts.device, run.scheduler)
