"""The emulated DSP transport: the Hexagon server ELF under qemu-hexagon.

The arena is a file in /dev/shm mapped by both processes; the op ring lives inside
it. A batch is: descriptors written into ring slots, one `dspt_cmd` on the server's
stdin, one `dspt_reply` back on its stdout (read with a timeout). A dead, hung or
confused server raises BackendError and is killed; the next batch starts a new one
on the same arena, so tensors resident in the arena survive the restart.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import weakref

from ..errors import BackendError
from . import dsp_abi, dsp_build
from .dsp_arena import Arena

SCRATCH_BYTES = 64 << 20


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class EmulatedTransport:
    name = "emulated"

    def __init__(self, arena_bytes: int, timeout: float):
        self.timeout = timeout
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        reap_stale_arenas(shm or tempfile.gettempdir())
        fd, path = tempfile.mkstemp(prefix=f"dsptrain-{os.getpid()}-", dir=shm)
        # No name outlives this process, whatever signal ends it: the file is unlinked at
        # once and reached by the server through the inherited descriptor (/proc/self/fd/N).
        _remove(path)
        os.ftruncate(fd, arena_bytes)
        self._mm = mmap.mmap(fd, arena_bytes)
        self._fd = fd
        weakref.finalize(self, os.close, fd)
        self.path = f"/proc/self/fd/{fd}"  # as the server sees it (the descriptor is passed to it)
        self.arena = Arena(self._mm, arena_bytes)
        self._ring = (dsp_abi.OpDesc * dsp_abi.RING_SLOTS).from_buffer(self._mm, dsp_abi.RING_OFFSET)
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self.op_mask = 0
        self.restarts = 0

    # ------------------------------------------------------------ discovery
    @staticmethod
    def available() -> tuple[bool, str]:
        missing = dsp_build.missing_tools()
        if missing:
            return False, f"no qemu-hexagon/clang-16/lld-16 ({dsp_build.INSTALL_HINT})"
        built = "built" if dsp_build.server_path().exists() else "built on first use"
        return True, f"emulated: {_qemu_version()} + server {built}"

    # ------------------------------------------------------------ process
    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.alive:
            return
        self.kill()
        try:
            server = dsp_build.ensure_server()
        except RuntimeError as exc:
            raise BackendError("dsp", str(exc)) from None
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            ["qemu-hexagon", str(server), self.path, str(self.arena.nbytes), str(SCRATCH_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            pass_fds=(self._fd,),
            preexec_fn=_die_with_parent(os.getpid()),
        )
        hello = dsp_abi.Hello.from_buffer_copy(self._read(ctypes.sizeof(dsp_abi.Hello), "handshake"))
        try:
            dsp_abi.check_hello(hello)
        except ValueError as exc:
            self.kill()
            raise BackendError("dsp", f"emulated server: {exc}") from None
        self.op_mask = hello.op_mask

    def kill(self) -> None:
        """Stop our server process (its own session, so only it) and forget it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        if self.alive:
            try:
                self._write(bytes(dsp_abi.Cmd(dsp_abi.MAGIC, dsp_abi.CMD_QUIT, 0, 0)))
                self._proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired, BackendError):
                pass
        self.kill()

    # ------------------------------------------------------------ batches
    def run(self, descs: list) -> None:
        """Run descriptors in order; statuses, results and costs are written back into them.
        Raises BackendError (the server is gone after it) or returns with statuses set."""
        self.start()
        for first in range(0, len(descs), dsp_abi.RING_SLOTS):
            chunk = descs[first : first + dsp_abi.RING_SLOTS]
            for i, d in enumerate(chunk):
                d.status = -1
                ctypes.pointer(self._ring[i])[0] = d
            self._write(bytes(dsp_abi.Cmd(dsp_abi.MAGIC, dsp_abi.CMD_RUN, 0, len(chunk))))
            what = "+".join(dsp_abi.OP_NAMES.get(d.op, str(d.op)) for d in chunk)
            reply = dsp_abi.Reply.from_buffer_copy(self._read(ctypes.sizeof(dsp_abi.Reply), what))
            if reply.magic != dsp_abi.MAGIC:
                self.kill()
                raise BackendError("dsp", f"emulated server sent a bad reply to {what}")
            for i, d in enumerate(chunk):
                ctypes.memmove(ctypes.addressof(d), ctypes.addressof(self._ring[i]), ctypes.sizeof(dsp_abi.OpDesc))
            if reply.status != dsp_abi.OK:
                return

    def _write(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError, AttributeError):
            self._died("a command")

    def _read(self, n: int, what: str) -> bytes:
        fd = self._proc.stdout.fileno()
        data = b""
        deadline = time.monotonic() + self.timeout
        while len(data) < n:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                self.kill()
                self.restarts += 1
                raise BackendError(
                    "dsp",
                    f"emulated server did not answer {what} within "
                    f"{self.timeout:g} s (DSPTRAIN_DSP_TIMEOUT); killed it",
                )
            chunk = os.read(fd, n - len(data))
            if not chunk:
                self._died(what)
            data += chunk
        return data

    def _died(self, what: str):
        code = self._proc.poll() if self._proc else None
        tail = b""
        if self._stderr is not None:
            self._stderr.seek(0)
            tail = self._stderr.read()[-300:]
        self.kill()
        self.restarts += 1
        msg = f"emulated server died (exit {code}) running {what}"
        raise BackendError("dsp", msg + (f": {tail.decode(errors='replace').strip()}" if tail else ""))


def _die_with_parent(parent: int):
    """A preexec_fn: the server gets SIGKILL when this process dies (Linux
    PR_SET_PDEATHSIG, kept across exec), even if it is stopped or busy in a kernel, when
    reading EOF from its stdin would not end it. Without prctl (not Linux) it does nothing.

    The signal follows the thread that started the server, so servers are started from
    threads that live as long as the backend (the executor's DSP queue does)."""
    try:
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    PR_SET_PDEATHSIG = 1

    def preexec():
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(70)

    return preexec


def reap_stale_arenas(directory: str) -> list[str]:
    """Remove arena files `dsptrain-<pid>-*` whose owner pid is gone (left by an older
    dsptrain killed with SIGKILL; arenas are unlinked at creation now)."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "dsptrain" or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        try:
            os.kill(pid, 0)
            continue  # its owner lives
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        path = os.path.join(directory, name)
        _remove(path)
        removed.append(path)
    return removed


def _qemu_version() -> str:
    try:
        out = subprocess.run(
            [shutil.which("qemu-hexagon"), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.split()
        return f"qemu-hexagon {out[2]}" if len(out) > 2 else "qemu-hexagon"
    except (OSError, subprocess.SubprocessError, TypeError):
        return "qemu-hexagon"
