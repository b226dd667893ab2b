"""A packed page file damaged inside its records (its size unchanged, its index intact) is refused when a page is
read, naming the file, the image and the repair: never read as a blank or a short page. The last 4 KiB zeroed
zero the last page's size field, which made it a 0 x 0 page: an all-black crop, no tile CRC to check."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from east_cache.errors import CacheError
from east_cache.reader import CacheDataset
from east_cache.store.format import JPEG_PAGE, PAGE
from east_cache.store.formats.packed import extent_problem
from east_cache.tools.sampledata import write_sample_dataset
from helpers import make_tiny_cache

TAIL = 4096   # bytes zeroed at the end of the file


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("extent") / "d", n_images=2, words_per_page=6,
                                page_size=(160, 120))


def zero_tail(cache: Path) -> Path:
    f = cache / "data" / json.loads((cache / "manifest.json").read_text())["files"][0]["name"]
    with open(f, "r+b") as fh:
        fh.seek(-TAIL, 2)
        fh.write(bytes(TAIL))
    return f


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_a_page_file_with_its_tail_zeroed_is_refused_naming_file_image_and_repair(data, tmp_path, codec):
    cache = make_tiny_cache(data, tmp_path / "c", image_codec=codec, strategy="whole")
    f = zero_tail(cache)
    ds = CacheDataset(cache)   # the index is intact: the file opens
    with pytest.raises(CacheError) as e:
        for i in range(len(ds)):
            ds[i]
    msg = str(e.value)
    assert f.name in msg and any(f"image {n}," in msg for n in ds.names) and "verify" in msg and "\n" not in msg, msg


def fields_of(w: int, h: int, image: int, maps: int | None = None) -> dict:
    f = {"size": np.array([w, h], np.int32), "image": np.zeros(image, np.uint8)}
    if maps is not None:
        f["maps"] = np.zeros(maps, np.uint16)
    return f


def test_a_page_s_fields_must_be_as_long_as_its_size_says():
    raw, jpeg = PAGE.spec(_cfg()), JPEG_PAGE.spec(_cfg())
    from east_cache.store.page_record import image_values, map_values
    ok = fields_of(100, 60, image_values((100, 60)), map_values((100, 60), 0.5))
    assert extent_problem(ok, raw, 0.5) is None
    assert extent_problem(fields_of(0, 0, 0, 0), raw, 0.5) is None            # a page --skip-bad blanked
    assert extent_problem(fields_of(0, 0, 0), jpeg, 0.5) is None
    assert "0 x 0" in extent_problem(fields_of(0, 0, image_values((100, 60)), 0), raw, 0.5)
    assert "image field" in extent_problem(fields_of(100, 60, image_values((100, 60)) - 1,
                                                     map_values((100, 60), 0.5)), raw, 0.5)
    assert "maps field" in extent_problem(fields_of(100, 60, image_values((100, 60)), 3), raw, 0.5)
    assert "size field" in extent_problem(fields_of(0, 60, 0, 0), raw, 0.5)
    assert "no head" in extent_problem(fields_of(100, 60, 500), jpeg, 0.5)     # a zeroed compressed image


def _cfg():
    from east_cache.config import BuildConfig
    return BuildConfig(image_size=96, input_size=64)


def packed_head(spec, lengths) -> tuple[np.ndarray, int]:
    """The head and index bytes of a packed file of records with these field lengths (values), and its size."""
    from east_cache.store.formats.packed import PACKED_MAGIC, layout
    index, total = layout(spec, lengths)
    head = np.concatenate([np.array([PACKED_MAGIC, len(lengths), len(spec.kind.names), spec.kind.code], "<i8"),
                           index.astype("<i8").ravel()])
    return head.view(np.uint8), total


def test_an_index_that_gives_a_field_another_length_than_a_page_can_have_is_refused_at_open():
    from east_cache.store.formats.packed import index_problem
    spec = PAGE.spec(_cfg())
    image, maps = (spec.dtype[n].shape[0] for n in ("image", "maps"))
    for lengths, ok in (([[image, maps, 2], [0, 0, 2]], True), ([[image, maps, 3]], False),
                        ([[image + 3 * 32 * 32, maps, 2]], False)):
        head, total = packed_head(spec, lengths)
        why = index_problem(head, total, spec)
        assert (why is None) == ok, (lengths, why)
