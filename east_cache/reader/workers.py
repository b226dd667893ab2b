"""Worker processes that cut batches straight into reused shared-memory slots (train.py --workers N).

DataLoader's worker processes hand every batch over in a new shared-memory segment: made and faulted in page
by page in the worker, mapped again in the main process, freed after the step. With items of a few MiB that
costs many times the copy itself. Here
the main process maps a few batch slots once, in anonymous shared memory that the forked workers inherit. A
worker reads its batch's items (in a page-mode cache each is a crop: the crop draw and the cut words' maps,
Python that holds the GIL of its own process) and copies them into their rows of the slot it was given;
the main process hands the slot out as tensors, uncopied, and gives it to a later batch once nothing refers to
it any more (a tensor of torch.from_numpy holds its array for as long as it, or a view of it, lives: the rule of
east_cache/reader/buffers.py). So the per-item Python runs in N processes beside the training loop, which does no
per-item work at all (a jpeg page's crop is decoded by its worker straight into the slot and its maps drawn
there; or its JPEG streams are written there, for the training process to decode on the GPU). Items go to
workers by image (worker_of()), each batch split among them: a worker reads the same pages every epoch, so each
page's crop draw is derived, its memory mapped in and its patches kept by one process, not by every worker.

Batches come in the sampler's order whatever worker made them; a batch depends only on its keys (a page-mode
crop on (seed, epoch, image, variant)), so the batches equal those of a DataLoader over the same sampler.
Workers persist across epochs, ignore Ctrl-C and SIGTERM (the main process stops the run at a step boundary,
then ends them) and leave when the loader is closed or collected, or when their parent is gone. A worker's exception is raised in the
main process with its message; a worker that dies (killed, out of memory) stops the epoch with an error that
says so. Needs the fork start method (Linux, macOS): make_loader falls back to DataLoader workers elsewhere.
"""
from __future__ import annotations

import collections
import contextlib
import mmap
import multiprocessing as mp
import os
import pickle
import signal
import sys
import traceback
import weakref
from collections.abc import Iterable, Iterator
from multiprocessing import connection

import cv2
import numpy as np
import torch

from east_cache.errors import WorkerDied
from east_cache.reader.collate import collate, copy_item, field_layouts
from east_cache.store.page_record import TABLE_COLUMNS, WORD_TABLE

SLOTS_PER_WORKER = 2   # batches a worker may have queued or in hand
SPARE_SLOTS = 4        # more for the batches the consumer holds (a prefetch, the step's batch, the last one)
POLL_S = 1.0           # how often a waiting process checks that the other side is still there
JOIN_S = 5.0           # how long close() waits for a worker to leave before it is terminated


def fork_available() -> bool:
    return "fork" in mp.get_all_start_methods()


