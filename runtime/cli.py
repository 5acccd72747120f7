"""The `dsptrain` command: train, plan, info (later: bench, recipes).

User errors print one line and exit with status 2; --debug shows the traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import warnings

from . import __version__
from .backends import CHOICES as BACKEND_CHOICES
from .errors import DsptrainError, UserError


def _train(args) -> int:
    from .config import load_run
    from .train import Trainer

    run = load_run(args.run)
    train = run.train
    if args.epochs is not None:
        if args.epochs < 1:
            raise UserError(f"--epochs {args.epochs} must be >= 1")
        train = dataclasses.replace(train, epochs=args.epochs)
    run = dataclasses.replace(run, train=train, backend=args.backend or run.backend,
                              energy=args.energy or run.energy, out_dir=args.out or run.out_dir)
    trainer = Trainer(run, progress=not args.quiet)
    if args.resume:
        if trainer.checkpoint_path.exists():
            trainer.load()
            print(f"resuming {run.name} at epoch {trainer.epoch + 1}, step {trainer.global_step} "
                  f"from {trainer.checkpoint_path}", file=sys.stderr)
        else:
            print(f"no checkpoint at {trainer.checkpoint_path}; starting from scratch", file=sys.stderr)
    elif trainer.checkpoint_path.exists():
        raise UserError(f"{trainer.checkpoint_path} exists: pass --resume to continue it, "
                        f"or --out DIR for a fresh run")
    print(f"{run.name}: {trainer.model.name} with {run.recipe.name} on {' > '.join(trainer.backend_names)}, "
          f"output in {trainer.out_dir}", file=sys.stderr)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    if history:
        last = history[-1]
        print(f"final test accuracy {last['test_accuracy']:.4f} after {last['epoch']} epochs")
    return 0


def _info(args) -> int:
    from .backends import availability

    print(f"dsptrain {__version__} (Python {platform.python_version()}, {platform.machine()})")
    print("backends, in placement order:")
    for name, (ok, why) in availability().items():
        print(f"  {name:<4} {'yes' if ok else 'no ':<3}  {why}")
    try:
        from ._cpu_ops import cpu_features

        features = [k for k, v in cpu_features().items() if v]
        print(f"cpu features: {', '.join(features) or 'none beyond the baseline'}")
    except ImportError as exc:
        print(f"cpu features: unknown (native extension not loaded: {exc})")
    return 0


def _plan(args) -> int:
    from .backends import select
    from .config import load_device, load_run
    from .graph import lower
    from .memory import Fixed, describe, parse_size, source_from_config
    from .models import build_model
    from .plan import build

    run = load_run(args.run)
    batch = args.batch if args.batch is not None else run.train.batch_size
    if batch < 1:
        raise UserError(f"--batch {batch} must be >= 1")
    source = source_from_config(run.memory, run.source)
    if args.budget is not None:
        try:
            source = Fixed(parse_size(args.budget))
        except ValueError as exc:
            raise UserError(f"--budget: {exc}") from None
    model = build_model(run.model.name, run.model.num_classes)
    graph = lower(model, run.recipe, batch)
    # The backends place the ops and report the scratch their kernels keep (scratch_bytes),
    # which the peak includes, as it does when the run trains.
    backends = select(args.backend or run.backend)
    try:
        plan = build(graph, backends, load_device(run.scheduler.device), run.scheduler)
        fitter = plan.fitter(run.memory.micro_batch, run.memory.recompute)
        placed = sorted({p.backend for p in plan.placement.values()})
        print(f"{run.name}: {model.name} on {', '.join(placed)}")
        print(describe(fitter, source))
    finally:
        for backend in backends.values():
            backend.close()
    return 0


def _format_of(fmt) -> str:
    """One tensor role in a few characters: int8/pow2, int8/float/group16, fp8(1-5-2), fp32."""
    if fmt.format == "float32":
        return "fp32"
    if fmt.format == "fp":
        text = f"fp{fmt.bits}(1-{fmt.exponent_bits}-{fmt.bits - 1 - fmt.exponent_bits})"
    else:
        text = f"int{fmt.bits}" + (f"/{fmt.scale}" if fmt.scale != "none" else "")
    if fmt.granularity == "group":
        text += f"/group{fmt.group_size}"
    elif fmt.granularity == "channel":
        text += "/channel"
    return text + ("/sto" if fmt.rounding == "sto" else "")


def _recipes(args) -> int:
    from .config import CONFIG_ROOT, load_recipe

    rows = []
    for path in sorted((CONFIG_ROOT / "algorithms").glob("*.yaml")):
        r = load_recipe(str(path))
        t = r.tensors
        opt = r.optimizer.kind + (f" lr {r.optimizer.lr:g} momentum {r.optimizer.momentum:g}"
                                  if r.optimizer.kind == "sgd" else "")
        errors = _format_of(t.errors)
        if "low_bits" in r.params:   # AFP: the width adapts per layer between two values
            errors = errors.replace(f"int{t.errors.bits}", f"int{r.params['low_bits']}..{r.params.get('high_bits', t.errors.bits)}")
        rows.append((r.name, f"W {_format_of(t.weights)}  A {_format_of(t.activations)}  E {errors}  "
                             f"G {_format_of(t.gradients)}  U {_format_of(t.updates)}  loss {r.loss.kind}  {opt}",
                     r.description))
    width = max(len(name) for name, _, _ in rows)
    for name, formats, description in rows:
        print(f"{name:<{width}}  {formats}")
        if args.verbose:
            print(f"{'':<{width}}  {description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsptrain", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"dsptrain {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a run config (configs/runs/*.yaml)")
    train.add_argument("run", help="run config YAML")
    train.add_argument("--epochs", type=int, help="override train.epochs")
    train.add_argument("--backend", choices=BACKEND_CHOICES, help="override backend")
    train.add_argument("--energy", help="auto | rapl | battery | trace:FILE | estimate")
    train.add_argument("--out", help="output directory (default runs/<name>)")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in the output directory")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)

    plan = sub.add_parser("plan", help="the memory peak of a run config, its breakdown, and the plan under a budget")
    plan.add_argument("run", help="run config YAML")
    plan.add_argument("--batch", type=int, help="override train.batch_size")
    plan.add_argument("--budget", help="override memory.budget: bytes or a size like 64MB")
    plan.add_argument("--backend", choices=BACKEND_CHOICES,
                      help="override backend: whose kernel scratch the peak counts")
    plan.set_defaults(func=_plan)

    info = sub.add_parser("info", help="version, backends found and why others are not, CPU features")
    info.set_defaults(func=_info)

    recipes = sub.add_parser("recipes", help="the precision recipes in configs/algorithms/, one line each")
    recipes.add_argument("--verbose", "-v", action="store_true", help="add each recipe's description")
    recipes.set_defaults(func=_recipes)

    from .fl.command import add_parser as add_fl_parser   # federated learning: runtime/fl/
    add_fl_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.debug:
        warnings.formatwarning = lambda message, category, *rest: f"dsptrain: warning: {message}\n"
    try:
        return args.func(args)
    except (UserError, DsptrainError) as exc:
        if args.debug:
            raise
        print(f"dsptrain: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dsptrain: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
