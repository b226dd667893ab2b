"""The typed manifest (load validates once, errors say what to run), the Layout, strategy auto, the field table."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import make_tiny_cache, small_config

from east_cache.reader import CacheDataset
from east_cache.cli import main
from east_cache.config import STRATEGIES, BuildConfig
from east_cache.errors import CacheError
from east_cache.build.run import build_cache
from east_cache.sample.page import max_page_size
from east_cache.store.format import CROP, FORMAT_VERSION, MANIFEST, PAGE, record_spec
from east_cache.store.layout import Layout
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_record import image_values, map_values
from east_cache.tools.verify import verify


@pytest.fixture(scope="module")
def built(sample_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("manifest") / "c"
    build_cache(small_config(strategy="batch", batch_size=2), [sample_root], out, jobs=1, quiet=True)
    return out


@pytest.fixture
def cache(built, tmp_path):
    """A private copy of the built cache, free to damage."""
    dst = tmp_path / "c"
    shutil.copytree(built, dst)
    return dst


def edit_manifest(cache, change) -> None:
    path = cache / MANIFEST
    d = json.loads(path.read_text())
    change(d)
    path.write_text(json.dumps(d))


def test_manifest_round_trips_through_json(built):
    m = Manifest.load(built)
    assert m.to_dict() == json.loads((built / MANIFEST).read_text())
    assert m.config.strategy == "batch" and m.layout.file_count == len(m.files) == 2 * 3


DAMAGE = {
    "files removed": lambda d: d.pop("files"),
    "files a dict": lambda d: d.update(files={}),
    "strategy auto": lambda d: d["config"].update(strategy="auto"),
    "variants edited": lambda d: d["config"].update(variants=3),
    "image removed": lambda d: d["images"].pop(sorted(d["images"])[0]),
    "a file outside data": lambda d: d["files"][0].update(name="../../outside.npy"),
    "rows a string": lambda d: d["files"][0].update(rows="2"),
    "input size a string": lambda d: d["config"].update(input_size="96"),
    "not an object": lambda d: (d.clear(), d.update(format_version=FORMAT_VERSION, config=[])),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_manifest_is_refused_with_the_repair(cache, damage, capsys):
    edit_manifest(cache, DAMAGE[damage])
    with pytest.raises(CacheError, match=rf"{MANIFEST}.*python -m preprocess verify {cache}.*python -m preprocess build"):
        CacheDataset(cache, check_stale=False)
    assert main(["info", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_another_format_version_is_refused_with_the_build_command(cache):
    edit_manifest(cache, lambda d: d.update(format_version=0))
    with pytest.raises(CacheError, match=r"format version 0.*python -m preprocess build --data .* --strategy batch"):
        Manifest.load(cache)


@pytest.mark.parametrize("edit", ["format version", "build fingerprint"])
def test_train_rebuild_makes_a_cache_of_another_version_or_other_code_anew(edit, tiny_data, tmp_path, capsys):
    """train.py --rebuild (east_cache.reader.loader.open_cache) rebuilds a cache that another format version or
    other sample code made, with the settings it records, where a plain open refuses it and names --rebuild."""
    from east_cache.reader import open_cache
    from east_cache.build.fingerprint import build_fingerprint
    cache = make_tiny_cache(tiny_data, tmp_path / "c")
    built = Manifest.load(cache).config
    edit_manifest(cache, lambda d: d.update(format_version=FORMAT_VERSION - 1) if edit == "format version" else
                  d.update(build_fingerprint="0" * 16))
    with pytest.raises(CacheError, match="pass --rebuild to train.py"):
        CacheDataset(cache)
    ds = open_cache(cache, True, rank=0, world=1)
    assert f"{cache}: it " in capsys.readouterr().out
    m = Manifest.load(cache)
    assert m.format_version == FORMAT_VERSION and m.build_fingerprint == build_fingerprint(m.config) == ds.fingerprint
    assert m.config == built and CacheDataset(cache)[0]["image"].any()   # (data files named by this code's
    # build fingerprint are its own, and kept: a cache of another version has files of another fingerprint)


def test_a_data_file_of_another_dtype_is_refused_by_name(cache):
    name = Manifest.load(cache).files[0].name
    np.save(data_path(cache, name), np.zeros(2, record_spec(small_config(input_size=64, image_size=128)).dtype))
    with pytest.raises(CacheError, match=rf"{name}.*damaged.*verify"):
        CacheDataset(cache, check_stale=False)[0]
    assert [n for n, _ in verify(cache)] == [name]


def test_auto_strategy_is_resolved_before_the_manifest(data_copy, tmp_path):
    assert BuildConfig().strategy == "auto"
    with pytest.raises(AssertionError, match="resolve the strategy"):
        BuildConfig().fingerprint()
    r = build_cache(small_config(), [data_copy], tmp_path / "c", jobs=1, quiet=True)
    m = Manifest.load(tmp_path / "c")
    assert m.config.strategy == r.strategy in STRATEGIES and f"--strategy {r.strategy}" in m.build_command(tmp_path / "c")
    assert build_cache(small_config(), [data_copy], tmp_path / "c", jobs=1, quiet=True).up_to_date
    again = build_cache(small_config(strategy=r.strategy), [data_copy], tmp_path / "c", jobs=1, quiet=True)
    assert again.up_to_date, "the resolved strategy is the same cache as auto"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_layout_places_every_sample_once(strategy):
    layout = Layout(strategy, n_images=7, variants=3, batch_size=2, chunk_size=4)
    members = layout.members()
    assert len(members) == layout.file_count
    where = {(i, v): (f, r) for f, rows in enumerate(members) for r, (i, v) in enumerate(rows)}
    assert len(where) == 7 * 3
    assert all(layout.locate(i, v) == fr for (i, v), fr in where.items())
    assert max(len(rows) for rows in members) <= layout.records_per_file


def test_the_field_table_gives_the_record_dtype():
    cfg = small_config(crop="build")
    dtype = record_spec(cfg).dtype
    assert dtype.names == CROP.names == ("image", "score", "geo", "roi")
    assert dtype["image"].shape == (3, 96, 96) and dtype["geo"].base == np.float16 and dtype["geo"].shape == (5, 48, 48)
    assert record_spec(cfg).raw_bytes() == 3 * 96 * 96, "only the image is stored raw"
    assert CROP.field("geo").stored(np.ones((5, 2, 2), np.float32)).dtype == np.float16
    page = record_spec(small_config(crop="read")).dtype   # flat fields as long as the largest page
    w, h = max_page_size(small_config())
    assert page.names == PAGE.names and page["image"].shape == (image_values((w, h)),)
    assert page["maps"].shape == (map_values((w, h), 0.5),) and map_values((w, h), 0.5) >= w * h // 4
