"""Damaged checkpoints: exit 2 naming the file and what is wrong; never unpickled."""

import random

import numpy as np
from dsptrain import checkpoint

from .gen_checkpoints import damaged_checkpoints, format1_copy, read
from .harness import Case, check_cases, check_subprocesses, report, run_in_process

MIN_CASES = 60


def test_damaged_checkpoints_are_refused(tmp_path, trained):
    cases = damaged_checkpoints(tmp_path, trained)
    assert len(cases) >= MIN_CASES, f"the generator made only {len(cases)} cases"
    failures = check_cases(cases)
    assert not failures, report(failures, len(cases))


def test_damaged_checkpoints_as_a_user_runs_them(tmp_path, trained):
    cases = random.Random(4).sample(damaged_checkpoints(tmp_path, trained), 5)
    failures = check_subprocesses(cases, tmp_path)
    assert not failures, report(failures, len(cases))


def test_a_checkpoint_round_trips_and_resumes(tmp_path, trained):
    config, out = trained["niti"]
    state, meta = read(out / "checkpoint.npz")
    assert meta["global_step"] == 2 and meta["epoch"] == 1
    code, stderr, _ = run_in_process(
        Case("resume", ["train", str(config), "--out", str(out), "--resume", "--epochs", "2", "--quiet"])
    )
    assert code == 0, stderr
    assert read(out / "checkpoint.npz")[1]["global_step"] == 4


def test_old_format_checkpoints_still_load(tmp_path, trained):
    config, out = trained["niti"]
    old = format1_copy(out, tmp_path / "old")
    state, meta = checkpoint.load(old / "checkpoint.npz")
    fresh, _ = read(out / "checkpoint.npz")
    for name in fresh:
        np.testing.assert_array_equal(state[name].q, fresh[name].q)
    code, stderr, _ = run_in_process(
        Case("old", ["train", str(config), "--out", str(old), "--resume", "--epochs", "2", "--quiet"])
    )
    assert code == 0, stderr
