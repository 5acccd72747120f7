"""Models made here (torch, onnx.helper), run configs in a temp directory, and forwards
of the same images through torch and dsptrain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dsptrain
import numpy as np


def need_torch():
    """torch is in the test extra: skip locally without it, fail under CI."""
    import pytest

    try:
        import torch
    except ImportError:
        message = "needs torch: pip install -e '.[test]' installs torch==2.13.0"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    torch.manual_seed(0)
    return torch


def images(count=8, shape=(28, 28, 1), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, *shape)).astype(np.uint8)


def torch_logits(net, pixels: np.ndarray) -> np.ndarray:
    """What the torch module computes from the input dsptrain feeds: (p - 128) / 128, NCHW."""
    import torch

    x = torch.from_numpy(((pixels.astype(np.float32) - 128) / 128).transpose(0, 3, 1, 2).copy())
    net.eval()
    with torch.no_grad():
        return net(x).numpy().astype(np.float64)


def torch_sgd_step(net, pixels: np.ndarray, labels: np.ndarray, optimizer_settings) -> None:
    """One step of PyTorch's SGD (the recipe's lr, momentum and weight decay) on the trainable
    parameters of `net`, in the mode `net` is in, on what dsptrain feeds: (p - 128) / 128, NCHW."""
    import torch

    o = optimizer_settings
    optimizer = torch.optim.SGD(
        [p for p in net.parameters() if p.requires_grad], lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay
    )
    x = torch.from_numpy(((pixels.astype(np.float32) - 128) / 128).transpose(0, 3, 1, 2).copy())
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(net(x), torch.from_numpy(labels)).backward()
    optimizer.step()


def write_run(directory: Path, recipe: str, body: str = "", name: str = "t") -> Path:
    path = Path(directory) / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nrecipe: {recipe}\nbackend: cpu\nenergy: estimate\n"
        f"data: {{dataset: synthetic, train_limit: 64, test_limit: 32}}\n{body}"
    )
    return path


def trainer_for(model, recipe: str, tmp_path, body: str = "train: {epochs: 1, batch_size: 16}\n"):
    run = dsptrain.load_run(write_run(tmp_path, recipe, body))
    return dsptrain.Trainer(run, model=model, progress=False, out_dir=tmp_path / "out")


def dsptrain_logits(model, recipe: str, pixels, tmp_path) -> np.ndarray:
    trainer = trainer_for(model, recipe, tmp_path)
    try:
        return trainer.predict(pixels)
    finally:
        trainer.close()


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    """The dsptrain command in a subprocess (its exit status and stderr as a user sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "dsptrain.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def cli_start(*args, cwd=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dsptrain.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def trained_checkpoint(tmp_path, recipe, body="model: {name: lenet5}\n", name=None, steps=8, batch=32):
    """A checkpoint after `steps` training steps of `batch` synthetic images (the path)."""
    from dsptrain.data import synthetic

    name = name or f"exp-{recipe}"
    body += f"train: {{epochs: 1, batch_size: {batch}}}\n"
    run = dsptrain.load_run(write_run(tmp_path, recipe, body, name=name))
    trainer = dsptrain.Trainer(run, progress=False, out_dir=Path(tmp_path) / name)
    data = synthetic("train", trainer.model.input_shape, count=steps * batch)
    try:
        for i in range(0, steps * batch, batch):
            trainer.step(data.images[i : i + batch], data.labels[i : i + batch])
        return trainer.save()
    finally:
        trainer.close()
