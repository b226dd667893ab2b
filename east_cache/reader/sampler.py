"""The orders a run reads a cache in. BlockSampler: whole blocks of consecutive indices shuffled, so that a
batch-strategy batch stays one read. ShareSampler: a node's share of whole files (several machines), or files in
windows that a local cache folder's limit holds (a cache at a URL).

A batch-strategy cache stores images [k*B, (k+1)*B) at one variant as rows 0..B-1 of one file. A sampler
that shuffles single indices scatters every batch over B files; shuffling the blocks instead, with a
DataLoader batch size of B, makes each batch one contiguous slice (CacheDataset.__getitems__). Within a
block the order is fixed, which is the price: an epoch still sees every image once, in a new block order.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch.utils.data import DistributedSampler, Sampler

from east_cache.errors import UsageError
from east_cache.reader.share import NodeShare, epoch_files, node_files


class BlockSampler(Sampler[int]):
    def __init__(self, n: int, block: int, shuffle: bool = True, seed: int = 0, rank: int = 0, world: int = 1):
        if block < 1 or not 0 <= rank < world:
            raise ValueError(f"block {block} must be positive and rank {rank} lie in [0, {world})")
        self.n, self.block, self.shuffle, self.seed, self.rank, self.world = n, block, shuffle, seed, rank, world
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _blocks(self) -> np.ndarray:
        """This rank's block starts. Like DistributedSampler, the list is padded by wrapping around so that
        every rank gets the same number of blocks, hence of batches: no rank waits in a collective alone."""
        starts = np.arange(0, self.n, self.block)
        if self.shuffle:
            starts = np.random.default_rng((self.seed, self.epoch)).permutation(starts)
        per_rank = -(-len(starts) // self.world)
        if len(starts):
            starts = np.resize(starts, per_rank * self.world)
        mine = starts[self.rank::self.world]
        # A short block (the last n % block images) goes last: anywhere else, every later batch would straddle
        # two files, and drop_last would drop the wrong samples.
        return mine[np.argsort(mine + self.block > self.n, kind="stable")]

    def __iter__(self):
        for s in self._blocks().tolist():
            yield from range(s, min(s + self.block, self.n))

    def __len__(self) -> int:
        return sum(min(self.block, self.n - s) for s in self._blocks().tolist())


def make_sampler(ds, batch_size: int, shuffle: bool, seed: int, rank: int = 0, world: int = 1) -> Sampler:
    """A seeded (seed, epoch) order of ds split over `world` ranks. A batch-strategy cache read in batches of
    its files' size keeps each file whole (BlockSampler), so that a batch is one read per field; anything else
    is shuffled per sample (DistributedSampler, which with one replica is a plain seeded shuffle), a selection of
    images (CacheDataset.select) too: its items are no blocks of a file."""
    c = ds.config
    if c.strategy == "batch" and batch_size == c.batch_size and getattr(ds, "selection", None) is None:
        return BlockSampler(len(ds), batch_size, shuffle=shuffle, seed=seed, rank=rank, world=world)
    return DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed)


class ShareSampler(Sampler[int]):
    """An epoch's items for one process where whole files matter: those whose file of the epoch lies in this node's
    share of the files (reader/share.py; every file where share.nodes is 1), in an order seeded by (seed,
    epoch, node), split among the node's processes. The same on every rank and on resume.

    Every process of the run gets len(self) items every epoch (steps must match under DDP): a node whose share
    holds fewer items at an epoch repeats the first of its order. With limit_bytes (a local cache folder's limit)
    below the bytes of the node's files, the files go in a seeded order, cut into windows of about half the limit
    (at a new place every epoch), the items of a window shuffled among themselves, so that a file is downloaded
    about once per epoch rather than once per item read; the order alternates direction from epoch to epoch, so
    that an epoch begins with the files the last one left in the folder."""

    def __init__(self, ds, share: NodeShare, file_bytes: Sequence[int], seed: int, shuffle: bool = True,
                 limit_bytes: int = 0):
        self.layout, self.offsets, self.share, self.seed, self.shuffle = ds.layout, ds.offsets, share, seed, shuffle
        self.bytes = np.asarray(file_bytes, np.int64)
        self.owner = np.zeros(len(self.bytes), np.int64)
        for node in range(1, share.nodes):
            self.owner[node_files(file_bytes, node, share.nodes)] = node
        self.files = np.flatnonzero(self.owner == share.node_rank)
        mine = int(self.bytes[self.files].sum())
        self.window_bytes = max(limit_bytes // 2, 1) if shuffle and 0 < limit_bytes < mine else None
        counts = np.array([np.bincount(self.owner[epoch_files(self.layout, self.offsets, e)], minlength=share.nodes)
                           for e in range(self.layout.variants)])   # epochs repeat with the variants' period
        if counts.min() == 0:
            e, node = np.argwhere(counts == 0)[0]
            raise UsageError(f"node {node} of {share.nodes} would read no image at epoch {e + 1}: the cache has too "
                             f"few files to share among {share.nodes} nodes; rebuild it with more files (a smaller "
                             f"--chunk-size, or --strategy image), or train without --node-share")
        self.per_rank = -(-int(counts.max()) // share.local_world)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def node_order(self) -> np.ndarray:
        """The items this node reads at the current epoch, in order (before the split among its processes)."""
        where = epoch_files(self.layout, self.offsets, self.epoch)
        mine = np.flatnonzero(self.owner[where] == self.share.node_rank)
        if not self.shuffle:
            return mine
        rng = np.random.default_rng((self.seed, self.epoch, self.share.node_rank))
        if self.window_bytes is None:
            return rng.permutation(mine)
        files = np.random.default_rng((self.seed, self.share.node_rank)).permutation(self.files)
        files = files[::-1] if self.epoch % 2 else files
        # windows at a new phase every epoch: files keep their place in the order, not their window's companions
        window = (np.cumsum(self.bytes[files]) + rng.integers(self.window_bytes)) // self.window_bytes
        window_of = np.zeros(len(self.bytes), np.int64)
        window_of[files] = window
        return np.concatenate([rng.permutation(mine[window_of[where[mine]] == w]) for w in np.unique(window)])

    def __iter__(self):
        order = np.resize(self.node_order(), self.per_rank * self.share.local_world)
        return iter(order[self.share.local_rank::self.share.local_world].tolist())

    def __len__(self) -> int:
        return self.per_rank
