"""Corrupt data files: refused before training starts, exit 2, one line naming the file."""

import json
import random
from pathlib import Path

from .gen_data import corrupt_datasets, run_file, write_fmnist
from .harness import Case, check_cases, check_subprocesses, report, run_in_process

MIN_CASES = 30


def _trained_steps(argv) -> int:
    metrics = Path(argv[argv.index("--out") + 1]) / "metrics.jsonl"
    if not metrics.exists():
        return 0
    return sum(json.loads(line)["kind"] == "step" for line in metrics.read_text().splitlines() if line.strip())


def test_corrupt_data_is_refused_before_training(tmp_path):
    cases = corrupt_datasets(tmp_path)
    assert len(cases) >= MIN_CASES, f"the generator made only {len(cases)} cases"
    failures = check_cases(cases)
    failures += [f"{c.label}: trained {n} steps before refusing" for c in cases if (n := _trained_steps(c.argv))]
    assert not failures, report(failures, len(cases))


def test_corrupt_data_as_a_user_runs_it(tmp_path):
    cases = random.Random(5).sample(corrupt_datasets(tmp_path), 4)
    failures = check_subprocesses(cases, tmp_path)
    assert not failures, report(failures, len(cases))


def test_the_generators_good_data_trains(tmp_path):
    for compress in (True, False):
        d = tmp_path / f"data-{compress}"
        write_fmnist(d, compress=compress)
        config = run_file(tmp_path, f"ok-{compress}", {"dataset": "fashion-mnist", "path": str(d)})
        code, stderr, _ = run_in_process(
            Case("ok", ["train", str(config), "--out", str(tmp_path / f"o{compress}"), "--quiet"])
        )
        assert code == 0, stderr
