"""Batches made ahead by threads of the training process.

A cached batch is one copy per field out of the page cache, and those copies release the GIL (torch's
copy_, numpy's copyto). So threads of the training process keep up with a GPU, and their batches need
no inter-process hand-off, whereas DataLoader worker processes pay for a fresh shared-memory segment per
batch (page faults in both processes). `assembled(loader)`, train.py's path without workers, has two
threads make alternate batches: a page-mode batch is Python that holds the GIL (each crop's window draw
and maps) followed by copies that do not, so one thread's copies overlap the other's Python, and both
overlap the training step, which spends its time waiting on the device. `prefetch(iterable)` reads any
iterable one thread ahead.
"""
from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

ASSEMBLERS = 2   # threads that assemble a worker-less loader's batches, each its own batch

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


def assembled(loader, threads: int = ASSEMBLERS, depth: int = 1) -> Iterator:
    """An epoch of a worker-less DataLoader's batches, in its order, each assembled (the dataset's items, then
    the loader's collate_fn) by one of `threads` threads of this process, up to `depth` batches ahead per thread.

    What a thread does for a batch alternates between Python that holds the GIL (a page-mode crop's window draw
    and maps) and copies that release it (collate's); with two threads, one batch's copies overlap the next
    one's Python. The loader's sampler, collate_fn and pin_memory are used as DataLoader would use them; the
    dataset must allow concurrent reads (CacheDataset does: its per-process caches only ever gain entries that
    any thread would make alike, and its batch buffers come from a locked pool). Leaving the loop early waits
    for the batches in flight, then returns."""
    ds, collate_fn = loader.dataset, loader.collate_fn
    many = getattr(ds, "__getitems__", None)
    pin = loader.pin_memory

    def fetch(indices: list) -> object:
        batch = collate_fn(many(indices) if many else [ds[i] for i in indices])
        if pin:
            from torch.utils.data._utils.pin_memory import pin_memory
            batch = pin_memory(batch)
        return batch

    pool = ThreadPoolExecutor(threads, thread_name_prefix="assemble")
    pending: deque = deque()
    try:
        for indices in loader.batch_sampler:
            pending.append(pool.submit(fetch, indices))
            if len(pending) > threads * depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)


def batches(loader) -> Iterator:
    """An epoch of a DataLoader's batches, as train.py reads them: with no worker processes, assembled ahead by
    threads of this process (assembled); with workers, as they deliver. Close it (or let it be collected) to
    stop the threads early."""
    return assembled(loader) if loader.num_workers == 0 else iter(loader)
