"""kill -9 mid-epoch and --resume, with augmentation on and a validation split, from an
image folder: the same weights and metrics as a run never interrupted."""

import json
import signal
import subprocess
import sys
import time

import dsptrain
import numpy as np
import yaml

from .helpers import class_images, write_folder


def test_kill_and_resume_with_augmentation_matches_an_uninterrupted_run(tmp_path):
    images, labels = class_images(np.random.default_rng(6), 240, shape=(28, 28, 1))
    write_folder(tmp_path / "photos", images, labels)
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "resume",
                "recipe": "niti",
                "model": {"name": "lenet5", "num_classes": 3},
                "backend": "ref",
                "data": {
                    "folder": str(tmp_path / "photos"),
                    "cache_dir": str(tmp_path / "cache"),
                    "val_fraction": 0.2,
                    "test_fraction": 0.1,
                    "augment": {
                        "flip": True,
                        "crop_padding": 3,
                        "brightness": 0.2,
                        "contrast": 0.2,
                        "resized_crop": [0.6, 1.0],
                    },
                },
                "train": {
                    "epochs": 3,
                    "batch_size": 8,
                    "seed": 4,
                    "checkpoint_every_steps": 5,
                    "checkpoint_best": "val_accuracy",
                    "lr_schedule": {"kind": "cosine", "warmup_steps": 6},
                },
            }
        )
    )
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    command = [sys.executable, "-m", "dsptrain.cli", "train", str(config), "--quiet"]
    process = subprocess.Popen(command + ["--out", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = killed / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:  # mid-way through epoch 2 (22 steps an epoch)
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 31:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    _, meta = dsptrain.checkpoint.load(killed / "checkpoint.npz")
    assert 0 < meta["batch_in_epoch"] and meta["global_step"] < 66, meta  # killed mid-epoch, before the end
    resumed = subprocess.run(command + ["--out", str(killed), "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0 and "resuming" in resumed.stderr, resumed.stderr
    subprocess.run(command + ["--out", str(whole)], check=True, capture_output=True)

    for name in ("checkpoint.npz", "checkpoint_best.npz"):
        a, meta_a = dsptrain.checkpoint.load(killed / name)
        b, meta_b = dsptrain.checkpoint.load(whole / name)
        assert meta_a["global_step"] == meta_b["global_step"]
        for key in b:
            np.testing.assert_array_equal(a[key].q, b[key].q)
            assert a[key].e == b[key].e
    drop = (
        "time_s",
        "seconds",
        "samples_per_s",
        "rss_bytes",
        "peak_rss_bytes",
        "step_peak_rss_bytes",
        "rss_growth_bytes",
        "energy_j",
        "backend_time_s",
        "overlap_s",
        "dsp_model_s",
    )

    def records(path):
        return [
            {k: v for k, v in json.loads(line).items() if k not in drop and not k.endswith("_s")}
            for line in (path / "metrics.jsonl").read_text().splitlines()
        ]

    ra, rb = records(killed), records(whole)
    assert [r["step"] for r in ra if r["kind"] == "step"] == list(range(66))
    epochs = lambda rs: [
        {
            k: r[k]
            for k in ("epoch", "train_loss", "train_accuracy", "val_accuracy", "val_loss", "test_accuracy", "test_loss")
        }
        for r in rs
        if r["kind"] == "epoch"
    ]
    assert epochs(ra) == epochs(rb) and len(epochs(ra)) == 3
    losses = lambda rs: [r["loss"] for r in rs if r["kind"] == "step"]
    assert losses(ra) == losses(rb)
