"""The memory shared by host and DSP: a byte buffer with a first-fit allocator.

Tensors live at 128-byte aligned offsets after the control page and the op ring
(dsp_abi.TENSOR_OFFSET). An array handed to the caller is a view of its region
whose memory view owns the region: the region returns to the free list only when
the last array (or view of it) is gone, so a view that comes back as an input is
recognised by its address and used in place -- weights updated on the DSP never
leave it (subgraph reuse).
"""

from __future__ import annotations

import bisect
import threading
import weakref

import numpy as np

from . import dsp_abi


class ArenaFull(MemoryError):
    pass


class Arena:
    def __init__(self, buffer, nbytes: int):
        self.nbytes = nbytes
        self._mv = memoryview(buffer).cast("B")
        self.base = np.frombuffer(self._mv, np.uint8).ctypes.data
        self._lock = threading.RLock()  # finalizers may run inside alloc()
        # the last vector stays free: kernels read whole unaligned vectors, up to 127 bytes
        # past a tensor's end (dsp_kernels/conv.c), which must still be mapped memory
        self._free = [(dsp_abi.TENSOR_OFFSET, nbytes - dsp_abi.TENSOR_OFFSET - dsp_abi.ALIGN)]  # sorted (off, len)
        self._live: dict[int, int] = {}  # offset -> length

    # ------------------------------------------------------------ regions
    def alloc(self, nbytes: int) -> int:
        size = max(dsp_abi.ALIGN, -(-nbytes // dsp_abi.ALIGN) * dsp_abi.ALIGN)
        with self._lock:
            for i, (off, length) in enumerate(self._free):
                if length >= size:
                    if length == size:
                        del self._free[i]
                    else:
                        self._free[i] = (off + size, length - size)
                    self._live[off] = size
                    return off
        raise ArenaFull(
            f"DSP arena of {self.nbytes >> 20} MiB has no {size} free bytes "
            f"({self.bytes_live() >> 20} MiB live); raise DSPTRAIN_DSP_ARENA_MB"
        )

    def free(self, off: int) -> None:
        with self._lock:
            size = self._live.pop(off, None)
            if size is None:
                return
            i = bisect.bisect(self._free, (off, 0))
            self._free.insert(i, (off, size))
            # merge with the right, then the left neighbour
            if i + 1 < len(self._free) and off + size == self._free[i + 1][0]:
                self._free[i] = (off, size + self._free.pop(i + 1)[1])
            if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == off:
                prev = self._free.pop(i - 1)
                self._free[i - 1] = (prev[0], prev[1] + self._free[i - 1][1])

    def bytes_live(self) -> int:
        with self._lock:
            return sum(self._live.values())

    # ------------------------------------------------------------ arrays
    def view(self, off: int, shape, dtype) -> np.ndarray:
        """A writable array over arena bytes (the caller keeps the region alive)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._mv, dtype, count, off).reshape(shape)

    def export(self, off: int, shape, dtype) -> np.ndarray:
        """An array owning region `off`: freed when it and all its views are gone.

        The owner is a uint8 ndarray over the region: NumPy collapses the base of every
        view onto it (a memoryview slice would not do: NumPy re-exports the underlying
        buffer and lets the slice die)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        owner = np.frombuffer(self._mv, np.uint8, max(count * dtype.itemsize, 1), off)
        weakref.finalize(owner, self.free, off)
        return owner[: count * dtype.itemsize].view(dtype).reshape(shape)

    def find(self, array: np.ndarray) -> int | None:
        """The arena offset of a C-contiguous array lying inside one live region, else None."""
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or array.size == 0:
            return None
        off = array.__array_interface__["data"][0] - self.base
        if off < dsp_abi.TENSOR_OFFSET or off >= self.nbytes:
            return None
        with self._lock:
            starts = sorted(self._live)  # tens of live regions: sorting is cheap
            i = bisect.bisect_right(starts, off) - 1
            if i < 0:
                return None
            start = starts[i]
            if off + array.nbytes <= start + self._live[start]:
                return off
        return None
