"""A crop's maps rasterised from its page's words equal the page's stored maps in that window, bit for bit, with and
without cut words, on and off the canvas."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import random_page

from east_cache.reader.crop import apply_patch, maps_and_patch, page_words
from east_cache.store.page_record import DONT_CARE_BIT, Page
from east_cache.reader.raster import PagePolygons
from east_cache.sample.crop_draw import grid_step

SIZE = 96   # crop side, page px


def polygons(page: Page, map_scale: float) -> PagePolygons:
    return PagePolygons(page.points, page.offsets, page.care, map_scale, page.maps.shape)


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
@pytest.mark.parametrize("seed", range(4))
def test_any_window_equals_the_stored_maps(seed, map_scale):
    page = random_page(seed, map_scale=map_scale)
    pp = polygons(page, map_scale)
    h, w = page.maps.shape
    rng = np.random.default_rng(seed)
    m = round(SIZE * map_scale)
    for x, y in [*rng.integers(-m, (w + 1, h + 1), (30, 2)), (0, 0), (w - m, h - m), (-m - 5, 0)]:
        np.testing.assert_array_equal(pp.maps(int(x), int(y), m), page.maps.rect(int(x), int(y), m, m),
                                      err_msg=f"seed {seed}, window at {(x, y)}")


@pytest.mark.parametrize("seed", range(4))
def test_cut_words_equal_the_readers_patch(seed):
    """The reader's crops: origins on the window grid, cut words made don't-care by its patch of the stored maps."""
    s = 0.5
    page = random_page(seed, map_scale=s)
    words, pp = page_words(page, SIZE, s, draw=False), polygons(page, s)
    rng = np.random.default_rng(seed + 10)
    step, (pw, ph) = grid_step(s), page.size
    tried = 0
    for _ in range(40):
        origin = rng.integers(-SIZE // step, (pw // step + 1, ph // step + 1)) * step
        cut = rng.random(len(words.quads)) < 0.3
        want, patch = maps_and_patch(page, origin, cut, SIZE, s, words)
        if patch is not None:
            apply_patch(want, patch)
            tried += 1
        got = pp.maps(round(origin[0] * s), round(origin[1] * s), round(SIZE * s), cut)
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}, origin {origin}, cut {np.flatnonzero(cut)}")
    assert tried > 10   # the patch path was exercised


def test_an_empty_page_is_all_dont_care():
    pp = PagePolygons(np.zeros((0, 2), np.float32), np.zeros(1, np.int64), np.zeros(0, np.uint8), 0.5, (0, 0))
    assert (pp.maps(0, 0, 8) == 1 << DONT_CARE_BIT).all()