class Slot:
    """One batch's fixed-size fields, as arrays over one anonymous shared mapping: a forked worker writes into
    the same pages that the main process hands out."""

    def __init__(self, fields: dict[str, tuple[tuple, np.dtype]], batch_size: int):
        sizes = {k: batch_size * int(np.prod(shape)) * np.dtype(dtype).itemsize for k, (shape, dtype) in fields.items()}
        self.buffer = mmap.mmap(-1, max(1, sum(sizes.values())))   # MAP_SHARED | MAP_ANONYMOUS
        # every view numpy makes of arrays[k] has roots[k] as its base (numpy points a view of a view at the
        # first array up the chain that is not itself such a view), so roots[k]'s references count the views
        self.roots, self.arrays, offset = {}, {}, 0
        for k, (shape, dtype) in fields.items():
            self.roots[k] = np.frombuffer(self.buffer, dtype, sizes[k] // np.dtype(dtype).itemsize, offset)
            self.arrays[k] = self.roots[k].reshape(batch_size, *shape)
            offset += sizes[k]
        self.busy = 0          # parts of a batch given to workers and not back yet
        self.pending = False   # holds a batch not handed out yet (its tensors are made when it is)
        self._free_refs = self._refs()
        self.map_in()

    def map_in(self) -> None:
        """Fault every page of the slot into this process's page table, reading a byte of each (which changes
        nothing another process may be writing; the kernel maps the neighbouring pages with it). Each process
        maps a shared page on its first touch (a fork does not copy these entries), and a worker writes some
        rows of each slot, other rows another time: without this, page faults went on for epochs and slowed
        the copies into the slots."""
        np.frombuffer(self.buffer, np.uint8)[::mmap.PAGESIZE].max()

    def _refs(self) -> list[int]:
        return [sys.getrefcount(r) for r in self.roots.values()]

    def free(self) -> bool:
        """Neither with a worker nor referred to by a batch handed out (or a view of one of its tensors)."""
        return not self.busy and not self.pending and self._refs() == self._free_refs

    def batch(self, n: int) -> dict[str, torch.Tensor]:
        """The first n items of the slot as tensors over its memory."""
        return {k: torch.from_numpy(a[:n]) for k, a in self.arrays.items()}


class _Failure:
    """A worker's exception, as it can cross to the main process."""

    def __init__(self, error: BaseException):
        try:
            pickle.dumps(error)
            self.error = error
        except Exception:   # noqa: BLE001 - any exception that does not pickle: its text
            self.error = RuntimeError("".join(traceback.format_exception(error)))


def _work(dataset, slots: list[Slot], conn, parent: int) -> None:
    """A worker's loop: (generation, seq, slot, rows, keys) in: item keys[j] goes into the slot's row rows[j];
    (generation, seq, slot, None | _Failure) out, over a pipe of its own (sent and received in this thread:
    multiprocessing.Queue's feeder thread took an eighth of a worker's time)."""
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the training process stops the run at a
    # step boundary and then ends its workers, which must not die first (or inherit its SIGTERM handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)   # the parallelism is the workers
    for slot in slots:
        slot.map_in()
    while True:
        if not conn.poll(POLL_S):
            if os.getppid() != parent:   # the training process is gone (os._exit skips the cleanup)
                return
            continue
        try:
            task = conn.recv()
        except EOFError:   # the training process closed its end
            return
        if task is None:
            return
        gen, seq, s, rows, keys = task
        try:
            items = dataset.__getitems__(keys)
            for row, item in zip(rows, items):
                copy_item(slots[s].arrays, row, item)
            result = (gen, seq, s, None)
        except BaseException as e:   # noqa: BLE001 - raised again in the main process, which ends the run
            result = (gen, seq, s, _Failure(e))
        try:
            conn.send(result)
        except OSError:   # the training process is gone
            return


@contextlib.contextmanager
def cv2_single_threaded():
    """cv2 on one thread in the processes forked meanwhile (a warped crop's cv2.warpAffine: the parallelism is the
    workers, whose own threads would contend for the same cores), as it was in this one after. Set here, before the
    fork: a forked child that changes cv2's thread count waits forever on the parent's thread pool."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(threads)


def worker_of(key, workers: int) -> int:
    """The worker that reads item `key`: by its image index (the last element of a tuple key such as
    EpochSampler's (epoch, index)), so that a worker reads the same images every epoch and derives, maps in
    and keeps each page's crop draw, memory and patches once, not once per worker."""
    while isinstance(key, tuple):
        key = key[-1]
    return int(key) % workers if isinstance(key, (int, np.integer)) else hash(key) % workers


def batched(keys: Iterable, size: int, drop_last: bool) -> Iterator[list]:
    batch = []
    for k in keys:
        batch.append(k)
        if len(batch) == size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


class WorkerLoader:
    """Batches of `dataset` (its __getitems__) over `sampler`, made by `workers` forked processes into reused
    shared-memory slots. Iterated like a DataLoader (len: batches per epoch; sampler, dataset, batch_size,
    num_workers as DataLoader's); the first iteration starts the workers, which stay for later epochs.
    close() ends them (so does collecting the loader)."""

    def __init__(self, dataset, sampler, batch_size: int, workers: int, drop_last: bool = False):
        if workers < 1:
            raise ValueError(f"WorkerLoader needs at least one worker, not {workers}")
        self.dataset, self.sampler, self.batch_size, self.num_workers = dataset, sampler, batch_size, workers
        self.drop_last = drop_last
        self._slots: list[Slot] = []
        self._procs: list = []
        self._conns: list = []                  # a pipe to each worker: tasks out, results in
        self._received = collections.deque()    # results read, not yet taken
        self._gen = 0
        self._finalizer = None

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _start(self, probe: list) -> None:
        """Slots sized by one item of the first batch (a word table: by the dataset's table_rows(), the longest any
        item has, so that it is written in the slot, not pickled to this process), then the workers, forked
        with them."""
        items = self.dataset.__getitems__(probe[:1])
        fields = field_layouts(items[0])
        if WORD_TABLE in items[0]:
            fields[WORD_TABLE] = ((max(1, self.dataset.table_rows()), len(TABLE_COLUMNS)), np.dtype(np.float32))
        self._slots = [Slot(fields, self.batch_size) for _ in range(self.num_workers * SLOTS_PER_WORKER + SPARE_SLOTS)]
        ctx = mp.get_context("fork")
        with cv2_single_threaded():
            for w in range(self.num_workers):
                ours, theirs = ctx.Pipe()
                p = ctx.Process(target=_work, args=(self.dataset, self._slots, theirs, os.getpid()),
                                name=f"east-loader-{w}", daemon=True)
                p.start()
                theirs.close()
                self._procs.append(p)
                self._conns.append(ours)
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns)

    def close(self) -> None:
        """End the workers (a later iteration starts new ones)."""
        if self._finalizer is not None:
            self._finalizer()
        for conn in self._conns:
            conn.close()
        self._received.clear()
        self._procs, self._slots, self._conns, self._finalizer = [], [], [], None

    def _free_slot(self) -> int | None:
        return next((s for s, slot in enumerate(self._slots) if slot.free()), None)

    def _result(self, workers):
        """The next result from one of `workers` (those that owe the batch to be handed out next: a wait on all
        of them would wake this process, and take a core from a worker, for results not needed yet); an error
        naming the worker when one has died meanwhile."""
        while not self._received:
            for conn in connection.wait([self._conns[w] for w in workers], timeout=POLL_S):
                w = self._conns.index(conn)
                try:
                    self._received.append((w, conn.recv()))
                except (EOFError, OSError):   # its worker is gone
                    self._lost(self._procs[w])
            for p in self._procs if not self._received else ():
                if not p.is_alive():
                    self._lost(p)
        return self._received.popleft()

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        keys = batched(self.sampler, self.batch_size, self.drop_last)
        first = next(keys, None)
        if first is None:
            return
        if not self._procs:
            self._start(first)
        self._gen += 1
        gen, pending = self._gen, [first]
        # seq -> (slot, items, workers that owe a part); ready when the slot is not busy
        parts: dict[int, tuple] = {}
        try:
            yield from self._epoch(gen, keys, pending, parts)
        finally:   # batches made and not handed out free their slots; those still with a worker, once back
            for s, *_ in parts.values() if self._slots else ():   # (none left after close())
                self._slots[s].pending = self._slots[s].busy > 0

    def _epoch(self, gen: int, keys, pending: list, parts: dict) -> Iterator[dict[str, torch.Tensor]]:
        sent, next_seq = 0, 0
        while True:
            while pending or keys is not None:   # hand out work while a slot is free
                s = self._free_slot()
                if s is None:
                    break
                batch = pending.pop() if pending else next(keys, None)
                if batch is None:
                    keys = None
                    break
                parts[sent] = (s, len(batch), self._send(gen, sent, s, batch))
                sent += 1
            if next_seq in parts and not self._slots[parts[next_seq][0]].busy:
                s, n, _ = parts.pop(next_seq)
                batch = self._slots[s].batch(n)
                self._slots[s].pending = False   # from now on, the batch's tensors hold the slot
                yield batch
                next_seq += 1
                continue
            if next_seq == sent and keys is None and not pending:
                return
            if not any(slot.busy for slot in self._slots):   # every slot held by the consumer: make it here
                batch = next(keys, None)
                if batch is None:
                    keys = None
                    continue
                yield collate(self.dataset.__getitems__(batch))
                next_seq += 1
                sent += 1
                continue
            owing = parts[next_seq][2] if next_seq in parts else range(self.num_workers)
            w, (g, seq, s, failure) = self._result(owing)
            self._slots[s].busy -= 1
            if g != gen:   # an abandoned iteration's batch
                self._slots[s].pending = self._slots[s].busy > 0
                continue
            if failure is not None:
                raise failure.error
            parts[seq][2].discard(w)

    def _lost(self, p) -> None:
        """Stop: worker p has died (its pipe broke, or it is no longer alive)."""
        p.join(JOIN_S)
        code = p.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        self.close()
        raise WorkerDied(f"loader worker {p.name} (pid {p.pid}) {how} (signal 9 is often the kernel's "
                         f"out-of-memory killer): run again with fewer --workers, or --workers 0 to read in this "
                         f"process") from None

    def _send(self, gen: int, seq: int, s: int, batch: list) -> set[int]:
        """A batch into slot s, each item to its worker (worker_of), in one part per worker that has items in it; the
        workers it went to."""
        parts: dict[int, tuple[list, list]] = {}
        image_of = getattr(self.dataset, "image_of", None) if getattr(self.dataset, "selection", None) else None
        for row, key in enumerate(batch):   # a selection's item: by its image, which a worker keeps every epoch
            at = worker_of(image_of(key) if image_of else key, self.num_workers)
            rows, keys = parts.setdefault(at, ([], []))
            rows.append(row)
            keys.append(key)
        self._slots[s].busy, self._slots[s].pending = len(parts), True
        for w, (rows, keys) in parts.items():
            try:
                self._conns[w].send((gen, seq, s, rows, keys))
            except OSError:   # its worker is gone
                self._lost(self._procs[w])
        return set(parts)


def _shutdown(procs: list, conns: list) -> None:
    for conn in conns:
        try:
            conn.send(None)
        except OSError:   # that worker is gone already
            pass
    for p in procs:
        p.join(JOIN_S)
        if p.is_alive():
            p.terminate()
            p.join()
