"""The emulated DSP leaves nothing behind: its shared-memory arena has no name once
created (nothing to leak whatever signal ends the trainer), old arenas of dead owners
are reaped, and the server dies with its parent, even when stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
HOLDER = """
import sys, time
import numpy as np
from dsptrain.backends.ops_dsp import DspBackend
dsp = DspBackend(transport="emulated", timeout=60)
a = np.ones((4, 8), np.int8)
dsp.gemm_s8(a, a)
print(dsp.transport._proc.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """Dead, or a zombie no one has reaped yet (a container's init may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _arenas_of(pid: int) -> list[Path]:
    return list(SHM.glob(f"dsptrain-{pid}-*"))


@pytest.mark.parametrize(
    "signum,stop_server", [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGKILL, True)]
)
def test_server_and_arena_go_with_the_trainer(emulated_dsp_tools, signum, stop_server):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert line.strip().isdigit(), holder.stderr.read() if holder.poll() is not None else line
        server = int(line)
        assert not _arenas_of(holder.pid), "the arena has a name in the file system while in use"
        if stop_server:  # a stopped server never reads the EOF of its stdin
            os.kill(server, signal.SIGSTOP)
        holder.send_signal(signum)
        holder.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not _gone(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(server), f"DSP server {server} outlived its parent (signal {signum})"
        assert not _arenas_of(holder.pid)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_arenas_of_dead_owners_are_reaped():
    from dsptrain.backends.dsp_emulated import EmulatedTransport

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = SHM / f"dsptrain-{dead.pid}-leftover"
    stale.write_bytes(b"\0" * 4096)
    live = SHM / f"dsptrain-{os.getpid()}-mine"
    live.write_bytes(b"\0")
    try:
        transport = EmulatedTransport(1 << 20, timeout=5)
        assert not stale.exists(), "the arena of a dead owner was not removed"
        assert live.exists(), "the arena of a live owner was removed"
        transport.close()
    finally:
        stale.unlink(missing_ok=True)
        live.unlink(missing_ok=True)
