"""Download ahead: an epoch's order is known from (seed, epoch) before it starts, so the files it reads are fetched
in that order, `ahead` files before the reader, `jobs` downloads at once.

The files fetched ahead stay pinned (never evicted) until the reader has moved past them; the local cache's
limit must hold them (LocalCache refuses a smaller one up front). A download that fails is reported by the next
advance(), so the run stops with its one error instead of meeting it again in every loader worker.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from east_cache.store.remote.local_cache import LocalCache


def file_order(files_of_items: Iterable[int]) -> list[int]:
    """Distinct file indices in the order the items first read them (items in reading order, each by its file)."""
    return list(dict.fromkeys(int(f) for f in files_of_items))


class Ahead:
    def __init__(self, cache: LocalCache, names: Sequence[str], ahead: int | None = None, jobs: int | None = None):
        """names: the data files in the order the epoch first reads them (file_order); ahead, jobs: the cache's
        settings where None."""
        self.cache, self.names = cache, list(names)
        self.ahead = cache.settings.ahead if ahead is None else ahead
        self.pool = ThreadPoolExecutor(max(1, cache.settings.jobs if jobs is None else jobs))
        self.positions = {n: p for p, n in reversed(list(enumerate(self.names)))}
        self.window: dict[int, Future] = {}   # position in names -> its download (which pins the file)
        self.position = -1

    def __enter__(self) -> "Ahead":
        self.advance(0)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, position: int) -> None:
        """The reader now reads names[position]: download and pin it and the next `ahead`, release the ones before
        it. Raises the error of a download in the window that failed."""
        self.position = max(self.position, position)
        for p in [p for p in self.window if p < self.position]:
            self._release(self.window.pop(p), self.names[p])
        for p in range(self.position, min(len(self.names), self.position + self.ahead + 1)):
            if p not in self.window:
                self.window[p] = self._pin(self.names[p])
        for future in self.window.values():
            if future.done() and future.exception() is not None:
                raise future.exception()

    def _pin(self, name: str) -> Future:
        """The pin of data file `name`: taken here when the file is local already (a few system calls; a thread per
        file would cost the reader more, once every file is local), else by a download thread."""
        if not self.cache.present(name):
            return self.pool.submit(self.cache.pin, name)
        pinned = Future()
        try:
            pinned.set_result(self.cache.pin(name))   # evicted since present(): downloaded here, as a reader would
        except Exception as e:   # noqa: BLE001 - reported by advance(), as a download thread's error is
            pinned.set_exception(e)
        return pinned

    def reached(self, name: str) -> None:
        """advance() to the position of data file `name` (a batch's first file, as the loader yields it)."""
        self.advance(self.positions[name])

    def wait(self, position: int) -> Path:
        """advance(position), then names[position]'s local path once it is there."""
        self.advance(position)
        return self.window[position].result()

    def close(self) -> None:
        """Stop downloading what is not under way and release every pin."""
        for p, future in self.window.items():
            self._release(future, self.names[p])
        self.window.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _release(self, future: Future, name: str) -> None:
        """Unpin once its download ends (a cancelled or failed one pinned nothing)."""
        if future.cancel():
            return
        future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self.cache.unpin(name))
