"""Energy per batch in training: recorded per step, and a power monitor's trace written
after the run is aligned with the steps afterwards."""

import dataclasses
import json
import time

import dsptrain
import pytest


def step_records(path):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "step"]


def test_estimate_is_recorded_and_labelled(small_run, tmp_path):
    run = dataclasses.replace(small_run("niti", epochs=1, train_limit=256), energy="estimate")
    trainer = dsptrain.Trainer(run, backend="cpu", out_dir=tmp_path, progress=False)
    trainer.fit()
    records = step_records(tmp_path / "metrics.jsonl")
    assert len(records) == 4
    assert all(r["energy_j"] > 0 and r["energy_meter"].startswith("estimate") for r in records)


def test_trace_written_after_the_run_is_aligned_afterwards(small_run, tmp_path):
    trace = tmp_path / "monitor.csv"
    run = dataclasses.replace(small_run("niti", epochs=1, train_limit=256), energy=f"trace:{trace}")
    started = time.time()
    trainer = dsptrain.Trainer(run, backend="cpu", out_dir=tmp_path / "out", progress=False)
    with pytest.warns(RuntimeWarning, match="trace not aligned"):
        trainer.fit()  # the monitor has not written its file yet
    records = step_records(tmp_path / "out" / "metrics.jsonl")
    assert all(r["energy_j"] is None or r["energy_j"] != r["energy_j"] for r in records)  # NaN/None
    ended = time.time()
    rows = [f"{started - 1 + i * 0.01:.3f},0.5,4.0" for i in range(int((ended - started + 2) / 0.01))]
    trace.write_text("timestamp(s),current(A),voltage(V)\n" + "\n".join(rows) + "\n")
    assert trainer.realign_energy() == 4
    records = step_records(tmp_path / "out" / "metrics.jsonl")
    for r in records:  # a constant 2 W monitor: energy = 2 W x the step's wall time
        assert r["energy_meter"].startswith("trace")
        assert r["energy_j"] == pytest.approx(2.0 * r["time_s"], rel=0.5, abs=2e-3)
