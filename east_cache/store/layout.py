"""Which file and row hold sample (image, variant): the one place that maps samples to files.

A strategy decides how many records a file holds: whole = all, image = an image's K variants,
batch = batch_size consecutive images at one variant, chunked = chunk_size records. Rows are
variant-major (all images at variant 0, then variant 1, ...) except for the image strategy, whose
file i holds image i's variants. A batch file holds consecutive images at one variant, so a whole
training batch is one contiguous read.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from east_cache.config import AUTO, BuildConfig


@dataclass(frozen=True)
class Layout:
    strategy: str       # one of config.STRATEGIES (resolved: never "auto")
    n_images: int       # images in the cache, in name order
    variants: int       # K, samples per image
    batch_size: int     # records per file, batch strategy
    chunk_size: int     # records per file, chunked strategy

    @classmethod
    def of(cls, cfg: BuildConfig, n_images: int) -> "Layout":
        assert cfg.strategy != AUTO, "resolve the strategy before laying files out"
        return cls(cfg.strategy, n_images, cfg.variants, cfg.batch_size, cfg.chunk_size)

    @property
    def records_per_file(self) -> int:
        return {"whole": max(1, self.n_images * self.variants), "image": self.variants,
                "batch": self.batch_size, "chunked": self.chunk_size}[self.strategy]

    @property
    def file_count(self) -> int:
        if self.n_images == 0:
            return 0
        if self.strategy == "whole":
            return 1
        if self.strategy == "image":
            return self.n_images
        if self.strategy == "batch":
            return self.variants * math.ceil(self.n_images / self.batch_size)
        return math.ceil(self.n_images * self.variants / self.chunk_size)

    def locate(self, image: int, variant: int) -> tuple[int, int]:
        """(file index, row) of sample (image, variant)."""
        if self.strategy == "image":
            return image, variant
        if self.strategy == "batch":
            per_variant = math.ceil(self.n_images / self.batch_size)
            return variant * per_variant + image // self.batch_size, image % self.batch_size
        g = variant * self.n_images + image
        if self.strategy == "whole":
            return 0, g
        return g // self.chunk_size, g % self.chunk_size

    def members(self) -> list[list[tuple[int, int]]]:
        """For every file, the (image, variant) of each of its rows, in row order."""
        files: list[list[tuple[int, int]]] = [[] for _ in range(self.file_count)]
        for v in range(self.variants):
            for i in range(self.n_images):
                f, r = self.locate(i, v)
                assert r == len(files[f]), "layout rows must be dense and ordered"
                files[f].append((i, v))
        return files

    def variant_offsets(self, names: list[str], seed: int) -> np.ndarray:
        """Per-image offset o_i: epoch e reads variant (e + o_i) mod K. Drawn from the seed and the image
        name, so it is stable when other images are added or removed. A batch file rotates as a whole,
        so that a training batch stays one contiguous read."""
        assert len(names) == self.n_images, "one name per image"
        keys = ([f"batch{i // self.batch_size}" for i in range(len(names))] if self.strategy == "batch"
                else names)
        return np.array([int.from_bytes(hashlib.blake2b(f"{seed}/{k}".encode(), digest_size=8).digest(), "little")
                         % self.variants for k in keys], dtype=np.int64)
