"""An image folder: one subfolder per class, the images in it (any depth) decoded by Pillow.

    photos/tshirt/0001.jpg, photos/tshirt/0002.png, photos/bag/..., photos/trouser/...

Classes are the subfolders in sorted order (label 0 the first); hidden entries are
skipped, and so are files Pillow has no reader for (listed on stderr). Every image is
turned upright by its EXIF orientation, converted to the model's channels (L or RGB: a
grayscale photo in an RGB set is repeated, an alpha channel dropped), scaled so it
covers the model's H x W and cut to it around its centre (ImageOps.fit: nothing is
stretched). An empty class folder, a file Pillow cannot decode or one larger than
MAX_IMAGE_BYTES is a DataError naming it. The decoded array is cached by the files'
content (decode_cache.py), so a second run decodes nothing.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import DataError
from . import decode_cache
from .dataset import Dataset

MAX_IMAGE_BYTES = 64 << 20  # one photo file (a 50-megapixel JPEG is about 20 MB)
MAX_IMAGE_PIXELS = 1 << 27  # 134 megapixels decoded: beyond is a decompression bomb
_MODES = {1: "L", 3: "RGB"}


def _pillow():
    try:
        from PIL import Image, ImageOps
    except ImportError:  # a dependency (pyproject.toml); said plainly if it is missing anyway
        raise DataError("reading an image folder needs Pillow: pip install Pillow") from None
    return Image, ImageOps


def list_folder(directory: Path) -> tuple[tuple[str, ...], list[tuple[int, Path]], list[Path]]:
    """(class names, [(label, file)], skipped files) of the image folder `directory`."""
    Image, _ = _pillow()
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory (data.folder: one subfolder per class)")
    readable = {ext.lower() for ext in Image.registered_extensions()}
    classes = sorted(p.name for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        loose = sorted(p.name for p in directory.iterdir() if p.is_file())[:3]
        raise DataError(
            f"{directory}: no class subfolders (expected {directory}/<class>/<image>"
            + (f"; found files {', '.join(loose)} at the top" if loose else "")
            + ")"
        )
    files, skipped = [], []
    for label, name in enumerate(classes):
        found = []
        for root, dirs, names in os.walk(directory / name, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for file in sorted(names):
                path = Path(root) / file
                if file.startswith("."):
                    continue
                (found if path.suffix.lower() in readable else skipped).append(path)
        if not found:
            raise DataError(f"{directory / name}: empty class folder (no image files); add images or remove it")
        files += [(label, path) for path in found]
    return tuple(classes), files, skipped


def decode(path: Path, raw: bytes, shape) -> np.ndarray:
    """The image in `raw` (read from `path`) as uint8 (H, W, C) of `shape`, or a DataError naming `path`."""
    Image, ImageOps = _pillow()
    height, width, channels = shape
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:
                if image.width * image.height > MAX_IMAGE_PIXELS:
                    raise DataError(
                        f"{path}: {image.width}x{image.height} pixels is more than an image may "
                        f"have ({MAX_IMAGE_PIXELS})"
                    )
                image.draft(_MODES[channels], (width, height))  # JPEG: decode at a reduced scale when it can
                image = ImageOps.exif_transpose(image)
                image = image.convert(_MODES[channels])
                image = ImageOps.fit(image, (width, height), Image.Resampling.BILINEAR)
                pixels = np.asarray(image, np.uint8)
    except DataError:
        raise
    except Image.UnidentifiedImageError:
        raise DataError(f"{path}: cannot decode the image (not a format Pillow reads, or damaged)") from None
    except Exception as exc:  # Pillow raises many kinds (OSError, SyntaxError, ValueError, ...)
        reason = str(exc).split("\n")[0] or type(exc).__name__
        raise DataError(f"{path}: cannot decode the image ({reason})") from None
    return pixels.reshape(height, width, channels)


def load_folder(directory, input_shape, cache_dir=None, progress: bool = False) -> Dataset:
    """The image folder `directory` as a Dataset of `input_shape` (H, W, C), from the cache when it can."""
    directory = Path(directory)
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or shape[2] not in _MODES:
        raise DataError(f"{directory}: images decode to 1 (gray) or 3 (RGB) channels; the model takes {shape}")
    classes, files, skipped = list_folder(directory)
    if skipped and progress:
        names = ", ".join(str(p) for p in skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        print(f"{directory}: skipped {len(skipped)} files Pillow does not read: {names}", file=sys.stderr)
    labels = np.array([label for label, _ in files], np.int64)
    workers = min(8, os.cpu_count() or 1)
    cache_dir = Path(cache_dir) if cache_dir else decode_cache.default_cache_dir()
    with ThreadPoolExecutor(workers) as pool:  # hashlib and Pillow release the GIL
        hashes = decode_cache.folder_digests(directory, [path for _, path in files], cache_dir, MAX_IMAGE_BYTES, pool)
        entries = [
            (classes[label], str(path.relative_to(directory)), digest) for (label, path), digest in zip(files, hashes)
        ]
        key = decode_cache.content_key(entries, shape)
        images = decode_cache.lookup(cache_dir, key, len(files), shape)
        if images is None:
            images = _decode_all(pool, files, shape, progress, directory)
            images = decode_cache.store(cache_dir, key, images)
    return Dataset(images, labels, f"folder:{directory.name}", str(directory), classes)


def _decode_all(pool, files, shape, progress: bool, directory: Path) -> np.ndarray:
    from tqdm import tqdm

    images = np.empty((len(files), *shape), np.uint8)

    def one(i):
        path = files[i][1]
        images[i] = decode(path, decode_cache.file_digest(path, MAX_IMAGE_BYTES)[1], shape)

    bar = tqdm(
        total=len(files),
        desc=f"decoding {directory.name}",
        unit="image",
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
    )
    try:
        for _ in pool.map(one, range(len(files))):
            bar.update()
    finally:
        bar.close()
    return images
