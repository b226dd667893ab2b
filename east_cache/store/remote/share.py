"""The node share: each machine of a multi-node run gets a fixed set of whole data files, so that it downloads
about 1/nodes of the cache, once.

Files go to nodes by a deterministic balance of their sizes (the largest first, each to the node holding the
fewest bytes so far; ties to the lower file index and node rank), so every rank of every node computes the same
assignment from the manifest alone, on resume too. At epoch e, item i lies in the file holding its variant of
that epoch (e + o_i) mod K; a node reads the items whose file of the epoch is one of its own. So across nodes
every item is read once per epoch, a node's items change from epoch to epoch as variants rotate through files,
and a node reads only its files. How a node orders and splits its items among its ranks is the sampler's.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from east_cache.errors import UsageError
from east_cache.store.layout import Layout


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


def node_items(layout: Layout, variant_offsets: np.ndarray, epoch: int, files: Sequence[int]) -> np.ndarray:
    """The items (image indices, ascending) a node whose files are `files` reads at `epoch`."""
    variants = (epoch + np.asarray(variant_offsets)) % layout.variants
    where = np.array([layout.locate(i, int(v))[0] for i, v in enumerate(variants)], dtype=np.int64)
    return np.flatnonzero(np.isin(where, np.asarray(list(files), dtype=np.int64)))
