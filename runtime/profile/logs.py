"""A run's per-step and per-epoch records, written where the usual viewers read them.

`RunLog` writes each record (metrics.step_record, the Trainer's epoch record) to
metrics.jsonl (what `dsptrain plot` and resuming read), to steps.csv / epochs.csv
(always: any spreadsheet or pandas), and, when the writer package is installed (the
`tensorboard` extra: tensorboardX), to TensorBoard event files under tensorboard/, one
scalar per numeric field ("step/loss", "epoch/test_accuracy", ...) at the global step
(epochs at their epoch number). Every record carries the run's name ("run"), which
`dsptrain plot` labels the run by.

Resuming: metrics.jsonl was cut back to the checkpoint before the log opens (resume.py),
so the CSV files are rebuilt from it, and the TensorBoard writer is opened with
purge_step at the resumed step, which tells TensorBoard to drop what the killed run
logged after it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

CSV_FILES = {"step": "steps.csv", "epoch": "epochs.csv"}
TENSORBOARD_DIR = "tensorboard"


def tensorboard_writer_class():
    """tensorboardX's SummaryWriter, or None when it is not installed."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter


class RunLog:
    """The open logs of one run in `out_dir`; `fresh`: a run from step 0 (the files start over),
    else a resumed one at `global_step`."""

    def __init__(
        self, out_dir: str | Path, run: str, fresh: bool = True, global_step: int = 0, tensorboard: bool = True
    ):
        self.out_dir, self.run = Path(out_dir), run
        self.jsonl = open(self.out_dir / "metrics.jsonl", "w" if fresh else "a")
        self._csv: dict[str, tuple] = {}
        if not fresh:
            rebuild_csv(self.out_dir)
        if fresh:  # a run from step 0 owns its logs, as it owns metrics.jsonl
            for kind in CSV_FILES.values():
                (self.out_dir / kind).unlink(missing_ok=True)
            for old in (self.out_dir / TENSORBOARD_DIR).glob("events.out.tfevents.*"):
                old.unlink()
        writer = tensorboard_writer_class() if tensorboard else None
        self.tensorboard = None
        if writer is not None:
            # the file is named by the second it opened in: the suffix keeps a resume made
            # within that second from overwriting the first file
            self.tensorboard = writer(
                str(self.out_dir / TENSORBOARD_DIR),
                purge_step=None if fresh else global_step,
                flush_secs=30,
                filename_suffix=f".{os.getpid()}.step{global_step}",
            )

    def write(self, record: dict) -> None:
        record = {"kind": record["kind"], "run": self.run, **record}
        self.jsonl.write(json.dumps(record) + "\n")
        self._write_csv(record)
        if self.tensorboard is not None:
            kind = record["kind"]
            at = record["step"] if kind == "step" else record["epoch"]
            for key, value in scalars(record):
                self.tensorboard.add_scalar(f"{kind}/{key}", value, at)

    def flush(self) -> None:
        self.jsonl.flush()
        for f, _ in self._csv.values():
            f.flush()
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def close(self) -> None:
        self.jsonl.close()
        for f, _ in self._csv.values():
            f.close()
        self._csv.clear()
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None

    def _write_csv(self, record: dict) -> None:
        kind = record["kind"]
        if kind not in self._csv:
            path = self.out_dir / CSV_FILES[kind]
            header = _header(path)
            f = open(path, "a", newline="")
            writer = csv.DictWriter(f, fieldnames=header or list(record), extrasaction="ignore")
            if header is None:
                writer.writeheader()
            self._csv[kind] = (f, writer)
        self._csv[kind][1].writerow(csv_row(record))


def scalars(record: dict):
    """The record's numeric fields (booleans and NaN left out), as TensorBoard scalars."""
    for key, value in record.items():
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and key not in ("step", "epoch")
            and math.isfinite(value)
        ):
            yield key, value


def csv_row(record: dict) -> dict:
    """A record's cells: numbers and text as they are, None empty, lists and dicts as JSON."""
    return {
        k: "" if v is None else json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
        for k, v in record.items()
    }


def _header(path: Path) -> list | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    with open(path, newline="") as f:
        return next(csv.reader(f), None)


def rebuild_csv(out_dir: str | Path) -> None:
    """steps.csv and epochs.csv made again from metrics.jsonl (after resuming cut it back, or
    after a power trace rewrote its energy figures)."""
    out_dir = Path(out_dir)
    source = out_dir / "metrics.jsonl"
    by_kind: dict[str, list] = {kind: [] for kind in CSV_FILES}
    if source.exists():
        for line in source.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("kind") in by_kind:
                by_kind[record["kind"]].append(record)
    for kind, records in by_kind.items():
        path = out_dir / CSV_FILES[kind]
        if not records:
            path.unlink(missing_ok=True)
            continue
        fields = list(dict.fromkeys(k for r in records for k in r))
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            for record in records:
                writer.writerow(csv_row(record))
