"""`dsptrain train RUN.yaml`: train a run config, resumable from its checkpoint."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UserError
from .overrides import add_run_options, apply_run_options, planned_parts


def add_parser(sub, common):
    parser = sub.add_parser(
        "train",
        parents=[common],
        help="train a run config (configs/runs/*.yaml)",
        description="Train a run config; metrics go to OUT/metrics.jsonl, "
        "checkpoints to OUT/checkpoint.npz (OUT: runs/<name>).",
    )
    parser.add_argument("run", help="run config YAML")
    add_run_options(parser)
    parser.add_argument(
        "--resume",
        nargs="?",
        const="yes",
        type=_resume_mode,
        metavar="auto",
        help="continue from the checkpoint in the output directory (an error if there is "
        "none); --resume auto: continue if there is one, else start afresh",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _resume_mode(text: str) -> str:
    """`--resume` alone (cli.main spells it --resume=yes) or `--resume auto`."""
    if text not in ("yes", "auto"):
        raise argparse.ArgumentTypeError(f"{text!r}: give --resume alone, or --resume auto")
    return text


def run(args) -> int:
    from ..config import load_run
    from ..energy import make_meter
    from ..execute import Step
    from ..train import Trainer
    from ..train.validation import accuracy_line

    config = apply_run_options(load_run(args.run), args)
    meter, why = make_meter(config.energy)
    # --backend goes to the plan builder; the Trainer runs the Step of its plans and closes it
    parts, planner = planned_parts(config, args)
    try:
        step = Step(config, parts.model, parts.frozen, parts.algorithm, parts.device, planner, parts.graph)
        trainer = Trainer(config, progress=not args.quiet, energy_meter=meter, parts=parts, step=step)
    except BaseException:
        planner.close()
        raise
    with trainer:  # closes the step, its backends and the meter on every way out
        trainer.hold_out_dir()  # before looking for a checkpoint: a second run on this directory stops here
        # bad data, or a budget no plan fits: one error line, before anything else is printed
        trainer.check_data()
        trainer.check_budget(config.train.batch_size)
        _resume_or_refuse(trainer, args, config)
        if not args.quiet:
            print(f"energy: {why}", file=sys.stderr)
        print(
            f"{config.name}: {trainer.model.name} with {config.recipe.name} on {' > '.join(step.backend_names())}, "
            f"output in {trainer.out_dir}",
            file=sys.stderr,
        )
        history = trainer.fit()
    if history:
        last = history[-1]
        print(f"final {accuracy_line(last)} after {last['epoch']} epochs")
        print(f"plot it: dsptrain plot {trainer.out_dir}", file=sys.stderr)
    return 0


def _resume_or_refuse(trainer, args, config) -> None:
    """--resume: load the checkpoint (--resume auto: if there is one); without it an existing
    checkpoint is refused rather than overwritten."""
    found = os.path.lexists(trainer.checkpoint_path)  # a FIFO or dangling link is found too, and refused by load
    if args.resume:
        if found:
            trainer.load()
            print(
                f"resuming {config.name} at epoch {trainer.epoch + 1}, step {trainer.global_step} "
                f"from {trainer.checkpoint_path}",
                file=sys.stderr,
            )
        elif args.resume == "auto":
            print(f"no checkpoint at {trainer.checkpoint_path}; starting from scratch", file=sys.stderr)
        else:
            raise UserError(
                f"--resume: no checkpoint at {trainer.checkpoint_path} "
                f"(--resume auto starts from scratch when there is none)"
            )
    elif found:
        raise UserError(f"{trainer.checkpoint_path} exists: pass --resume to continue it, or --out DIR for a fresh run")
