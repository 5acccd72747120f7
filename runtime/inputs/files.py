"""Open a user's file only if it is a regular file of bounded size; never block on it.

A path can name a directory, a FIFO (whose open and read block until a writer comes),
a device (/dev/zero reads forever), a socket or a symlink loop. Each gets one sentence.
The file is opened with O_NONBLOCK and checked again with fstat, so a path swapped for
a FIFO between the two checks cannot hang the reader either.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "is a directory"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a file"),
    (stat.S_ISCHR, "is a character device, not a file"),
    (stat.S_ISBLK, "is a block device, not a file"),
    (stat.S_ISSOCK, "is a socket, not a file"),
)
_ERRNO = {
    errno.ENOENT: "does not exist",
    errno.ELOOP: "is a symlink loop (too many levels of symbolic links)",
    errno.EACCES: "is not readable (permission denied)",
    errno.ENOTDIR: "has a non-directory in its path",
    errno.ENAMETOOLONG: "is too long a path",
    errno.EISDIR: "is a directory",
}


def _kind_problem(mode: int) -> str | None:
    for test, text in _KINDS:
        if test(mode):
            return text
    return None if stat.S_ISREG(mode) else "is not a regular file"


def describe_os_error(exc: OSError) -> str:
    return _ERRNO.get(exc.errno, f"cannot be read ({exc.strerror or exc})")


def check_regular(path: str | Path, what: str) -> str | None:
    """Why `path` cannot be read as a `what` file, or None when it is a regular file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return describe_os_error(exc)
    except ValueError:  # an embedded NUL byte
        return "is not a valid path"
    problem = _kind_problem(st.st_mode)
    return f"{problem}: expected a {what} file" if problem else None


@contextmanager
def _open_regular(path: str | Path, what: str, error):
    """(fd, its fstat) of regular file `path`, opened without blocking (a FIFO swapped in
    after the check cannot hang the read) and checked again once open; closed after.
    An OSError inside the block becomes `error` naming the path."""
    problem = check_regular(path, what)
    if problem:
        raise error(f"{path}: {problem}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: {describe_os_error(exc)}") from None
    try:
        st = os.fstat(fd)
        problem = _kind_problem(st.st_mode)
        if problem:
            raise error(f"{path}: {problem}: expected a {what} file")
        yield fd, st
    except OSError as exc:
        raise error(f"{path}: {describe_os_error(exc)}") from None
    finally:
        os.close(fd)


def read_limited(path: str | Path, what: str, limit: int, error) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them.

    `error(message)` builds the exception raised for a problem; the message starts with
    the path. `what` names the kind of file in messages ("run config", "checkpoint").
    """
    with _open_regular(path, what, error) as (fd, st):
        if st.st_size > limit:
            raise error(f"{path}: {st.st_size} bytes is more than a {what} may be ({limit} bytes)")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise error(f"{path}: more than a {what} may be ({limit} bytes)")
        return b"".join(chunks)


def read_slice(path: str | Path, what: str, offset: int, length: int, error) -> bytes:
    """Exactly `length` bytes at `offset` of regular file `path` (an ONNX model's external
    data): the same checks as read_limited, and the range must lie inside the file."""
    with _open_regular(path, what, error) as (fd, st):
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise error(f"{path}: bytes {offset}..{offset + length} are not inside the file ({st.st_size} bytes)")
        chunks, total = [], 0
        while total < length:
            chunk = os.pread(fd, min(1 << 24, length - total), offset + total)
            if not chunk:
                raise error(f"{path}: ends before byte {offset + length} (it shrank while being read)")
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)


# ---------------------------------------------------------------- temp files of atomic writes


def temp_prefix(target: Path) -> str:
    """The prefix of `target`'s temp files: hidden, with the writer's pid, so a later run
    can tell a crashed writer's leftovers from a live one's (reap_stale_temps)."""
    return f".{target.name}.{os.getpid()}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_temps(directory: Path, names: tuple[str, ...]) -> list[Path]:
    """Remove temp files of `names` in `directory` whose writer is gone (a kill -9 mid-write)."""
    removed = []
    for name in names:
        for tmp in Path(directory).glob(f".{name}.*"):
            pid_text = tmp.name[len(name) + 2 :].split(".", 1)[0]
            # no pid: the random name of an older writer (mkstemp alone), reaped as stale
            if pid_text.isdigit() and int(pid_text) != os.getpid() and _pid_alive(int(pid_text)):
                continue
            try:
                tmp.unlink()
                removed.append(tmp)
            except OSError:
                pass
    return removed
