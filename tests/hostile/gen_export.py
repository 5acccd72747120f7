"""A seeded generator of hostile `dsptrain export --out` paths.

Each case plants what its path names (a FIFO, a socket, a symlink, a read-only file, a
run's own files, a file standing where a folder should be) and says what the one error
line must hold. `snapshot` records every planted file's identity and bytes, so the test
can show that nothing the export did not create was replaced or written into.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
import stat
from pathlib import Path

from .harness import Case

FORMATS = ("onnx", "onnx-qdq", "npz")


def _plant(root: Path, sockets: list) -> dict[str, Path]:
    d = root / "planted"
    d.mkdir()
    fifo = d / "pipe.onnx"
    os.mkfifo(fifo)
    sock_path = d / "sock.onnx"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sockets.append(sock)
    afile = d / "plain.txt"
    afile.write_text("a user's notes\n")
    readonly = d / "readonly.onnx"
    readonly.write_bytes(b"keep me")
    readonly.chmod(0o444)
    folder = d / "folder"
    folder.mkdir()
    links = {"to-null": "/dev/null", "dangling": str(d / "nowhere"), "to-notes": str(afile)}
    for name, target in links.items():
        (d / f"link-{name}.onnx").symlink_to(target)
    return {"fifo": fifo, "socket": sock_path, "file": afile, "readonly": readonly, "folder": folder, "dir": d}


def export_paths(root: Path, run_dir: Path, seed: int = 32) -> tuple[list[Case], list]:
    """(cases, open sockets to close); `run_dir` holds the trained run's checkpoint.npz
    and metrics.jsonl, copied into root so the cases may aim at them."""
    rng = random.Random(seed)
    run = root / "run"
    shutil.copytree(run_dir, run)
    (run / "server.npz").write_bytes((run / "checkpoint.npz").read_bytes()[:64])
    (run / "rounds.json").write_text("[]")
    sockets: list = []
    p = _plant(root, sockets)
    hard = root / "hardlink.npz"
    os.link(run / "checkpoint.npz", hard)
    (root / "link-ckpt.npz").symlink_to(run / "checkpoint.npz")
    ckpt = str(run / "checkpoint.npz")
    paths = [
        ("dev-null", "/dev/null", ("/dev/null", "character device")),
        ("dev-zero", "/dev/zero", ("/dev/zero", "character device")),
        ("dev-full", "/dev/full", ("/dev/full", "character device")),
        ("fifo", str(p["fifo"]), ("pipe.onnx", "named pipe")),
        ("socket", str(p["socket"]), ("sock.onnx", "socket")),
        ("own-checkpoint", ckpt, ("checkpoint.npz", "reads")),
        ("own-checkpoint-dot", str(run / "." / "checkpoint.npz"), ("checkpoint.npz", "reads")),
        ("own-checkpoint-dotdot", str(run / ".." / "run" / "checkpoint.npz"), ("checkpoint.npz", "reads")),
        ("own-checkpoint-hardlink", str(hard), ("hardlink.npz", "reads")),
        ("own-checkpoint-symlink", str(root / "link-ckpt.npz"), ("link-ckpt.npz", "symbolic link")),
        ("metrics", str(run / "metrics.jsonl"), ("metrics.jsonl", "run's own")),
        ("server-checkpoint", str(run / "server.npz"), ("server.npz", "run's own")),
        ("rounds", str(run / "rounds.json"), ("rounds.json", "run's own")),
        ("link-to-null", str(p["dir"] / "link-to-null.onnx"), ("link-to-null.onnx", "symbolic link")),
        ("link-dangling", str(p["dir"] / "link-dangling.onnx"), ("link-dangling.onnx", "symbolic link")),
        ("link-to-notes", str(p["dir"] / "link-to-notes.onnx"), ("link-to-notes.onnx", "symbolic link")),
        ("read-only-file", str(p["readonly"]), ("readonly.onnx", "read-only")),
        ("directory", str(p["folder"]), ("folder", "directory")),
        ("trailing-slash", str(p["dir"] / "new") + "/", ("new", "directory")),
        ("dot", str(p["dir"] / "."), ("directory",)),
        ("dotdot", str(p["dir"] / ".."), ("directory",)),
        ("run-directory", str(run), ("run", "directory")),
        ("under-a-file", str(p["file"] / "x.onnx"), ("plain.txt", "non-directory")),
        ("deep-under-a-file", str(p["file"] / "a" / "b" / "x.onnx"), ("plain.txt", "non-directory")),
        ("under-a-fifo", str(p["fifo"] / "x.onnx"), ("pipe.onnx",)),
        ("name-too-long", str(p["dir"] / ("n" * rng.randint(256, 400))), ("too long",)),
        ("path-too-long", str(p["dir"] / "/".join("d" * 200 for _ in range(25)) / "x.onnx"), ("too long",)),
        ("empty", "", ("empty",)),
        ("blank", "   ", ("empty",)),
        ("proc", "/proc/dsptrain-hostile.onnx", ("/proc/dsptrain-hostile.onnx",)),
        ("sys", "/sys/dsptrain-hostile.onnx", ("/sys/dsptrain-hostile.onnx",)),
        ("proc-deep", "/proc/self/dsptrain/x.onnx", ("/proc/self/dsptrain/x.onnx",)),
    ]
    cases = []
    for label, out, needles in paths:
        fmt = rng.choice(FORMATS)
        cases.append(Case(f"{label} ({fmt})", ["export", str(run), "--format", fmt, "--out", out], needles))
    # the run's checkpoint as the output of each format, named through the run directory
    for fmt in FORMATS:
        cases.append(
            Case(f"own-checkpoint-{fmt}", ["export", str(run), "--format", fmt, "--out", ckpt], ("checkpoint.npz",))
        )
    return cases, sockets


def snapshot(root: Path) -> dict:
    """Identity and content of every entry under root (and the devices cases aim at):
    (type, inode, size, mtime, sha256 of a regular file's bytes)."""
    seen = {}
    for path in [*sorted(root.rglob("*")), Path("/dev/null"), Path("/dev/zero"), Path("/dev/full")]:
        st = os.lstat(path)
        digest = None
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        seen[str(path)] = (
            stat.S_IFMT(st.st_mode),
            st.st_ino,
            st.st_size if digest else 0,
            digest,
            st.st_mtime_ns if digest else 0,
        )
    return seen
