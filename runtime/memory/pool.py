"""The array pool: kept memory for the large NumPy arrays of a memory-planned step.

What a step allocates besides its arena -- the result a kernel returns before the
executor copies it into its arena slot, a product's accumulator, the NumPy temporaries
of an op function -- is the plan's op workspace (planner.op_workspace), counted at the
largest op. Under a budget glibc's mmap threshold is pinned at 128 KB (arena.py), so
without the pool each such array is a fresh mmap whose pages fault in again on every op
(a ResNet-18 step at 4x the plain batch: 0.45M page faults, 2x plain's time per sample).
While the pool serves (cpu_ops/array_pool.h, installed as NumPy's allocator through
NEP 49's memory handlers), arrays of 128 KB and more come from one region sized by that
largest workspace, whose pages are touched once and kept: the plan's peak still bounds
the process, and a step costs what a plain one does. Arrays the pool has no room for
fall back to the allocator NumPy had (`misses`: the plan missed them).

    with serving(option.workspace):
        ...the step...
"""

from __future__ import annotations

from contextlib import contextmanager

try:
    from .. import _cpu_ops as _native
except ImportError:  # no native build: NumPy's own allocator serves every array
    _native = None

_reserved = {"bytes": None}


def available() -> bool:
    return _native is not None


@contextmanager
def serving(nbytes: int):
    """NumPy's arrays of 128 KB and more made in the block come from the pool, which holds
    `nbytes` (the plan's largest op workspace); the allocator before is restored after."""
    if _native is None or nbytes <= 0:
        yield
        return
    if _reserved["bytes"] != nbytes:
        _native.array_pool_reserve(int(nbytes))
        _reserved["bytes"] = nbytes
    _native.array_pool_reset_counts()
    was = _native.array_pool_serve(True)
    try:
        yield
    finally:
        if not was:
            _native.array_pool_serve(False)


def trim() -> int:
    """Give the pool's free pages back to the system (they fault in again on use); bytes."""
    return int(_native.array_pool_trim()) if _native is not None else 0


def stats() -> dict:
    """capacity, live, high_water (bytes touched), served and missed (blocks, since the last
    `serving` began), largest_miss (bytes); {} without the native build."""
    return dict(_native.array_pool_stats()) if _native is not None else {}
