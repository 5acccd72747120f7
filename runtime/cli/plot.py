"""`dsptrain plot RUN_DIR [RUN_DIR...] [--out FILE]`: time, energy and memory per batch and
accuracy per epoch of one or more runs, overlaid and labelled by their run names
(dsptrain/plot.py draws them); `dsptrain plot --trace TRACE.json`: a profile's timeline
(`dsptrain profile --trace`), one row per lane (profile/timeline.py)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError


def add_parser(sub, common):
    parser = sub.add_parser(
        "plot",
        parents=[common],
        help="plot runs' time, energy, memory per batch and accuracy per epoch, or a trace",
        description="Plot one or more runs' metrics.jsonl, overlaid: time, energy "
        "and memory per batch, accuracy per epoch. With --trace, draw a "
        "timeline written by `dsptrain profile --trace`.",
    )
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="a run's output directory (runs/<name>)")
    parser.add_argument("--trace", metavar="TRACE.json", help="draw this trace file's timeline instead")
    parser.add_argument("--window", metavar="START:END", help="with --trace: the milliseconds to show, e.g. 0:40")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="image to write, .png/.svg/.pdf (default: RUN_DIR/plot.png for one run, "
        "plot.png here for several, TRACE.png for a trace)",
    )
    parser.add_argument("--title", help="the figure's title (default: the run names)")
    return parser


def _window(text: str | None) -> tuple[float | None, float | None]:
    if not text:
        return None, None
    start, sep, end = text.partition(":")
    try:
        return (float(start) if start else None), (float(end) if end else None)
    except ValueError:
        raise UserError(f"--window {text!r}: expected START:END in milliseconds, e.g. 0:40") from None


def run(args) -> int:
    if args.trace:
        from ..profile.timeline import plot_trace

        if args.runs:
            raise UserError("--trace draws one trace file: give no RUN_DIR with it")
        out = Path(args.out) if args.out else Path(args.trace).with_suffix(".png")
        plot_trace(args.trace, out, args.title, *_window(args.window))
        print(out)
        return 0
    if args.window:
        raise UserError("--window goes with --trace")
    if not args.runs:
        raise UserError("give one or more RUN_DIRs, or --trace TRACE.json")
    from ..plot import plot_runs

    out = Path(args.out) if args.out else (Path(args.runs[0]) / "plot.png" if len(args.runs) == 1 else Path("plot.png"))
    plot_runs(args.runs, out, title=args.title)
    print(out)
    return 0
