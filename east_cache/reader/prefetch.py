"""Read batches ahead in a thread of the training process.

A cached batch is one copy per field out of the page cache, and those copies release the GIL (collate's
copies, torch's of a batch of rows, numpy's of a list of items). So one thread keeps up with a GPU, and its
batches need no inter-process hand-off, whereas DataLoader worker processes pay for a fresh shared-memory
segment per batch (page faults in both processes). `prefetch(loader)` overlaps that work with the training
step, which spends its time waiting on the device. One thread only: page-mode crops (their draw and maps
patch) are Python that holds the GIL, so a second thread would not read them faster and would take the GIL
from the training loop more; processes do that (east_cache/reader/workers.py).
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def prefetch(batches: Iterable, depth: int = 2) -> Iterator:
    """Yield what `batches` yields, produced up to `depth` items ahead by a background thread.

    An exception in the producer is raised here, in the consumer; leaving the loop early (break,
    exception) stops the producer before this generator returns."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in batches:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as e:   # handed to the consumer, which re-raises it
            put(_Failed(e))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


def batches(loader) -> Iterator:
    """An epoch of a DataLoader's batches, as train.py reads them: with no worker processes, one batch ahead
    from a thread of this process; with workers, as they deliver. Close it (or let it be collected) to stop
    the thread early."""
    return prefetch(loader) if loader.num_workers == 0 else iter(loader)
