"""Image folders: what decodes, what is refused (one message naming the file), the cache."""

import numpy as np
import pytest
from dsptrain.data import Dataset, decode_cache
from dsptrain.errors import DataError

from .helpers import class_images, write_folder


@pytest.fixture
def photos(tmp_path):
    rng = np.random.default_rng(1)
    images, labels = class_images(rng, 12)
    return write_folder(tmp_path / "photos", images, labels), images, labels


def test_png_folder_decodes_exactly_with_classes_sorted(photos, tmp_path):
    root, images, labels = photos
    data = Dataset.from_folder(root, (20, 20, 3), cache_dir=tmp_path / "cache")
    assert data.classes == ("bag", "trouser", "tshirt")
    order = np.argsort(labels, kind="stable")  # files come class by class, in name order
    np.testing.assert_array_equal(data.labels, labels[order])
    np.testing.assert_array_equal(np.asarray(data.images), images[order])  # PNG is lossless, same size: no resize


def test_jpeg_grayscale_in_rgb_set_and_resize(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(2)
    (tmp_path / "p" / "a").mkdir(parents=True)
    (tmp_path / "p" / "b").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(tmp_path / "p" / "a" / "x.jpg")
    gray = np.full((30, 30), 77, np.uint8)
    Image.fromarray(gray).save(tmp_path / "p" / "b" / "g.png")  # one channel among RGB images
    (tmp_path / "p" / "b" / "notes.txt").write_text("not an image")  # skipped: Pillow has no reader for it
    data = Dataset.from_folder(tmp_path / "p", (16, 16, 3), cache_dir=tmp_path / "cache")
    assert data.images.shape == (2, 16, 16, 3) and list(data.labels) == [0, 1]
    assert (np.asarray(data.images[1]) == 77).all()  # gray repeated into R, G and B


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda root: (root / "bag" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg"),
            r"photos/bag/broken\.jpg: cannot decode the image",
        ),
        (
            lambda root: (root / "bag" / "cut.png").write_bytes((root / "bag" / "0000.png").read_bytes()[:60]),
            r"photos/bag/cut\.png: cannot decode the image",
        ),
        (lambda root: (root / "empty").mkdir(), r"photos/empty: empty class folder"),
    ],
)
def test_bad_files_are_named(photos, tmp_path, make, match):
    root = photos[0]
    make(root)
    with pytest.raises(DataError, match=match):
        Dataset.from_folder(root, (20, 20, 3), cache_dir=tmp_path / "cache")


def test_not_a_class_folder(tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(b"")
    with pytest.raises(DataError, match=r"flat: no class subfolders .*found files a\.png"):
        Dataset.from_folder(tmp_path / "flat", (8, 8, 1), cache_dir=tmp_path / "cache")


def test_cache_is_keyed_by_content(photos, tmp_path, monkeypatch):
    from dsptrain.data import folder

    root, _, _ = photos
    cache = tmp_path / "cache"
    first = Dataset.from_folder(root, (20, 20, 3), cache_dir=cache)
    assert len(list(cache.glob("*.npy"))) == 1 and isinstance(first.images, np.memmap)

    def no_decoding(*args):
        raise AssertionError("decoded or read although cached")

    monkeypatch.setattr(folder, "decode", no_decoding)
    monkeypatch.setattr(decode_cache, "file_digest", no_decoding)  # unchanged files are not even read again
    again = Dataset.from_folder(root, (20, 20, 3), cache_dir=cache)  # nothing decoded
    np.testing.assert_array_equal(np.asarray(again.images), np.asarray(first.images))
    monkeypatch.undo()
    from PIL import Image

    victim = root / "bag" / "0000.png"
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(victim)  # same name, new content: a new key
    changed = Dataset.from_folder(root, (20, 20, 3), cache_dir=cache)
    assert (np.asarray(changed.images[0]) == 0).all()
    assert len(list(cache.glob("*.npy"))) == 2


def test_damaged_cache_is_rebuilt(photos, tmp_path):
    root, _, _ = photos
    cache = tmp_path / "cache"
    first = np.asarray(Dataset.from_folder(root, (20, 20, 3), cache_dir=cache).images).copy()
    (path,) = cache.glob("*.npy")
    path.write_bytes(b"garbage")
    np.testing.assert_array_equal(np.asarray(Dataset.from_folder(root, (20, 20, 3), cache_dir=cache).images), first)


def test_content_key_depends_on_shape_and_bytes():
    entries = [("a", "a/1.png", "00")]
    assert decode_cache.content_key(entries, (8, 8, 1)) != decode_cache.content_key(entries, (8, 8, 3))
    assert decode_cache.content_key(entries, (8, 8, 1)) != decode_cache.content_key([("a", "a/1.png", "01")], (8, 8, 1))
