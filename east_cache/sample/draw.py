"""A reader's crop draw: window_rng, each crop's generator, and CropDraw, the same crops as window.draw_crop, faster.

The draw's rule (window.py: a word by the page's weights, then an origin uniformly among those whose crop
holds it and cuts the fewest legible words) is part of what a build computes (the weights assume it), so
window.py counts in the build fingerprint. This module only draws by that rule again and again, and a cache
does not depend on how: it is left out of the fingerprint, so making it faster rebuilds no cache.

What no draw changes is computed once per page: the cut counts at every origin (unless there are more than
COUNTS_CELLS_MAX), each word's region of origins and the cumulative draw probabilities; and on a word's
first draw, its best origins (those with the fewest cuts, in the row-major order draw_crop picks from),
kept while the reader's room for them lasts. A draw is then two generator calls, the same as draw_crop's,
and an index; the cut words are counted only where the kept count at the drawn origin is not 0.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

from east_cache.sample.window import (
    _candidates,
    _draw_probabilities,
    _region,
    _uniform,
    cuts_at,
    origin_bounds,
    page_counts,
)

_thread = threading.local()   # each thread's window generator (window_rng)


def window_rng(seed: int, epoch: int, name: str, variant: int) -> np.random.Generator:
    """The generator of the crop of (image name, variant) at an epoch: the same numbers in every process and
    thread. It is this thread's one PCG64 generator with its state set from a blake2b digest of the key (a
    SeedSequence made per crop cost 15 us, this 2.5), so it is valid until the next call in the thread."""
    key = f"{seed}\0{epoch}\0{variant}\0{name}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(key, digest_size=32, person=b"east-window").digest()
    rng = getattr(_thread, "rng", None)
    if rng is None:
        rng = _thread.rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                               "state": {"state": int.from_bytes(digest[:16], "little"),
                                         "inc": int.from_bytes(digest[16:], "little") | 1}}
    return rng


COUNTS_CELLS_MAX = 1 << 22   # origins whose cut counts a CropDraw keeps per page (uint16: 8 MiB); beyond: per draw
BEST_BYTES = 64 << 20        # a reader's room for its pages' kept best origins (per process)


class Room:
    """Bytes a reader may still keep of something its pages derive again and again (their draws' best origins,
    their maps patches), shared by all its pages in a process."""

    def __init__(self, nbytes: int):
        self.left = nbytes

    def take(self, nbytes: int) -> bool:
        """Whether nbytes more fit; if so, they are taken."""
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True


class CropDraw:
    """draw_crop for one page, again and again (a reader, every epoch)."""

    def __init__(self, boxes: np.ndarray, page_size: tuple[int, int], size: int, step: int,
                 weights: np.ndarray | None = None, room: Room | None = None):
        """room: what kept best origins may still take (the reader's, shared by its pages); None: keep none."""
        self.boxes, self.size, self.step, self.room = boxes, size, step, room
        self.bounds = origin_bounds(page_size, size, step)
        cells = np.prod(self.bounds[1] - self.bounds[0] + 1)
        self.counts = page_counts(boxes, page_size, size, step) if len(boxes) and cells <= COUNTS_CELLS_MAX else None
        self.regions = [_region(boxes, w, self.bounds, size, step) for w in range(len(boxes))]
        # by word, once drawn: (first origin of its region, flat indices of its best origins in the region, the
        # region's width): a draw picks best[k] as draw_crop picks np.flatnonzero(ok)[k]
        self.best: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        # Generator.choice(n, p=p) without its checks of p: it draws one double u and takes the first index
        # whose normalised cumulative sum exceeds u; the same numbers, so the same crops as draw_crop
        self.cdf = None if weights is None or not len(boxes) else np.cumsum(_draw_probabilities(weights))
        if self.cdf is not None:
            self.cdf /= self.cdf[-1]

    def nbytes(self) -> int:
        """Bytes of the counts (the best origins are charged to the room)."""
        return 0 if self.counts is None else self.counts.nbytes

    def _best(self, w: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(first origin of word w's region, flat indices of its best origins there, the region's width)."""
        kept = self.best.get(w)
        if kept is not None:
            return kept
        region, ok = _candidates(self.boxes, w, self.bounds, self.size, self.step, self.counts, self.regions[w])
        best = np.flatnonzero(ok.ravel())
        if self.room is not None and self.room.take(4 * best.size):   # int32: a region has far fewer origins
            self.best[w] = region[0], best.astype(np.int32), ok.shape[1]
        return region[0], best, ok.shape[1]

    def __call__(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(origin, cut) as window.draw_crop(rng, boxes, page_size, size, step, weights)."""
        n = len(self.boxes)
        if not n:
            origin = _uniform(rng, self.bounds) * self.step
            return origin, cuts_at(self.boxes, origin, self.size)
        w = int(rng.integers(n)) if self.cdf is None else int(self.cdf.searchsorted(rng.random(), side="right"))
        first, best, width = self._best(w)
        iy, ix = divmod(int(best[rng.integers(len(best))]), width)
        cell = first + (ix, iy)
        origin = cell * self.step
        if self.counts is not None and self.counts[cell[1] - self.bounds[0, 1], cell[0] - self.bounds[0, 0]] == 0:
            return origin, np.zeros(n, bool)
        return origin, cuts_at(self.boxes, origin, self.size)
