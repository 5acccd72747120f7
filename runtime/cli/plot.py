"""`dsptrain plot RUN_DIR [RUN_DIR...] [--out FILE]`: time, energy and memory per batch and
accuracy per epoch of one or more runs, overlaid (dsptrain/plot.py draws them)."""
from __future__ import annotations

from pathlib import Path


def add_parser(sub, common):
    parser = sub.add_parser("plot", parents=[common],
                            help="plot time, energy, memory per batch and accuracy per epoch of runs",
                            description="Plot one or more runs' metrics.jsonl, overlaid: time, energy "
                                        "and memory per batch, accuracy per epoch.")
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a run's output directory (runs/<name>)")
    parser.add_argument("--out", metavar="FILE",
                        help="image to write, .png/.svg/.pdf (default: RUN_DIR/plot.png for one run, "
                             "plot.png here for several)")
    parser.add_argument("--title", help="the figure's title (default: the run names)")
    return parser


def run(args) -> int:
    from ..plot import plot_runs

    out = Path(args.out) if args.out else (Path(args.runs[0]) / "plot.png" if len(args.runs) == 1
                                           else Path("plot.png"))
    plot_runs(args.runs, out, title=args.title)
    print(out)
    return 0
