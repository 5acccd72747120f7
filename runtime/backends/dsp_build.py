"""Finds or builds the emulated DSP server (dsp_kernels/ -> a static Hexagon ELF).

The build goes to a cache directory keyed by a hash of the kernel sources
(~/.cache/dsptrain/dsp-<hash>/, or $DSPTRAIN_CACHE), so editing a kernel rebuilds it
and concurrent processes share one build (a file lock serialises them).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

TOOLS = {"qemu-hexagon": "qemu-user", "clang-16": "clang-16", "ld.lld-16": "lld-16"}
INSTALL_HINT = "apt-get install qemu-user clang-16 lld-16"


def kernels_dir() -> Path:
    """dsp_kernels/ next to the package (editable install), or $DSPTRAIN_DSP_KERNELS."""
    env = os.environ.get("DSPTRAIN_DSP_KERNELS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "dsp_kernels"


def missing_tools() -> list[str]:
    """Debian packages to install for the emulated DSP ([] when all tools are there)."""
    return [pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None]


def source_hash(src: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(src.glob("*")):
        if path.suffix in (".c", ".h") or path.name == "Makefile":
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def server_path() -> Path:
    src = kernels_dir()
    cache = Path(os.environ.get("DSPTRAIN_CACHE", Path.home() / ".cache" / "dsptrain"))
    return cache / f"dsp-{source_hash(src)}" / "dsp_server"


def ensure_server() -> Path:
    """The server ELF, built if needed. Raises RuntimeError saying what is missing."""
    target = server_path()
    if target.exists():
        return target
    src = kernels_dir()
    if not (src / "ops.h").exists():
        raise RuntimeError(f"DSP kernel sources not found in {src} (set DSPTRAIN_DSP_KERNELS)")
    missing = [p for p in missing_tools() if p != "qemu-user"]
    if missing:
        raise RuntimeError(f"cannot build the emulated DSP: missing {', '.join(missing)}; {INSTALL_HINT}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            proc = subprocess.run(
                ["make", "-s", "-C", str(src), f"BUILD={target.parent}"], capture_output=True, text=True
            )
            if proc.returncode != 0 or not target.exists():
                raise RuntimeError(f"building the emulated DSP failed:\n{proc.stdout}{proc.stderr}")
    return target
