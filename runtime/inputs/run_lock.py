"""One run per output directory: an advisory lock held for the life of the run.

Two runs on one directory would both write its metrics.jsonl and checkpoint.npz (lines
interleaved, one run lost). The run takes `OUT/.dsptrain.lock` with flock(2) and writes
its pid, host and start time into it; a second run finds the lock held and is refused
with one line naming the owner. The kernel drops a flock when its holder exits, however
it exits (kill -9 too), so a lock file left by a dead run is stale by construction: the
next run takes it over (and says whose it was), never fooled by a reused pid.

The file is removed when the run ends. A run that opened it just before the removal
would hold a lock on a name no longer in the directory; so after taking the lock the
run checks that the name still leads to the file it locked, and starts over if not.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from pathlib import Path

from ..errors import UserError
from .files import describe_os_error

LOCK_NAME = ".dsptrain.lock"


class RunLock:
    """The held lock of one output directory; `release()` (or process exit) frees it."""

    def __init__(self, path: Path, fd: int, previous: str):
        self.path, self._fd = path, fd
        self.previous = previous  # the stale owner's line, when a dead run's file was taken over

    @classmethod
    def acquire(cls, directory: str | Path) -> RunLock:
        directory = Path(directory)
        path = directory / LOCK_NAME
        for _ in range(20):  # each retry: the holder removed the file as we opened it
            fd = _open(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read(fd)
                os.close(fd)
                raise UserError(
                    f"{directory}: another dsptrain run is using this output directory "
                    f"({owner or 'owner unknown'}); wait for it to finish, or give --out DIR"
                ) from None
            except OSError as exc:
                os.close(fd)
                raise UserError(f"{path}: cannot be locked ({exc.strerror})") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _read(fd)
            os.ftruncate(fd, 0)
            os.pwrite(
                fd,
                f"pid {os.getpid()} on {socket.gethostname()}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())}\n".encode(),
                0,
            )
            return cls(path, fd, previous)
        raise UserError(f"{path}: the lock file keeps being replaced; is another program removing it?")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else describe_os_error(exc)
        raise UserError(f"{path}: {why}: cannot hold the run's lock there") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}: is not a regular file: cannot hold the run's lock there")
    return fd


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
