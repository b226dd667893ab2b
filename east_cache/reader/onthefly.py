"""OnTheFlyDataset: makes each sample when asked, with the same code the cache builder uses.

For comparison with the cache, and for users who want fresh augmentation every epoch: with
fresh=True, epoch e draws variant e of every image (an endless supply of distinct draws).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from east_cache.config import BuildConfig
from east_cache.ingest.ufo import load_splits
from east_cache.sample.make import make_sample
from east_cache.store.format import CROP
from east_cache.store.layout import Layout


class OnTheFlyDataset(Dataset):
    def __init__(self, data_dirs, split: str = "train", config: BuildConfig | None = None, fresh: bool = False):
        self.config = config or BuildConfig()
        self.records, self.summary = load_splits([Path(d) for d in data_dirs], split, self.config)
        self.fresh = fresh
        self.epoch = 0
        c = self.config
        layout = Layout("image", len(self.records), c.variants, c.batch_size, c.chunk_size)
        self.offsets = layout.variant_offsets([r.name for r in self.records], c.seed)

    def __len__(self) -> int:
        return len(self.records)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def variant(self, i: int) -> int:
        return self.epoch if self.fresh else (self.epoch + int(self.offsets[i])) % self.config.variants

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        s = make_sample(self.records[i], self.config, self.variant(i))
        return {f.name: f.stored(getattr(s, f.name)) for f in CROP.fields}
