"""The array pool (cpu_ops/array_pool.h, memory/pool.py): while it serves, NumPy's arrays of
128 KB and more come from one kept region and go back to it; smaller ones, and ones it
has no room for, from NumPy's allocator as before. Values are NumPy's whatever serves them."""

import numpy as np
import pytest
from dsptrain.memory import pool

pytestmark = pytest.mark.skipif(not pool.available(), reason="cpu backend not built")

KB = 1024


def test_large_arrays_come_from_the_pool_and_go_back():
    pool.trim()  # the pool is the process's: start from no pages
    with pool.serving(4 << 20):
        small = np.ones(64 * KB, np.int8)  # below 128 KB: the heap
        assert pool.stats()["served"] == 0
        a = np.full(1 << 20, 3, np.int8)
        b = np.arange(1 << 18, dtype=np.int32)  # 1 MB
        held = pool.stats()
        assert held["served"] == 2 and held["live"] == 2 << 20 and held["missed"] == 0, held
        del a
        c = b * 2  # takes the freed first block again
        assert pool.stats()["high_water"] == 2 << 20
    assert c[-1] == 2 * ((1 << 18) - 1) and small.sum() == 64 * KB
    del b, c
    assert pool.stats()["live"] == 0
    after = np.ones(1 << 20, np.int8)  # no longer serving: NumPy's allocator
    assert pool.stats()["live"] == 0 and after.sum() == 1 << 20


def test_zeros_are_zero_on_reused_memory_and_resize_keeps_the_data():
    with pool.serving(4 << 20):
        dirty = np.full(1 << 20, 7, np.int8)
        del dirty
        zeros = np.zeros(1 << 20, np.int8)  # calloc on the block the 7s left
        assert not zeros.any()
        grown = np.arange(1 << 16, dtype=np.int32)  # 256 KB, then 1 MB by realloc
        grown.resize(1 << 18, refcheck=False)
        assert np.array_equal(grown[: 1 << 16], np.arange(1 << 16)) and not grown[1 << 16 :].any()
        assert pool.stats()["missed"] == 0


def test_an_array_without_room_falls_back_and_is_counted():
    with pool.serving(1 << 20):
        big = np.ones(2 << 20, np.int8)
        stats = pool.stats()
        assert stats["missed"] == 1 and stats["largest_miss"] == 2 << 20 and stats["live"] == 0
        fits = np.ones(512 * KB, np.int8)
        assert pool.stats()["live"] == 512 * KB
    assert big.sum() == 2 << 20 and fits.sum() == 512 * KB
