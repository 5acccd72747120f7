"""The README's "Train on your own data" and docs/data.md run as printed, in a folder
holding `photos/` (3 classes of PNG and JPEG photos) and `photos.npz` made here."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .helpers import class_images, write_folder

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return "## Train on your own data" + text.split("## Train on your own data", 1)[1].split("\n## ", 1)[0]


@pytest.fixture
def workdir(tmp_path):
    rng = np.random.default_rng(8)
    images, labels = class_images(rng, 90, shape=(28, 28, 1))
    write_folder(tmp_path / "photos", images[:60], labels[:60])
    write_folder(tmp_path / "photos", images[60:], labels[60:], fmt="jpg")
    np.savez(tmp_path / "photos.npz", images=images, labels=labels)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    return tmp_path


def run_blocks(markdown: str, cwd: Path) -> int:
    """Write each yaml block to the file its first line names, run each sh and python block; how many ran."""
    env = {**os.environ, "DSPTRAIN_CACHE": str(cwd / "dsptrain-cache"), "MPLBACKEND": "Agg"}
    ran = 0
    for language, body in FENCE.findall(markdown):
        if language == "yaml":
            name = re.match(r"# (\S+\.yaml)\n", body)
            assert name, f"a yaml block without its file name on its first line:\n{body}"
            (cwd / name.group(1)).write_text(body)
            continue
        if language == "sh":
            for line in body.splitlines():
                words = line.split("  #")[0].split()
                assert words[0] == "dsptrain", line
                done = subprocess.run(
                    [sys.executable, "-m", "dsptrain.cli", *words[1:]],
                    cwd=cwd,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
                ran += 1
        elif language == "python":
            done = subprocess.run(
                [sys.executable, "-c", body], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"{body}\n{done.stderr[-2000:]}"
            ran += 1
    return ran


def test_readme_section_runs_as_printed(workdir):
    assert run_blocks(readme_section(), workdir) == 3
    assert (workdir / "runs" / "photos-niti" / "checkpoint_best.npz").exists()
    assert (workdir / "runs" / "arrays-fp32" / "checkpoint.npz").exists()


def test_docs_data_runs_as_printed(workdir):
    assert run_blocks((ROOT / "docs" / "data.md").read_text(), workdir) == 3
    assert (workdir / "runs" / "photos" / "checkpoint_best.npz").exists()
    assert list((workdir / "cache").glob("*.npy"))  # the folder's decoding cache, where photos.yaml says
