"""`dsptrain profile RUN.yaml`: where a training step's time, memory and energy go.

Runs --warmup steps (plans built, scratch grown), then --steps steps with every op call
timed (profile/recorder.py), and prints a table per op and per layer sorted by time:
recipe role, backend, calls, time and share of the step, MACs and GOP/s, bytes moved,
the memory plan's bytes, modeled DSP time and packets where the op ran on the DSP, and
its share of the energy estimate; the total is the measured steps' time. The table goes
to OUT/profile.txt, .csv and .json (OUT: runs/<name>/profile); --trace FILE writes the
timeline in the Chrome trace event format (Perfetto, chrome://tracing; `dsptrain plot
--trace FILE` draws it).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from ..errors import UserError
from .overrides import add_run_options, apply_run_options, planned_parts


def add_parser(sub, common):
    parser = sub.add_parser(
        "profile",
        parents=[common],
        help="per-op and per-layer time, memory and energy of training steps, and a timeline",
        description=__doc__.split("\n\n", 1)[1].replace("\n", " "),
    )
    parser.add_argument("run", help="run config YAML")
    add_run_options(parser, training=False)
    parser.add_argument("--steps", type=int, default=5, metavar="N", help="steps profiled (default 5)")
    parser.add_argument(
        "--warmup", type=int, default=2, metavar="N", help="steps run first and not profiled (default 2)"
    )
    parser.add_argument(
        "--micro-batches",
        type=int,
        metavar="N",
        help="override scheduler.micro_batches: co-scheduling's micro-batches (1: serial)",
    )
    parser.add_argument("--out", metavar="DIR", help="where profile.txt/.csv/.json go (default runs/<name>/profile)")
    parser.add_argument("--trace", metavar="FILE", help="write the timeline (Chrome trace event format JSON)")
    parser.add_argument("--top", type=int, metavar="N", help="print the N slowest ops (default: all)")
    parser.add_argument(
        "--energy",
        help="energy coefficients of the share column: estimate[:DEVICE] (default: the run's, else estimate:sd865)",
    )
    return parser


def _positive(flag: str, value: int, low: int) -> int:
    if value < low:
        raise UserError(f"{flag} {value} must be >= {low}")
    return value


def run(args) -> int:
    from ..config import load_run
    from ..energy import EstimateMeter, MeterError
    from ..profile import build, format_table, record_steps, write_csv, write_json, write_trace
    from ..train import Trainer

    steps, warmup = _positive("--steps", args.steps, 1), _positive("--warmup", args.warmup, 0)
    if args.top is not None:
        _positive("--top", args.top, 1)
    config = apply_run_options(load_run(args.run), args)
    if args.micro_batches is not None:
        scheduler = dataclasses.replace(
            config.scheduler, micro_batches=_positive("--micro-batches", args.micro_batches, 1)
        )
        config = dataclasses.replace(config, scheduler=scheduler)
    energy = args.energy or config.energy
    out = Path(args.out) if args.out else Path(config.out_dir or Path("runs") / config.name) / "profile"
    parts, planner = planned_parts(config, args)
    try:
        # the estimate meters each step: a real meter's baseline and windows are not what a profile is for
        try:
            meter = (
                EstimateMeter(energy.partition(":")[2] or "sd865")
                if energy.startswith("estimate")
                else EstimateMeter("sd865")
            )
        except ValueError as exc:
            raise UserError(f"--energy {energy!r}: {exc}") from None
        trainer = Trainer(config, parts=parts, planner=planner, progress=False, energy_meter=meter, out_dir=out)
        data = trainer.train_data
        batch = config.train.batch_size
        needed = warmup + steps
        batches = _batches(data, batch, config.train.seed, needed)
        print(
            f"{config.name}: {parts.model.name} with {config.recipe.name} on "
            f"{' > '.join(planner.backends)}, {warmup} warm-up + {steps} profiled step(s) of {batch}",
            file=sys.stderr,
        )
        recorder = record_steps(planner.executor, trainer.step, batches, warmup)
        profile = build(
            recorder,
            recorder.plan,
            run=config.name,
            model=parts.model.name,
            recipe=config.recipe,
            device=parts.device,
            energy_spec=energy,
        )
        text = format_table(profile, args.top)
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.txt").write_text(format_table(profile) + "\n")
        written = [write_csv(profile, out / "profile.csv"), write_json(profile, out / "profile.json")]
        if args.trace:
            written.append(write_trace(recorder, args.trace, parts.device))
    except MeterError as exc:
        raise UserError(str(exc)) from None
    finally:
        planner.close()
    print(text)
    print("written: " + ", ".join(str(p) for p in [out / "profile.txt", *written]), file=sys.stderr)
    return 0


def _batches(data, batch: int, seed: int, count: int) -> list:
    """`count` full batches of `data` in the run's shuffled order, cycling when it has fewer."""
    from ..data import batches

    if len(data) < batch:
        raise UserError(f"the training set has {len(data)} samples, fewer than one batch of {batch}")
    out, epoch = [], 0
    while len(out) < count:
        out += [b for b in batches(data, batch, seed, epoch) if len(b[1]) == batch][: count - len(out)]
        epoch += 1
    return out
