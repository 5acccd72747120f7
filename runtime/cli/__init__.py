"""The `dsptrain` command: one module per subcommand in this package.

    dsptrain train RUN.yaml      train a run config            (cli/train.py)
    dsptrain plan RUN.yaml       its memory peak and plan      (cli/plan.py)
    dsptrain calibrate [DEVICE]  products' speeds, measured    (cli/calibrate.py)
    dsptrain profile RUN.yaml    per-op time, memory, energy   (cli/profile.py)
    dsptrain plot RUN_DIR...     per-batch and per-epoch plots (cli/plot.py)
    dsptrain recipes             the precision recipes         (cli/recipes.py)
    dsptrain info                version and backends          (cli/info.py)
    dsptrain fl ACTION RUN.yaml  federated training on Flower  (cli/fl.py)
    dsptrain export CHECKPOINT   a trained model as ONNX / npz (cli/export.py)

A subcommand module has `add_parser(subparsers, common)` (registering itself with
`parents=[common]`, so the global options are accepted after the subcommand too) and a
`run(args) -> int`. Add one by writing the module and naming it in COMMANDS.
User errors print one line `dsptrain: error: ...` and exit with status 2 (a diverged run: 3); --debug shows
the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings

from .. import __version__
from ..errors import DivergedError, DsptrainError, UserError

# In the order `dsptrain --help` lists them.
COMMANDS = ("train", "plan", "calibrate", "profile", "plot", "recipes", "info", "fl", "export")


def _global_options(default) -> argparse.ArgumentParser:
    """The options every subcommand takes, before or after its name. On the subcommands
    their default is SUPPRESS, so `dsptrain --debug train X` keeps the flag set."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="show the traceback of an error (also DSPTRAIN_DEBUG=1: op placement)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsptrain",
        parents=[_global_options(False)],
        description="Train integer (INT8) networks with Hexagon DSP offload: "
        "`dsptrain COMMAND --help` for each command's options.",
    )
    parser.add_argument("--version", action="version", version=f"dsptrain {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _global_options(argparse.SUPPRESS)
    for name in COMMANDS:
        module = importlib.import_module(f"{__name__}.{name}")
        module.add_parser(sub, common).set_defaults(func=module.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--resume` takes an optional `auto`; anything else after it is the run path, not its value
    argv = [("--resume=yes" if a == "--resume" and argv[i + 1 : i + 2] != ["auto"] else a) for i, a in enumerate(argv)]
    args = parser.parse_args(argv)
    if not args.debug:
        warnings.formatwarning = lambda message, category, *rest: f"dsptrain: warning: {message}\n"
    previous = _exit_on_signals()
    try:
        from ..inputs import env

        env.check_all()  # a bad DSPTRAIN_* value: one line naming it, before anything reads it
        return args.func(args)
    except DivergedError as exc:  # not the input's fault: its own status, so a script can tell
        if args.debug:
            raise
        print(f"dsptrain: error: {exc}", file=sys.stderr)
        return 3
    except (UserError, DsptrainError) as exc:
        if args.debug:
            raise
        print(f"dsptrain: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dsptrain: interrupted", file=sys.stderr)
        return 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _exit_on_signals() -> dict:
    """SIGTERM and SIGHUP end the command as an exception would: `finally` blocks run, so
    the DSP server is stopped and temp files removed (SIGKILL cannot be caught: the next
    run reaps what it leaves). Returns the handlers replaced."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    return {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
