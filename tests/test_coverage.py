"""Coverage: word shares against hand-counted cases, and the >= 99% goal of page mode on a tiny sample set."""
from __future__ import annotations

import numpy as np

from east_cache.ingest.ufo import CARE, load_splits
from east_cache.sample.crop_draw import grid_step, word_boxes
from east_cache.sample.make import choose_sample_crop
from east_cache.sample.page import make_page
from east_cache.store.layout import Layout
from east_cache.tools.coverage import build_mode, coverage, page_mode
from helpers import small_config


def test_build_mode_counts_each_source_word_once():
    crops = [[np.array([0, 1]), np.array([1, 2])], [np.array([], np.int64)]]   # image 1 has no legible words
    c = coverage([4, 0], build_mode(crops, np.array([0, 0])), epochs=(1, 2, 3))
    assert c.words == 4 and c.seen == (0.5, 0.75, 0.75)
    assert c.text_free == 3 / 6 and c.blank_pages == 0.5 and c.distinct == 1.5


def test_offsets_decide_which_variant_an_epoch_reads():
    crops = [[np.array([0]), np.array([1])]]
    assert coverage([2], build_mode(crops, np.array([1])), epochs=(1,)).seen == (0.5,)
    assert coverage([2], build_mode(crops, np.array([0])), epochs=(1, 2)).seen == (0.5, 1.0)


def test_page_mode_sees_nearly_every_word_where_one_frozen_crop_does_not(sample_root):
    cfg = small_config(variants=1, input_size=128)   # every word of these pages fits in a crop
    recs, _ = load_splits([sample_root], "train", cfg)
    names = [r.name for r in recs]
    offsets = Layout("image", len(names), 1, 1, 1).variant_offsets(names, cfg.seed)
    pages = []
    for r in recs:
        p = make_page(r, cfg, 0)
        pages.append([(word_boxes(p.points, p.offsets)[p.care > 0], p.size, p.weight)])
    legible = [int((r.reason == CARE).sum()) for r in recs]
    paged = coverage(legible, page_mode(names, pages, offsets, cfg.seed, cfg.input_size, grid_step(cfg.map_scale)),
                     epochs=(1, 20))
    frozen = coverage(legible, build_mode([[np.flatnonzero(choose_sample_crop(r, cfg, 0).whole)] for r in recs],
                                          offsets), epochs=(1, 20))
    assert paged.seen[1] >= 0.99 and paged.text_free == 0
    assert frozen.seen[1] == frozen.seen[0] < paged.seen[1]
    assert paged.distinct > 10
