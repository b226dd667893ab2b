"""BlockSampler: shuffle whole blocks of consecutive indices, so that a batch-strategy batch stays one read.

A batch-strategy cache stores images [k*B, (k+1)*B) at one variant as rows 0..B-1 of one file. A sampler
that shuffles single indices scatters every batch over B files; shuffling the blocks instead, with a
DataLoader batch size of B, makes each batch one contiguous slice (CacheDataset.__getitems__). Within a
block the order is fixed, which is the price: an epoch still sees every image once, in a new block order.
"""
from __future__ import annotations

import numpy as np
from torch.utils.data import DistributedSampler, Sampler


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
    is shuffled per sample (DistributedSampler, which with one replica is a plain seeded shuffle)."""
    c = ds.config
    if c.strategy == "batch" and batch_size == c.batch_size:
        return BlockSampler(len(ds), batch_size, shuffle=shuffle, seed=seed, rank=rank, world=world)
    return DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed)
