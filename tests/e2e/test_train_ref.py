"""Training end to end on the reference backend: it learns, stays integer, resumes exactly."""

import json
import os
import signal
import subprocess
import sys
import time

import dsptrain
import numpy as np
import yaml
from dsptrain.numerics import QTensor


def test_niti_learns_well_above_chance(small_run, tmp_path):
    trainer = dsptrain.Trainer(
        small_run("niti", epochs=2, train_limit=4000), backend="ref", out_dir=tmp_path, progress=False
    )
    history = trainer.fit()
    assert history[-1]["test_accuracy"] > 0.65, history
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == 2 * 63 and all(r["time_s"] > 0 for r in steps)
    assert steps[-1]["loss"] < steps[0]["loss"]


def test_fp32_learns_well_above_chance(small_run, tmp_path):
    trainer = dsptrain.Trainer(
        small_run("fp32", epochs=2, train_limit=4000), backend="ref", out_dir=tmp_path, progress=False
    )
    assert trainer.fit()[-1]["test_accuracy"] > 0.65


def test_integer_recipe_stays_integer_at_every_op(small_run, tmp_path, monkeypatch):
    trainer = dsptrain.Trainer(small_run("niti"), backend="ref", out_dir=tmp_path, progress=False)
    seen = []
    original = dict(trainer.algorithm.OPS)

    def checked(kind):
        def run(backend, op, env, ctx):
            outputs = original[kind](backend, op, env, ctx)
            for name, value in outputs.items():
                array = value.q if isinstance(value, QTensor) else value
                seen.append((op.name, name, array.dtype))
                assert array.dtype.kind in "iub", f"{op.name} wrote {name} as {array.dtype}"
                if isinstance(value, QTensor):
                    assert array.dtype == np.int8 and np.abs(array.astype(int)).max(initial=0) <= 127
            return outputs

        return run

    monkeypatch.setattr(trainer.algorithm, "OPS", {k: checked(k) for k in original})
    images, labels = trainer.train_data.images[:32], trainer.train_data.labels[:32]
    trainer.step(images, labels)
    assert len(seen) >= len(trainer.plans.get(32, True).graph.ops)


def test_resume_after_kill_matches_uninterrupted_run(small_run, tmp_path):
    """Kill `dsptrain train` mid-run with SIGKILL, resume it, and compare with a run never killed."""
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "resume",
                "recipe": "niti",
                "model": {"name": "lenet5"},
                "backend": "ref",
                "data": {"dataset": "fashion-mnist", "train_limit": 1280, "test_limit": 200},
                "train": {"epochs": 3, "batch_size": 64, "seed": 5, "checkpoint_every_steps": 7},
            }
        )
    )
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    command = [sys.executable, "-m", "dsptrain.cli", "train", str(config), "--quiet"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        command + ["--out", str(killed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    metrics = killed / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 30:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (killed / "checkpoint.npz").exists()
    resumed = subprocess.run(command + ["--out", str(killed), "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    subprocess.run(command + ["--out", str(whole)], env=env, check=True, capture_output=True)

    a, meta_a = dsptrain.checkpoint.load(killed / "checkpoint.npz")
    b, meta_b = dsptrain.checkpoint.load(whole / "checkpoint.npz")
    assert meta_a["global_step"] == meta_b["global_step"] == 60
    for name in b:
        np.testing.assert_array_equal(a[name].q, b[name].q)
        assert a[name].e == b[name].e
    steps = lambda p: [json.loads(line)["step"] for line in p.read_text().splitlines() if '"kind": "step"' in line]
    assert steps(killed / "metrics.jsonl") == steps(whole / "metrics.jsonl") == list(range(60))
