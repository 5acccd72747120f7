"""The arena: one preallocated byte buffer per memory plan; tensors are numpy views into it.

Backends return fresh arrays (the contract in backends/base.py has no `out=`), so the
executor copies each result into its slot: one extra pass over every output, and for
the duration of one op the result exists twice (counted as op workspace by
memory.op_workspace). A backend with `out=` hooks would remove both.

A result whose size or dtype differs from the plan cannot take its slot; it stays a
fresh array and is counted in `spilled` (the plan missed it: a bug to report).

glibc raises its mmap threshold each time a large block is freed (up to 32 MB), after
which the results and scratch freed every op come from the heap and stay resident as
fragments: measured, 5-8% above the planned peak. The first arena therefore fixes the
threshold at 128 KB (mallopt M_MMAP_THRESHOLD, which also stops the raising), so a freed
large block goes back to the system and the plan's peak bounds the process.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .planner import ALIGN, Buffer

MMAP_THRESHOLD = 128 * 1024
_malloc_fixed = False


def fix_malloc_threshold() -> None:
    """mallopt(M_MMAP_THRESHOLD, 128 KB) once per process, where the C library is glibc."""
    global _malloc_fixed
    if _malloc_fixed:
        return
    _malloc_fixed = True
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, MMAP_THRESHOLD)  # -3: M_MMAP_THRESHOLD (malloc.h)
    except (OSError, AttributeError):  # not glibc: nothing to fix
        pass


def _elements(value) -> np.ndarray:
    """The array a value keeps: the value itself, or the elements `q` of a quantized tensor
    (a dataclass such as numerics.QTensor or algorithms/_quant.Scaled)."""
    q = getattr(value, "q", None)
    if isinstance(q, np.ndarray) and dataclasses.is_dataclass(value):
        return q
    return np.asarray(value)


class Arena:
    def __init__(self, nbytes: int):
        fix_malloc_threshold()
        raw = np.empty(nbytes + ALIGN, np.uint8)
        skip = (-raw.ctypes.data) % ALIGN  # start on an HVX-vector boundary
        self.buffer = raw[skip : skip + nbytes]
        self.nbytes = nbytes
        self.high_water = 0  # max end offset written this step
        self.spilled: dict[str, int] = {}

    def begin_step(self) -> None:
        self.high_water = 0
        self.spilled = {}

    def view(self, buf: Buffer, shape, dtype) -> np.ndarray | None:
        """`shape`/`dtype` at `buf`'s offset, or None if that is larger than the slot."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes > buf.nbytes:
            return None
        self.high_water = max(self.high_water, buf.offset + nbytes)
        return self.buffer[buf.offset : buf.offset + nbytes].view(dtype).reshape(shape)

    def store(self, buf: Buffer, value, name: str):
        """Copy `value` (an array, or a quantized tensor: QTensor, an emulated recipe's
        Scaled, whose elements are its `q`) into `buf`; returns the value as a view of the arena."""
        array = _elements(value)
        if array.ctypes.data == self.buffer.ctypes.data + buf.offset and array.flags.c_contiguous:
            self.high_water = max(self.high_water, buf.offset + array.nbytes)
            return value  # already there (state from the last step)
        slot = self.view(buf, array.shape, array.dtype)
        if slot is None:
            self.spilled[name] = array.nbytes
            return value
        np.copyto(slot, array)
        return slot if array is value else dataclasses.replace(value, q=slot)

    def holds(self, array: np.ndarray) -> bool:
        base = self.buffer.ctypes.data
        return base <= array.ctypes.data < base + max(self.nbytes, 1)
