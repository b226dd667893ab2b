"""The piecewise UFO reader: the same members as json.load, the same error positions, whatever the piece size,
and the memory of one entry rather than of the whole file."""
from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.jsonstream import JSONError, NotAnObject, members
from east_cache.ingest.ufo import load_ufo
from east_cache.tools.sampledata import write_sample_dataset

PIECES = [1, 2, 7, 64, 1 << 18]   # 1: every token is cut by a piece boundary


def read(text: str, chunk: int, key: str = "images") -> list:
    return list(members(io.StringIO(text), key, chunk))


@pytest.fixture(scope="module")
def sample_text(tmp_path_factory) -> str:
    root = write_sample_dataset(tmp_path_factory.mktemp("s") / "d", n_images=3, words_per_page=12,
                                page_size=(200, 150), seed=3)
    return (root / "ufo" / "train.json").read_text()


@pytest.mark.parametrize("chunk", PIECES)
def test_members_are_what_json_load_gives(sample_text, chunk):
    assert read(sample_text, chunk) == list(json.loads(sample_text)["images"].items())


@pytest.mark.parametrize("chunk", PIECES)
def test_numbers_literals_escapes_and_other_top_level_members_survive_piece_boundaries(chunk):
    doc = {"version": 12345.678e-3, "meta": {"x": [None, True, False, -0.5]},
           "images": {"é \"q\".jpg": {"img_w": 1234567, "words": {"1": {"points": [[1e2, 2.5], [-3, 4]],
                                                                       "transcription": "a\\b\u00e9\u4e2d"}}},
                      "b.jpg": {}, "c.jpg": 7},
           "after": "tail"}
    for text in (json.dumps(doc), json.dumps(doc, indent=3), json.dumps(doc, ensure_ascii=False)):
        assert read(text, chunk) == list(doc["images"].items())


@pytest.mark.parametrize("chunk", PIECES)
@pytest.mark.parametrize("text", [
    '{"images": {\n  "a.jpg": {"img_w": 10,,}}}',       # a bad entry
    '{"images": {"a.jpg": {}\n "b.jpg": {}}}',          # a missing comma between entries
    '{"images": {"a.jpg": {}}, "x": tru}',              # a bad literal after the images
    '{"images": {"a.jpg": {}}}\n\n  extra',             # trailing data
    '{"images": {"a.jpg": {}',                          # cut off
    '{"images" {}}',                                    # no colon
    '{"images": {a: 1}}',                               # an unquoted name
    '',                                                 # empty
    '\n\n{"images": {"a.jpg": [1, 2,]}}',
])
def test_invalid_json_reports_the_position_json_loads_reports(text, chunk):
    with pytest.raises(json.JSONDecodeError) as want:
        json.loads(text)
    with pytest.raises(JSONError) as got:
        read(text, chunk)
    assert (got.value.lineno, got.value.colno) == (want.value.lineno, want.value.colno), got.value


@pytest.mark.parametrize("text", ['{"imgs": {}}', '{"images": []}', "[1, 2]", "{}", '"images"'])
def test_valid_json_without_the_object_is_not_an_object_error(text):
    with pytest.raises(NotAnObject):
        read(text, 3)


def test_the_same_image_twice_in_one_file_is_an_error_naming_it(tmp_path):
    (tmp_path / "a.jpg").touch()
    path = tmp_path / "train.json"
    path.write_text('{"images": {"a.jpg": {"img_w": 9, "img_h": 9}, "a.jpg": {"img_w": 8, "img_h": 8}}}')
    with pytest.raises(DataError, match=r"train\.json: image 'a\.jpg' has two entries"):
        load_ufo(path, tmp_path, BuildConfig())


@pytest.mark.slow
def test_ingest_holds_about_one_entry_not_the_whole_file(tmp_path):
    """json.load of this file peaks at several times its size; the piecewise read at well under its size
    (the compact records it keeps, plus one piece of text)."""
    word = {"transcription": "word", "illegibility": False, "language": ["en"], "tags": [],
            "orientation": "Horizontal", "points": [[10.5, 20.25], [60.5, 20.25], [60.5, 40.75], [10.5, 40.75]]}
    images = {f"p{i:04d}.jpg": {"img_w": 800, "img_h": 600, "words": {str(k): word for k in range(60)}}
              for i in range(400)}
    for name in images:
        (tmp_path / name).touch()
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"images": images}, indent=2))
    del images
    size = path.stat().st_size
    tracemalloc.start()
    try:
        with open(path) as f:
            json.load(f)
        whole = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        records, _ = load_ufo(path, tmp_path, BuildConfig())
        piecewise = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(records) == 400 and sum(r.n_words for r in records) == 400 * 60
    assert whole > 2 * size, (whole, size)
    assert piecewise < size / 3, (piecewise, size, whole)
