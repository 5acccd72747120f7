"""Where dsptrain may write a file a user names (`dsptrain export --out`): checked before
anything is built, so a bad path costs nothing and never harms what is there.

The file is always written to a temp file beside it and renamed over it (atomic), so a
reader never sees half a file and nothing is ever written *into* an existing inode. What
may be replaced: a regular file the user may write. What is refused, by name: a
directory, a character or block device (/dev/null), a FIFO, a socket, a symlink (the
rename would replace the link, not what it points at), a read-only file, the file being
read (the checkpoint, however the path spells it), a run directory's own files
(checkpoint.npz, metrics.jsonl, the run lock, the federated server's files), and paths
that cannot be a file (empty, under a file, too long, in a folder that cannot be written).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import UserError
from .files import _kind_problem, describe_os_error
from .run_lock import LOCK_NAME

# files a training or federated run keeps in its output directory
RUN_FILES = ("checkpoint.npz", "metrics.jsonl", LOCK_NAME, "server.npz", "rounds.json")
_RUN_MARKERS = ("checkpoint.npz", "metrics.jsonl", "server.npz")
_WRITE_ERRNO = {
    errno.EACCES: "is in a folder that cannot be written (permission denied)",
    errno.EROFS: "is on a read-only file system",
    errno.ENOSPC: "cannot be written: no space left",
    errno.EDQUOT: "cannot be written: disk quota exceeded",
}


def check_output(path, what: str, reads: tuple = ()) -> Path:
    """`path` as a Path if a `what` file may be written there; else a UserError naming it.
    `reads`: files this command reads, which it must not replace."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not text or not text.strip():
        raise UserError(f"the {what} path is empty; give a file name")
    if "\0" in text:
        raise UserError(f"{text!r}: is not a valid path (a NUL byte)")
    if text.endswith(os.sep) or Path(text).name in ("", ".", ".."):
        raise UserError(f"{text}: names a directory; give a file name for the {what}")
    out = Path(text)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"{out}: {describe_os_error(exc)}") from None
    if st is not None:
        _check_existing(out, st, what, reads)
    parent = out.parent
    try:
        parent_st = os.stat(parent)
    except FileNotFoundError:
        return out  # created by the writer (mkdir -p), unless a part of it is a file: see write_output
    except OSError as exc:
        raise UserError(f"{out}: {describe_os_error(exc)}") from None
    if not stat.S_ISDIR(parent_st.st_mode):
        raise UserError(f"{out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{out}: {_WRITE_ERRNO[errno.EACCES]} ({parent})")
    return out


def _check_existing(out: Path, st, what: str, reads: tuple) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UserError(
            f"{out}: is a symbolic link (to {os.readlink(out)}); give the file itself, "
            f"the {what} replaces what is at the path"
        )
    problem = _kind_problem(st.st_mode)
    if problem:
        raise UserError(f"{out}: {problem}; the {what} is written only as a new regular file")
    for source in reads:
        try:
            same = os.path.samefile(out, source)
        except OSError:
            same = False
        if same:
            raise UserError(f"{out}: is {source}, which this command reads; write the {what} elsewhere")
    if out.name in RUN_FILES and any((out.parent / marker).exists() for marker in _RUN_MARKERS):
        raise UserError(f"{out}: is the run's own {out.name} in {out.parent}; write the {what} elsewhere")
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):  # mode bits: root's access() says yes
        raise UserError(f"{out}: is read-only (mode {stat.filemode(st.st_mode)}); dsptrain does not replace it")


def write_error(out, exc: OSError) -> UserError:
    """The UserError for an OSError met while writing `out` (after check_output)."""
    reason = _WRITE_ERRNO.get(exc.errno) or describe_os_error(exc)
    if exc.errno == errno.ENOENT:
        reason = "has a folder that cannot be created"
    elif exc.errno in (errno.EEXIST, errno.ENOTDIR):
        reason = "has a non-directory in its path"
    return UserError(f"{out}: {reason}")
