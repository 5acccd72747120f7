"""The README's import / fine-tune / export workflow, run as printed: its shell block
(`.venv/bin/python` and `.venv/bin/dsptrain` as this interpreter and its dsptrain) and its
Python block, in a scratch directory that sees the repository's bench/ and configs/."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from .helpers import need_torch

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Bring your own model"


def _blocks(language):
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_readme_workflow_runs_as_printed(tmp_path):
    need_torch()  # Fashion-MNIST: setup.sh installs Debian's dataset-fashion-mnist, as the e2e tests assume
    for name in ("bench", "configs"):
        (tmp_path / name).symlink_to(ROOT / name)
    (shell,) = _blocks("sh")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for line in filter(None, (text.strip() for text in shell.splitlines())):
        argv = shlex.split(line)
        argv = {".venv/bin/python": [sys.executable], ".venv/bin/dsptrain": [sys.executable, "-m", "dsptrain.cli"]}[
            argv[0]
        ] + argv[1:]
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, (line, result.stderr[-2000:])
    for name in ("lenet5-5to9.onnx", "lenet5-5to9-qdq.onnx", "lenet5-5to9.npz"):
        assert (tmp_path / "runs" / "finetune" / name).stat().st_size > 1000, name
    (python,) = _blocks("python")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(python, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "runs/finetune/python/model.onnx"))
    logits = session.run(None, {"input": np.zeros((2, 1, 28, 28), np.float32)})[0]
    assert logits.shape == (2, 5)
