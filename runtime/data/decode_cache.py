"""Decoded images kept on disk, keyed by the files' content, read back as a memory map.

An image folder is decoded once: the uint8 (N, H, W, C) array goes to
`<cache_dir>/<key>.npy`, where the key is a SHA-256 over the target shape, the decoder's
version and every file's label, name and content. The next run (or any run of the same
files at the same shape) hashes the files, finds the key and maps the array: nothing is
decoded, and a batch reads only its rows. A changed, added or removed file changes the
key. The file is written under a temp name and renamed, so a killed writer leaves no
half-written cache behind (its temp is removed by the next run).

Hashing every photo on every run would read them all; as git's index and ccache's direct
mode do, each folder's digests are remembered beside the cache (`digests-<folder>.json`)
with the size, modification time and inode they were computed at, and a file whose three
are unchanged is not read again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..inputs.files import reap_stale_temps, temp_prefix

DECODER_VERSION = 1  # raise when the decoding (resize, crop, colour conversion) changes its pixels


def default_cache_dir() -> Path:
    """$DSPTRAIN_CACHE/images, else ~/.cache/dsptrain/images (data.cache_dir overrides it)."""
    from ..inputs import env

    return Path(env.get("DSPTRAIN_CACHE") or Path.home() / ".cache" / "dsptrain") / "images"


def content_key(entries, shape) -> str:
    """The cache key of `entries` [(label, name, sha256 hex of its bytes)] decoded to `shape`."""
    digest = hashlib.sha256(f"dsptrain-images v{DECODER_VERSION} {tuple(shape)}\n".encode())
    for label, name, file_hash in entries:
        digest.update(f"{label}\0{name}\0{file_hash}\n".encode())
    return digest.hexdigest()[:32]


def lookup(cache_dir: Path, key: str, count: int, shape) -> np.ndarray | None:
    """The cached images of `key` as a read-only memory map, or None if absent or not as expected."""
    path = Path(cache_dir) / f"{key}.npy"
    try:
        images = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if images.dtype != np.uint8 or images.shape != (count, *shape):
        return None  # not ours or damaged: decoded again and replaced
    return images


def store(cache_dir: Path, key: str, images: np.ndarray) -> np.ndarray:
    """Write `images` as the cache of `key` (atomically); returns them memory-mapped.
    A cache directory that cannot be written is not an error: the decoded array is used as is."""
    cache_dir = Path(cache_dir)
    target = cache_dir / f"{key}.npy"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        reap_stale_temps(cache_dir, (target.name,))
        tmp = cache_dir / f"{temp_prefix(target)}tmp"
        with open(tmp, "wb") as f:
            np.save(f, images)
        os.replace(tmp, target)
    except OSError:
        return images
    return np.load(target, mmap_mode="r")


def file_digest(path: Path, limit: int) -> tuple[str, bytes]:
    """(SHA-256 hex, bytes) of the regular file `path`, at most `limit` bytes (else a DataError)."""
    from ..inputs.files import read_limited

    raw = read_limited(path, "image", limit, DataError)
    return hashlib.sha256(raw).hexdigest(), raw


def folder_digests(directory: Path, files: list[Path], cache_dir: Path, limit: int, pool) -> list[str]:
    """The SHA-256 of each of `files` (in `directory`), read only when its stat changed."""
    memo_path = Path(cache_dir) / f"digests-{hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]}.json"
    try:
        memo = json.loads(memo_path.read_text())
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    stats = []
    for path in files:
        try:
            st = os.stat(path)
            stats.append([st.st_size, st.st_mtime_ns, st.st_ino])
        except OSError:
            stats.append(None)  # read_limited names the problem below
    names = [str(path.relative_to(directory)) for path in files]
    known = [memo.get(name) for name in names]
    todo = [
        i
        for i, (stat, entry) in enumerate(zip(stats, known))
        if stat is None or not (isinstance(entry, list) and len(entry) == 4 and entry[:3] == stat)
    ]
    fresh = dict(zip(todo, pool.map(lambda i: file_digest(files[i], limit)[0], todo)))
    digests = [fresh[i] if i in fresh else known[i][3] for i in range(len(files))]
    if todo or len(memo) != len(files):
        kept = {name: [*stat, digest] for name, stat, digest in zip(names, stats, digests) if stat is not None}
        try:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            reap_stale_temps(Path(cache_dir), (memo_path.name,))
            tmp = Path(cache_dir) / f"{temp_prefix(memo_path)}tmp"
            tmp.write_text(json.dumps(kept))
            os.replace(tmp, memo_path)
        except OSError:
            pass  # not remembered: the next run reads the files again
    return digests
