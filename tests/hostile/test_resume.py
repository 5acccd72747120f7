"""kill -9 at random points, then `--resume auto`: the same weights and metrics.jsonl as
a run never killed (timing fields aside), and no temp files left behind."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import numpy as np
from dsptrain import checkpoint

from .conftest import write_run
from .harness import Case, run_in_process

TRIALS = 10
TIMING = {
    "time_s",
    "seconds",
    "samples_per_s",
    "peak_rss_bytes",
    "rss_bytes",
    "rss_growth_bytes",
    "step_peak_rss_bytes",
    "peak_rss_growth_bytes",
}  # differ between any two runs


def records(out) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def train(config, out, *extra):
    code, stderr, _ = run_in_process(Case("run", ["train", str(config), "--out", str(out), "--quiet", *extra]))
    assert code == 0, stderr
    return stderr


def kill_at_random(config, out, rng, lines_total) -> str:
    """Start a run, SIGKILL it when metrics.jsonl reaches a random length (plus a random
    few milliseconds: inside a checkpoint write, sometimes). Returns where it died."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dsptrain.cli", "train", str(config), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = rng.randrange(0, lines_total)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if (metrics.exists() and metrics.read_bytes().count(b"\n") >= target) or target == 0:
            break
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.03))
    finished = proc.poll() is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    have = metrics.read_bytes().count(b"\n") if metrics.exists() else 0
    return f"{'finished before the kill' if finished else 'killed'} after {have} of {lines_total} lines"


def test_kill_minus_9_then_resume_matches_an_unbroken_run(tmp_path):
    config = write_run(tmp_path / "run.yaml", "niti", epochs=3, batch_size=32, checkpoint_every_steps=3)
    doc = config.read_text().replace("train_limit: 64", "train_limit: 256").replace("test_limit: 32", "test_limit: 64")
    config.write_text(doc)
    whole = tmp_path / "whole"
    train(config, whole)
    want_records = records(whole)
    want_state, want_meta = checkpoint.load(whole / "checkpoint.npz")
    rng = random.Random(41)
    outcomes = []
    for trial in range(TRIALS):
        out = tmp_path / f"trial{trial}"
        where = kill_at_random(config, out, rng, len(want_records))
        train(config, out, "--resume", "auto")
        outcomes.append(where)
        got_state, got_meta = checkpoint.load(out / "checkpoint.npz")
        assert got_meta["global_step"] == want_meta["global_step"], where
        for name in want_state:
            np.testing.assert_array_equal(got_state[name].q, want_state[name].q, err_msg=f"{where}: {name}")
            assert got_state[name].e == want_state[name].e, where
        got = records(out)
        assert got == want_records, (
            where,
            [i for i, (a, b) in enumerate(zip(got, want_records)) if a != b][:5],
            len(got),
            len(want_records),
        )
        leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
        assert not leftovers, f"{where}: temp files left: {leftovers}"
    assert sum(o.startswith("killed") for o in outcomes) >= TRIALS // 2, outcomes


def test_resume_without_a_checkpoint_is_an_error_and_auto_starts(tmp_path):
    config = write_run(tmp_path / "run.yaml")
    code, stderr, _ = run_in_process(Case("resume", ["train", str(config), "--out", str(tmp_path / "a"), "--resume"]))
    assert code == 2 and stderr.count("dsptrain: error:") == 1 and "no checkpoint" in stderr, stderr
    assert "starting from scratch" in train(config, tmp_path / "b", "--resume", "auto")
    assert (tmp_path / "b" / "checkpoint.npz").exists()


def test_a_partial_last_line_and_later_records_are_repaired(tmp_path):
    """The repair on its own: records after the checkpoint and a cut line go, the rest stays."""
    config = write_run(tmp_path / "run.yaml", epochs=1, checkpoint_every_steps=1)
    out = tmp_path / "out"
    train(config, out)
    full = (out / "metrics.jsonl").read_text()
    state, meta = checkpoint.load(out / "checkpoint.npz")
    # as if killed after step 1's checkpoint, while writing a later record
    from dsptrain.resume import repair_metrics

    lines = full.splitlines()
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:17])
    sums = repair_metrics(out / "metrics.jsonl", 1, 0, None)
    kept = (out / "metrics.jsonl").read_text().splitlines()
    assert kept == lines[:1]
    first = json.loads(lines[0])
    assert sums == (first["batch"], first["loss"] * first["batch"], round(first["accuracy"] * first["batch"]))
