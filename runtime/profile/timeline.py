"""A trace file (trace.py's, or any in the Chrome trace event format) drawn with matplotlib:
what `dsptrain plot --trace` makes, since the trace viewers' web pages may be out of reach.

One panel per process (dsptrain's: the measured clock, and the modeled one when DSP ops
ran), one row per lane (thread_name metadata, in thread_sort_index order), each complete
event ("ph": "X") a bar coloured by its category (the recipe role of the op), time in
milliseconds from the panel's first event.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DataError, UserError

ROLE_COLORS = {
    "step": "#d9d9d9",
    "forward": "#1f77b4",
    "loss": "#9467bd",
    "backward data": "#ff7f0e",
    "weight gradient": "#d62728",
    "update": "#2ca02c",
    "quantiser": "#8c564b",
}
OTHER_COLOR = "#7f7f7f"


def read_trace(path: str | Path) -> list[tuple[str, list[str], list[list[dict]]]]:
    """Each process of a trace file: (its name, its lane names in display order, each lane's
    complete events), processes in display order."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such trace file (`dsptrain profile RUN.yaml --trace {path}` writes one)")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a JSON trace ({exc})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise DataError(f"{path}: no traceEvents list (Chrome trace event format)")
    names, order, lanes, processes, process_order = {}, {}, {}, {}, {}
    for e in events:
        if not isinstance(e, dict):
            continue
        pid, key = e.get("pid", 0), (e.get("pid", 0), e.get("tid", 0))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("ph") == "M":
            if e.get("name") == "thread_name":
                names[key] = str(args.get("name", key))
            elif e.get("name") == "thread_sort_index":
                order[key] = args.get("sort_index", 0)
            elif e.get("name") == "process_name":
                processes[pid] = str(args.get("name", pid))
            elif e.get("name") == "process_sort_index":
                process_order[pid] = args.get("sort_index", 0)
        elif e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)):
            lanes.setdefault(key, []).append(e)
    if not lanes:
        raise DataError(f'{path}: no complete ("ph": "X") events to draw')
    out = []
    for pid in sorted({k[0] for k in lanes}, key=lambda p: (process_order.get(p, 1 << 30), p)):
        keys = sorted((k for k in lanes if k[0] == pid), key=lambda k: (order.get(k, 1 << 30), k))
        out.append(
            (processes.get(pid, f"pid {pid}"), [names.get(k, f"tid {k[1]}") for k in keys], [lanes[k] for k in keys])
        )
    return out


def plot_trace(
    path: str | Path,
    out: str | Path,
    title: str | None = None,
    start_ms: float | None = None,
    end_ms: float | None = None,
):
    """Draw trace `path` into image `out` (PNG, SVG or PDF by its suffix), one panel per
    process (the measured clock, the modeled one), optionally the window start_ms..end_ms;
    returns the Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    processes = read_trace(path)
    rows = [len(lanes) for _, lanes, _ in processes]
    fig, axes = plt.subplots(
        len(processes),
        1,
        figsize=(14, 1.6 + 0.55 * sum(rows) + 0.5 * len(processes)),
        layout="constrained",
        height_ratios=rows,
        squeeze=False,
    )
    seen = {}
    for ax, (process, names, lanes) in zip(axes[:, 0], processes):
        origin = min(e["ts"] for lane in lanes for e in lane)
        for row, events in enumerate(lanes):
            y = len(lanes) - 1 - row
            spans, colors = [], []
            for e in events:
                a = (e["ts"] - origin) / 1e3
                b = a + e["dur"] / 1e3
                if (start_ms is not None and b < start_ms) or (end_ms is not None and a > end_ms):
                    continue
                cat = e.get("cat", "")
                color = ROLE_COLORS.get(cat, OTHER_COLOR)
                seen[cat if cat in ROLE_COLORS else "other"] = color
                spans.append((a, max(b - a, 1e-4)))
                colors.append(color)
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colors, edgecolor="white", linewidth=0.2)
        ax.set_yticks(range(len(lanes)), list(reversed(names)), fontsize="small")
        ax.set_xlabel("ms from the first event")
        if start_ms is not None or end_ms is not None:
            ax.set_xlim(start_ms, end_ms)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(process, fontsize="medium", loc="left")
    fig.legend(
        handles=[Patch(color=c, label=k) for k, c in seen.items()],
        loc="outside lower center",
        fontsize="small",
        ncol=len(seen),
        frameon=False,
    )
    fig.suptitle(title or f"timeline: {Path(path).name}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return fig
