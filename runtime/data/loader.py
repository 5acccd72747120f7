"""An epoch's batches, gathered and augmented on a background thread ahead of the step.

`Loader(data, batch_size, seed, augment).epoch(epoch, start)` yields the batches
`batches()` would (same order, same last batch), augmented per sample (augment.py).
With augmentation a thread prepares up to `depth` batches ahead, so the step waits for
the data only when the data is slower than the step. Without it a batch is a gather of
rows from memory (a memory map), some microseconds: handing it between threads would cost
more than it saves (measured in bench/bench_data.py), so it is made when asked for.
An exception on the thread (a bad memory-mapped file) is raised in the consumer; leaving
the loop early stops the thread.
"""

from __future__ import annotations

import queue
import threading

from .augment import Augment, apply
from .dataset import Dataset, batch_indices

_DONE = object()


class Loader:
    def __init__(
        self,
        data: Dataset,
        batch_size: int,
        seed: int,
        augment: Augment | None = None,
        depth: int = 4,
        background: bool | None = None,
    ):
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.augment = augment if augment is not None and augment.active else None
        # None: a thread when there is work to overlap (augmentation)
        self.depth, self.background = depth, self.augment is not None if background is None else background

    def batch(self, index, epoch: int):
        images, labels = self.data.images[index], self.data.labels[index]
        if self.augment is not None:
            images = apply(self.augment, images, index, self.seed, epoch)
        return images, labels

    def epoch(self, epoch: int, start: int = 0):
        """The batches of `epoch` from batch `start` on (a resumed epoch's remainder)."""
        order = batch_indices(len(self.data), self.batch_size, self.seed, epoch, start)
        if not self.background:
            return (self.batch(index, epoch) for index in order)
        return _ahead((self.batch(index, epoch) for index in order), self.depth)


def _ahead(items, depth: int):
    """Iterate over `items`, computed on a thread up to `depth` items ahead."""
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        ready.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ready.put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            ready.put((None, exc))

    thread = threading.Thread(target=produce, name="dsptrain-loader", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # drain so a blocked put sees the stop
            try:
                ready.get_nowait()
            except queue.Empty:
                thread.join(0.05)
