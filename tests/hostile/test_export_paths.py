"""Hostile `dsptrain export --out` paths: one named line, exit 2, and nothing that was
there before replaced or written into; good paths get a new regular file, atomically."""

from __future__ import annotations

import os
import random
import stat

import dsptrain
import pytest

from .gen_export import export_paths, snapshot
from .harness import Case, check_cases, check_subprocesses, report, run_in_process

MIN_CASES = 30


@pytest.fixture
def planted(tmp_path, trained):
    cases, sockets = export_paths(tmp_path, trained["niti"][1])
    yield cases
    for sock in sockets:
        sock.close()


def test_hostile_export_paths_are_refused_and_leave_everything_as_it_was(tmp_path, planted):
    assert len(planted) >= MIN_CASES, f"the generator made only {len(planted)} cases"
    before = snapshot(tmp_path)
    failures = check_cases(planted)
    after = snapshot(tmp_path)
    changed = sorted(k for k in before if before[k] != after.get(k))
    added = sorted(set(after) - set(before))
    assert not failures, report(failures, len(planted))
    assert not changed, f"replaced or written into: {changed}"
    assert not added, f"left behind: {added}"
    assert not os.path.exists("/proc/dsptrain-hostile.onnx") and not os.path.exists("/sys/dsptrain-hostile.onnx")


def test_special_outputs_as_a_user_runs_them(tmp_path, planted):
    picked = [c for c in planted if c.label.split()[0] in ("dev-null", "fifo", "own-checkpoint", "empty")]
    failures = check_subprocesses(picked, tmp_path)
    assert not failures, report(failures, len(picked))
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_the_python_api_raises_a_dsptrain_error(tmp_path, trained):
    run = trained["niti"][1]
    for out in ("", "a\0b.onnx", "/dev/null", str(run / "checkpoint.npz"), str(tmp_path)):
        with pytest.raises(dsptrain.UserError):
            dsptrain.export(run, out, "npz")


@pytest.mark.parametrize("fmt", ["onnx", "npz"])
def test_a_good_path_gets_a_new_file_and_an_old_export_is_replaced_atomically(tmp_path, trained, fmt):
    run = trained["niti"][1]
    out = tmp_path / "new" / "deeper" / f"model.{fmt}"
    code, stderr, _ = run_in_process(Case("new", ["export", str(run), "--format", fmt, "--out", str(out)]))
    assert code == 0, stderr
    first = os.stat(out)
    assert stat.S_ISREG(first.st_mode) and first.st_size > 1000
    code, stderr, _ = run_in_process(Case("again", ["export", str(run), "--format", fmt, "--out", str(out)]))
    assert code == 0, stderr
    assert os.stat(out).st_ino != first.st_ino  # a new file renamed into place, not rewritten
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temp file left


def test_random_names_in_a_fresh_folder_all_work(tmp_path, trained):
    rng = random.Random(33)
    run = trained["fp32"][1]
    for i in range(4):
        name = "".join(rng.choice("abcXYZ019 _-.é") for _ in range(rng.randint(1, 40))).strip(". ") or "x"
        out = tmp_path / f"r{i}" / f"{name}.onnx"
        code, stderr, _ = run_in_process(Case(name, ["export", str(run), "--out", str(out)]))
        assert code == 0 and out.is_file(), (name, stderr)
