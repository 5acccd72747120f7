"""Augmentation: seeded per sample, exact crops and flips, resumable loader order."""

import numpy as np
from dsptrain.data import Augment, Dataset, Loader, batches
from dsptrain.data.augment import apply


def images(seed, n=16, shape=(12, 10, 3)):
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def test_off_is_identity():
    x = images(0)
    assert apply(Augment(), x, np.arange(16), 0, 0) is x


def test_flip_mirrors_about_half_exactly():
    x = images(1, n=200)
    out = apply(Augment(flip=True), x, np.arange(200), 5, 0)
    mirrored = np.array([(o == i[:, ::-1]).all() and not (o == i).all() for o, i in zip(out, x)])
    kept = np.array([(o == i).all() for o, i in zip(out, x)])
    assert (mirrored | kept).all() and 70 < mirrored.sum() < 130


def test_padded_crop_is_a_shifted_window_of_the_padded_image():
    x = images(2)
    out = apply(Augment(crop_padding=3), x, np.arange(16), 1, 0)
    padded = np.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0)))
    for o, p in zip(out, padded):
        assert any((o == p[dy : dy + 12, dx : dx + 10]).all() for dy in range(7) for dx in range(7))


def test_per_sample_seeding_ignores_the_batch():
    """A sample's augmentation depends on (seed, epoch, its index) only: batched alone or together, the same."""
    aug = Augment(crop_padding=2, resized_crop=(0.4, 1.0), flip=True, brightness=0.3, contrast=0.3)
    x, index = images(3), np.arange(100, 116)
    together = apply(aug, x, index, 9, 4)
    alone = np.concatenate([apply(aug, x[i : i + 1], index[i : i + 1], 9, 4) for i in range(16)])
    np.testing.assert_array_equal(together, alone)
    assert not (apply(aug, x, index, 9, 5) == together).all()  # another epoch, other choices
    assert together.dtype == np.uint8 and together.shape == x.shape


def test_loader_matches_batches_and_resumes_mid_epoch():
    data = Dataset(images(4, n=37), np.arange(37) % 3)
    plain = Loader(data, 8, seed=3)
    for (a, la), (b, lb) in zip(plain.epoch(2), batches(data, 8, 3, 2)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    aug = Loader(data, 8, seed=3, augment=Augment(flip=True, crop_padding=1))
    assert aug.background and not plain.background  # a thread only when there is work to overlap
    whole = list(aug.epoch(1))
    rest = list(aug.epoch(1, start=2))
    assert len(whole) == 5 and len(rest) == 3
    for (a, la), (b, lb) in zip(whole[2:], rest):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)


def test_loader_raises_the_threads_error_and_stops_early():
    class Broken:
        def __getitem__(self, index):
            raise OSError("disk went away")

        def __len__(self):
            return 10

    data = Dataset(images(5, n=10), np.zeros(10, np.int64))
    data.images = Broken()
    try:
        list(Loader(data, 4, seed=0, background=True).epoch(0))
    except OSError as exc:
        assert "disk went away" in str(exc)
    else:
        raise AssertionError("the loader swallowed its thread's error")
    good = Dataset(images(6, n=40), np.zeros(40, np.int64))
    for _ in Loader(good, 2, seed=0, background=True).epoch(0):
        break  # the generator closes and its thread ends
