"""Broken run configs and recipes: exit 2, one error line naming file, key and value."""

import random

from .gen_configs import broken_configs, valid_configs
from .harness import Case, check_cases, check_subprocesses, report, run_in_process

MIN_CASES = 500


def test_broken_configs_are_refused(tmp_path):
    cases = broken_configs(tmp_path)
    assert len(cases) >= MIN_CASES, f"the generator made only {len(cases)} cases"
    failures = check_cases(cases)
    assert not failures, report(failures, len(cases))


def test_broken_configs_as_a_user_runs_them(tmp_path):
    """A sample through a real process: status 2, one line, no traceback."""
    cases = random.Random(3).sample(broken_configs(tmp_path), 8)
    failures = check_subprocesses(cases, tmp_path)
    assert not failures, report(failures, len(cases))


def test_valid_variations_train(tmp_path):
    for label, path in valid_configs(tmp_path):
        code, stderr, _ = run_in_process(Case(label, ["train", str(path), "--out", str(tmp_path / label), "--quiet"]))
        assert code == 0, f"{label}: {stderr[-2000:]}"
        assert (tmp_path / label / "checkpoint.npz").exists()
