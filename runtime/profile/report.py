"""The profile table as text (what `dsptrain profile` prints), CSV and JSON (written beside it)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .table import Profile, Row

# (heading, width, the cell of a Row)
COLUMNS = (
    ("calls", 6, lambda r: f"{r.calls}" if r.calls else ""),
    ("total ms", 9, lambda r: f"{r.seconds * 1e3:.2f}"),
    ("mean ms", 8, lambda r: f"{r.mean_s * 1e3:.3f}" if r.calls and r.kind else ""),
    ("step %", 6, lambda r: f"{r.share * 100:.1f}"),
    ("MMACs", 8, lambda r: f"{r.macs / 1e6:.1f}" if r.macs else ""),
    ("GOP/s", 6, lambda r: f"{r.gops:.1f}" if r.macs else ""),
    ("MB moved", 8, lambda r: f"{r.bytes_moved / 2**20:.2f}" if r.bytes_moved else ""),
    ("plan KB", 8, lambda r: f"{r.tensor_bytes / 1024:.0f}" if r.tensor_bytes else ""),
    ("work KB", 8, lambda r: f"{r.workspace_bytes / 1024:.0f}" if r.workspace_bytes else ""),
    ("DSP ms*", 8, lambda r: f"{r.dsp_model_s * 1e3:.2f}" if r.dsp_model_s is not None else ""),
    ("kpackets", 9, lambda r: f"{r.dsp_packets / 1e3:.0f}" if r.dsp_packets else ""),
    ("energy %", 8, lambda r: f"{r.energy_share * 100:.1f}" if r.energy_share is not None else ""),
)
SHORT_ROLES = {
    "forward": "fwd",
    "loss": "loss",
    "backward data": "bwd",
    "weight gradient": "wgrad",
    "update": "upd",
    "quantiser": "quant",
}
CSV_FIELDS = (
    "name",
    "kind",
    "layer",
    "role",
    "backend",
    "calls",
    "seconds",
    "mean_s",
    "share",
    "macs",
    "gop_per_s",
    "bytes_moved",
    "tensor_bytes",
    "workspace_bytes",
    "dsp_packets",
    "dsp_critical_packets",
    "dsp_calls",
    "dsp_model_s",
    "energy_j",
    "energy_share",
)


def _short(roles: str) -> str:
    """A layer's roles ("forward, backward data, ...") as "fwd+bwd+..."."""
    return "+".join(SHORT_ROLES.get(r, r) for r in roles.split(", "))


def _line(label_cells, row: Row, widths) -> str:
    head = "  ".join(f"{text:<{w}}" for text, w in zip(label_cells, widths))
    return head + "  " + "  ".join(f"{fn(row):>{w}}" for _, w, fn in COLUMNS)


def format_table(profile: Profile, limit: int | None = None) -> str:
    """The per-op table sorted by time (the `limit` slowest, the rest summed in one line),
    the per-layer roll-up, and the total, which is the measured steps' time."""
    ops = [r for r in profile.ops]
    name_w = max([len(r.name) for r in ops + profile.layers] + [18])
    kind_w = max([len(r.kind) for r in ops] + [4])
    role_w = max([len(r.role) for r in ops] + [len(_short(r.role)) for r in profile.layers] + [4])
    back_w = max([len(r.backend) for r in ops + [profile.total]] + [7])
    widths = (name_w, kind_w, role_w, back_w)
    header = (
        "  ".join(f"{h:<{w}}" for h, w in zip(("op", "kind", "role", "backend"), widths))
        + "  "
        + "  ".join(f"{h:>{w}}" for h, w, _ in COLUMNS)
    )
    rule = "-" * len(header)
    steps = ", ".join(f"{s * 1e3:.2f}" for s in profile.step_seconds)
    out = [
        f"{profile.run}: {profile.model} with {profile.recipe} on {profile.backends}, batch {profile.batch}, "
        f"{profile.steps} step(s) after warm-up: {steps} ms (calls, times, MACs, bytes, packets: totals over them)",
        *([f"co-scheduling: {profile.pipeline}"] if profile.pipeline else []),
        *(
            [
                "modeled step (DSP calls at their modeled time from packets, the rest as measured, "
                "overlapped as they ran): " + ", ".join(f"{s * 1e3:.2f}" for s in profile.modeled_step_seconds) + " ms"
            ]
            if profile.modeled_step_seconds
            else []
        ),
        "",
        header,
        rule,
    ]
    shown = ops if limit is None or len(ops) <= limit else ops[:limit]
    for row in shown:
        out.append(_line((row.name, row.kind, row.role, row.backend), row, widths))
    if len(shown) < len(ops):
        rest = Row(f"({len(ops) - len(shown)} more ops)", "", "", "", "")
        for row in ops[len(shown) :]:
            rest.calls += row.calls
            rest.seconds += row.seconds
            rest.share += row.share
            rest.macs += row.macs
            rest.bytes_moved += row.bytes_moved
            if row.energy_share is not None:
                rest.energy_share = (rest.energy_share or 0.0) + row.energy_share
        out.append(_line((rest.name, "", "", ""), rest, widths))
    out.append(
        _line((profile.between.name, "", profile.between.role, profile.between.backend), profile.between, widths)
    )
    out += [
        rule,
        _line(("total: " + profile.total.name, "", "", profile.total.backend), profile.total, widths),
        "",
        "per layer",
        rule,
    ]
    for row in profile.layers:
        out.append(_line((row.name, "", _short(row.role), row.backend), row, widths))
    out += [
        rule,
        "MMACs: " + ("int8" if profile.integer else "float") + " multiply-accumulates; GOP/s = 2 x MACs / "
        "measured s; MB moved: bytes the op reads and writes (what the energy estimate charges); plan KB: "
        "its tensors as the memory plan sizes them, work KB: what it allocates besides; DSP ms*: modeled "
        "from QEMU's packet counts (cost.dsp_model_time), not timed; energy %: share of the estimate's "
        f"dynamic energy ({profile.energy_device} coefficients)",
    ]
    return "\n".join(out)


def write_csv(profile: Profile, path: str | Path) -> Path:
    """One line per op, then one per layer (`layer` rows: name = the layer), then the total."""
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("level", *CSV_FIELDS))
        for level, rows in (
            ("op", profile.ops),
            ("executor", [profile.between]),
            ("layer", profile.layers),
            ("total", [profile.total]),
        ):
            for row in rows:
                values = row.as_dict()
                writer.writerow((level, *("" if values[k] is None else values[k] for k in CSV_FIELDS)))
    return path


def write_json(profile: Profile, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(profile.as_dict(), indent=1) + "\n")
    return path
