"""Concurrent runs on one output directory: one runs, the others are refused with one
line; metrics.jsonl and the checkpoint stay whole; a dead run's lock is taken over."""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import subprocess
import sys
import time

import dsptrain
import pytest
import yaml
from dsptrain.inputs.run_lock import LOCK_NAME, RunLock

from .gen_configs import BASE
from .harness import ERROR

STARTS = 4  # runs started on one directory within 0.3 s
TRIALS = 3


def _config(tmp_path, name="race", train_limit=256, epochs=1):
    doc = copy.deepcopy(BASE)
    doc["name"] = name
    doc["data"]["train_limit"] = train_limit
    doc["train"]["epochs"] = epochs
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _start(config, out, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "dsptrain.cli", "train", str(config), "--out", str(out), "--quiet", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_lock_on_a_directory_is_refused_naming_the_owner(tmp_path):
    first = RunLock.acquire(tmp_path / "out")
    with pytest.raises(
        dsptrain.UserError, match=f"another dsptrain run is using this output directory \\(pid {os.getpid()} on "
    ):
        RunLock.acquire(tmp_path / "out")
    first.release()
    assert not (tmp_path / "out" / LOCK_NAME).exists()
    with RunLock.acquire(tmp_path / "out"):
        pass


def test_a_dead_runs_lock_file_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("pid 999999 on a-phone, started 2026-01-01 00:00:00\n")  # no flock: its holder died
    with RunLock.acquire(out) as lock:
        assert lock.previous.startswith("pid 999999")
        assert f"pid {os.getpid()}" in (out / LOCK_NAME).read_text()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_lock_path_that_is_no_file_is_refused(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    {"symlink": lambda p: p.symlink_to("/dev/null"), "fifo": os.mkfifo, "directory": os.mkdir}[kind](out / LOCK_NAME)
    with pytest.raises(dsptrain.UserError, match=LOCK_NAME):
        RunLock.acquire(out)


def test_concurrent_starts_on_one_out_leave_one_run_and_a_whole_metrics_file(tmp_path):
    rng = random.Random(34)
    config = _config(tmp_path)
    for trial in range(TRIALS):
        out = tmp_path / f"out{trial}"
        procs = []
        for _ in range(STARTS):
            procs.append(_start(config, out))
            time.sleep(rng.uniform(0, 0.3 / STARTS))
        results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
        winners = [err for code, err in results if code == 0]
        losers = [(code, err) for code, err in results if code != 0]
        assert len(winners) == 1, results
        for code, err in losers:
            lines = [line for line in err.splitlines() if line.startswith(ERROR)]
            assert code == 2 and "Traceback" not in err and len(lines) == 1, err
            assert (
                "another dsptrain run is using this output directory" in lines[0]
                or "checkpoint.npz exists: pass --resume" in lines[0]
            ), lines[0]
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["kind"] for r in records].count("epoch") == 1
        assert [r["step"] for r in records if r["kind"] == "step"] == list(range(len(records) - 1))
        assert not (out / LOCK_NAME).exists()


def test_a_run_killed_mid_way_leaves_a_lock_the_next_run_takes_over(tmp_path):
    config = _config(tmp_path, "killed", train_limit=4096, epochs=3)
    out = tmp_path / "out"
    proc = _start(config, out)
    deadline = time.monotonic() + 120
    while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    blocked = _start(config, out, "--resume", "auto")
    _, err = blocked.communicate(timeout=300)
    assert blocked.returncode == 2 and "another dsptrain run is using this output directory" in err, err
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert (out / LOCK_NAME).exists()  # the dead run's file stays ...
    after = _start(_config(tmp_path, "killed", train_limit=4096, epochs=1), out, "--resume", "auto")
    _, err = after.communicate(timeout=300)
    assert after.returncode == 0, err  # ... and is taken over
    assert not (out / LOCK_NAME).exists()


def test_the_python_api_is_refused_on_a_held_directory(tmp_path):
    from dsptrain.config import load_run

    run = load_run(_config(tmp_path, "api", train_limit=64))
    out = tmp_path / "out"
    with RunLock.acquire(out):
        trainer = dsptrain.Trainer(run, progress=False, out_dir=out)
        try:
            with pytest.raises(dsptrain.UserError, match="another dsptrain run"):
                trainer.fit()
        finally:
            trainer.close()
        assert not (out / "metrics.jsonl").exists()
