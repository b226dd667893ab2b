"""The node share: each machine of a multi-node run gets a fixed set of whole data files, so that it downloads
about 1/nodes of the cache, once.

Files go to nodes by a deterministic balance of their sizes (the largest first, each to the node holding the
fewest bytes so far; ties to the lower file index and node rank), so every rank of every node computes the same
assignment from the manifest alone, on resume too. At epoch e, item i lies in the file holding its variant of
that epoch (e + o_i) mod K; a node reads the items whose file of the epoch is one of its own. So across nodes
every item is read once per epoch, a node's items change from epoch to epoch as variants rotate through files,
and a node reads only its files. How a node orders and splits its items among its ranks is the sampler's
(reader/sampler.py); where a process lies among nodes is NodeShare's, from the launcher's environment.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from east_cache.errors import UsageError
from east_cache.store.layout import Layout


@dataclass(frozen=True)
class NodeShare:
    """Where a process reads in a run over several machines: node node_rank of `nodes`, process local_rank of the
    node's local_world."""
    nodes: int = 1
    node_rank: int = 0
    local_rank: int = 0
    local_world: int = 1

    @classmethod
    def from_env(cls, nodes: int | None = None, node_rank: int | None = None) -> NodeShare:
        """From the launcher's environment (GROUP_RANK, GROUP_WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE;
        NODE_RANK where a launcher sets that), nodes and node_rank (--nodes, --node-rank) given over it."""
        env = os.environ
        local_world, world = int(env.get("LOCAL_WORLD_SIZE", "1")), int(env.get("WORLD_SIZE", "1"))
        nodes = nodes or int(env.get("GROUP_WORLD_SIZE") or max(1, world // local_world))
        rank = node_rank if node_rank is not None else int(env.get("GROUP_RANK") or env.get("NODE_RANK") or 0)
        if world > 1 and nodes * local_world != world:
            raise UsageError(f"--nodes {nodes} x {local_world} process(es) per node (LOCAL_WORLD_SIZE) is not the "
                             f"run's {world} processes (WORLD_SIZE); give the number of machines the run spans")
        if not 0 <= rank < nodes:
            raise UsageError(f"--node-rank {rank} must lie in [0, --nodes {nodes})")
        return cls(nodes, rank, int(env.get("LOCAL_RANK", "0")), local_world)


def node_files(file_bytes: Sequence[int], node_rank: int, nodes: int) -> list[int]:
    """The file indices of node node_rank among `nodes`, ascending; file_bytes: each file's size (or rows)."""
    if not 0 <= node_rank < nodes:
        raise UsageError(f"--node-rank {node_rank} must lie in [0, --nodes {nodes})")
    if len(file_bytes) < nodes:
        raise UsageError(f"the cache has {len(file_bytes)} data file(s), too few to share among {nodes} nodes: "
                         f"rebuild it with more files (a smaller --chunk-size, or --strategy image), or train "
                         f"without the node share")
    load = [0] * nodes
    owner = [0] * len(file_bytes)
    for f in sorted(range(len(file_bytes)), key=lambda f: (-file_bytes[f], f)):
        node = min(range(nodes), key=lambda n: (load[n], n))
        owner[f] = node
        load[node] += file_bytes[f]
    return [f for f, n in enumerate(owner) if n == node_rank]


@functools.lru_cache(maxsize=4)
def item_files(layout: Layout) -> np.ndarray:
    """(variants, images) int64: the file that holds each sample."""
    where = np.zeros((layout.variants, layout.n_images), np.int64)
    for f, rows in enumerate(layout.members()):
        for i, v in rows:
            where[v, i] = f
    return where


def epoch_files(layout: Layout, variant_offsets: np.ndarray, epoch: int) -> np.ndarray:
    """(images,): the file each item reads at `epoch` (image i's variant (epoch + offset_i) mod K)."""
    variants = (epoch + np.asarray(variant_offsets)) % layout.variants
    return item_files(layout)[variants, np.arange(layout.n_images)]


def node_items(layout: Layout, variant_offsets: np.ndarray, epoch: int, files: Sequence[int]) -> np.ndarray:
    """The items (image indices, ascending) a node whose files are `files` reads at `epoch`."""
    where = epoch_files(layout, variant_offsets, epoch)
    return np.flatnonzero(np.isin(where, np.asarray(list(files), dtype=np.int64)))
