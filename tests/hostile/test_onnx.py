"""Hostile ONNX files: refused before anything trains, one named line, exit 2, from the
command line and as a dsptrain exception from Python; external data read only from
inside the model's folder."""

from __future__ import annotations

import random
import time

import dsptrain
import numpy as np
import pytest
import yaml
from dsptrain.interchange.onnx_import import load_onnx

from .gen_configs import BASE
from .gen_onnx import _external, base_model, hostile_onnx, write
from .harness import CASE_SECONDS, Case, check_cases, check_subprocesses, report

MIN_CASES = 150


def _plan_case(root, index, case) -> Case:
    doc = {**BASE, "recipe": "fp32", "model": {"onnx": str(case.path)}}
    config = root / f"run{index:03d}.yaml"
    config.write_text(yaml.safe_dump(doc))
    return Case(case.label, ["plan", str(config)], case.needles)


@pytest.fixture
def cases(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # the canary weights sit in the working directory
    made = hostile_onnx(tmp_path / "models", cwd)
    assert len(made) >= MIN_CASES, f"the generator made only {len(made)} cases"
    return made


def test_hostile_onnx_files_exit_2_with_one_named_line(tmp_path, cases):
    runs = tmp_path / "runs"
    runs.mkdir()
    failures = check_cases([_plan_case(runs, i, c) for i, c in enumerate(cases)])
    assert not failures, report(failures, len(cases))


def test_hostile_onnx_files_raise_a_dsptrain_error_from_python(cases):
    failures = []
    for case in cases:
        started = time.monotonic()
        try:
            dsptrain.load_model(case.path)
            failures.append(f"{case.label}: accepted")
        except dsptrain.DsptrainError as exc:
            missing = [n for n in case.needles if n not in str(exc)]
            if missing:
                failures.append(f"{case.label}: message lacks {missing}: {exc}")
        except Exception as exc:  # noqa: BLE001 -- what the test is looking for
            failures.append(f"{case.label}: {type(exc).__name__} outside dsptrain's errors: {exc}")
        if time.monotonic() - started > CASE_SECONDS:
            failures.append(f"{case.label}: took {time.monotonic() - started:.1f} s")
    assert not failures, report(failures, len(cases))


def test_the_canary_never_reaches_the_weights(cases):
    """The cases pointing at the working directory's or another folder's file are refused,
    so the canary bytes never become weights (an import would have them)."""
    pointed = [c for c in cases if "cwd-name" in c.label or "dotdot" in c.label or "symlink-out" in c.label]
    assert len(pointed) >= 6
    for case in pointed:
        with pytest.raises(dsptrain.DsptrainError, match="does not exist|outside the model's folder"):
            load_onnx(case.path)


@pytest.mark.parametrize("name", ["conv1.weight", "fcw"])
def test_external_data_inside_the_folder_is_read(tmp_path, name):
    model = base_model(random.Random(3))
    want = np.asarray(
        dsptrain.load_model(write(model, tmp_path / "inline.onnx")).initial_weights[
            "fc.w" if name == "fcw" else "conv1.w"
        ]
    )
    raw = _external(name, "data/weights.bin", offset=8)(model, tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "weights.bin").write_bytes(b"\x00" * 8 + raw)
    got = dsptrain.load_model(write(model, tmp_path / "external.onnx")).initial_weights
    np.testing.assert_array_equal(got["fc.w" if name == "fcw" else "conv1.w"], want)


def test_external_data_of_a_model_in_memory_is_refused(tmp_path):
    from dsptrain.interchange.onnx_import import from_proto

    model = base_model()
    _external("fcw", "w.bin")(model, tmp_path)
    with pytest.raises(dsptrain.DsptrainError, match="node 'fcw' \\(Constant\\).*in memory has no folder"):
        from_proto(model)


def test_special_files_as_a_user_runs_them(tmp_path, cases):
    picked = [c for c in cases if c.label in ("fifo", "dev-zero", "2.5GB")]
    picked += random.Random(7).sample([c for c in cases if c.label.startswith("external-")], 3)
    runs = tmp_path / "runs"
    runs.mkdir()
    started = time.monotonic()
    failures = check_subprocesses([_plan_case(runs, i, c) for i, c in enumerate(picked)], tmp_path / "cwd")
    assert not failures, report(failures, len(picked))
    assert time.monotonic() - started < 60
