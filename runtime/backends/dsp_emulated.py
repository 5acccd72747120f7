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
        fd, self.path = tempfile.mkstemp(prefix=f"dsptrain-{os.getpid()}-", dir=shm)
        weakref.finalize(self, _remove, self.path)
        os.ftruncate(fd, arena_bytes)
        self._mm = mmap.mmap(fd, arena_bytes)
        os.close(fd)
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
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True)
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
        _remove(self.path)

    # ------------------------------------------------------------ batches
    def run(self, descs: list) -> None:
        """Run descriptors in order; statuses, results and costs are written back into them.
        Raises BackendError (the server is gone after it) or returns with statuses set."""
        self.start()
        for first in range(0, len(descs), dsp_abi.RING_SLOTS):
            chunk = descs[first:first + dsp_abi.RING_SLOTS]
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
                ctypes.memmove(ctypes.addressof(d), ctypes.addressof(self._ring[i]),
                               ctypes.sizeof(dsp_abi.OpDesc))
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
                raise BackendError("dsp", f"emulated server did not answer {what} within "
                                          f"{self.timeout:g} s (DSPTRAIN_DSP_TIMEOUT); killed it")
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


def _qemu_version() -> str:
    try:
        out = subprocess.run([shutil.which("qemu-hexagon"), "--version"], capture_output=True,
                             text=True, timeout=10).stdout.split()
        return f"qemu-hexagon {out[2]}" if len(out) > 2 else "qemu-hexagon"
    except (OSError, subprocess.SubprocessError, TypeError):
        return "qemu-hexagon"
