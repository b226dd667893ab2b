"""Device-side targets: expand_targets equals fill_geometry (the numpy path) bit for bit."""
from __future__ import annotations

import numpy as np
import torch
from helpers import random_page

from east_cache.reader.collate import collate
from east_cache.reader.crop import crop_page, crop_page_compact, legible_boxes
from east_cache.reader.expand import expand_batch, expand_targets, pad_tables
from east_cache.sample.crop_draw import cuts_at
from east_cache.sample.geometry import min_rect_angles
from east_cache.sample.targets import fill_geometry, owner_map, word_table


def random_quads(seed: int, n: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c, w, h, t = rng.uniform(-10, size + 10, (n, 2)), rng.uniform(4, 60, n), rng.uniform(4, 20, n), rng.uniform(-3, 3, n)
    box = np.stack([np.stack([-w, -h], 1), np.stack([w, -h], 1), np.stack([w, h], 1), np.stack([-w, h], 1)], 1) / 2
    rot = np.stack([np.stack([np.cos(t), np.sin(t)], 1), np.stack([-np.sin(t), np.cos(t)], 1)], 1)
    return np.einsum("nkj,nji->nki", box, rot) + c[:, None]


def test_expand_equals_fill_geometry_bit_for_bit():
    size, scale, owners, tables, expected = 128, 0.5, [], [], []
    m = round(size * scale)
    for seed, n in ((0, 30), (1, 5), (2, 0)):
        quads = random_quads(seed, n, size)
        owner = owner_map(quads, scale, (m, m)) if n else np.zeros((m, m), np.int32)
        geo = np.zeros((5, m, m), np.float32)
        if n:
            fill_geometry(geo, owner, quads, scale, min_rect_angles(quads))
        owners.append(owner.astype(np.uint16)[None])
        tables.append(word_table(quads) if n else np.zeros((0, 9), np.float32))
        expected.append(geo)
    score, geo = expand_targets(torch.from_numpy(np.stack(owners)), pad_tables(tables), scale)
    assert score.dtype == torch.uint8 and geo.dtype == torch.float32 and geo.shape == (3, 5, m, m)
    np.testing.assert_array_equal(score.numpy(), (np.stack(owners) > 0).astype(np.uint8))
    assert (score[0] > 0).sum() > 100
    np.testing.assert_array_equal(geo.numpy().view(np.uint32), np.stack(expected).view(np.uint32))


def test_compact_crops_expand_to_the_cpu_crops():
    """crop_page_compact + collate (tiles, table padding) + expand_batch == crop_page, with and without cut words,
    on the page and across its edges."""
    page, size = random_page(11), 96
    boxes = legible_boxes(page)
    rng = np.random.default_rng(0)
    origins = [rng.integers([-4, -4], [(400 - size) // 4 + 4, (300 - size) // 4 + 4]) * 4 for _ in range(24)]
    cuts = [cuts_at(boxes, o, size) for o in origins]
    assert 0 < sum(c.any() for c in cuts) < len(cuts)
    cpu = [crop_page(page, o, c, size, 0.5) for o, c in zip(origins, cuts)]
    out = expand_batch(collate([crop_page_compact(page, o, c, size, 0.5) for o, c in zip(origins, cuts)]))
    for k in ("image", "score", "roi"):
        np.testing.assert_array_equal(out[k].numpy(), np.stack([c[k] for c in cpu]), err_msg=k)
    np.testing.assert_array_equal(out["geo"].half().numpy(), np.stack([c["geo"] for c in cpu]))
