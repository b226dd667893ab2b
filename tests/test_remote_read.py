"""Reading a cache stored in a bucket (moto's S3 server on loopback) through a local cache folder: the same bytes
as the local cache, one download per file per machine, nothing stale after a rebuild, and transfers that break
leave no half file under a final name and end in one clear error."""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import TINY, edit_ufo, first_image, make_tiny_cache

from east_cache.config import BuildConfig
from east_cache.errors import CacheError, RemoteError
from east_cache.reader.cache import CacheDataset
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
from east_cache.location import Location
from east_cache.retry import RetryPolicy
from east_cache.store.remote.space import TEMP_SUFFIX
from east_cache.store.sidecar import quads_path

FAST = RetryPolicy(attempts=3, first_wait_s=0.01)


@pytest.fixture(scope="module")
def caches(tmp_path_factory, tiny_data) -> dict[str, Path]:
    """The same 2 images as a page cache, a crop cache (npy) and a crop cache (zarr), 2 variants, several files."""
    root = tmp_path_factory.mktemp("remote")
    out = {"pages": make_tiny_cache(tiny_data, root / "pages", strategy="image", variants=2, crop="read",
                                     geometry="build"),
           "crops": make_tiny_cache(tiny_data, root / "crops", strategy="chunked", chunk_size=1, variants=2,
                                    crop="build")}
    cfg = BuildConfig(**{**TINY, "map_scale": 0.5, "strategy": "chunked", "chunk_size": 1, "variants": 2,
                         "crop": "build"})
    build_cache(cfg, [tiny_data], root / "zarr", jobs=1, quiet=True, file_format="zarr")
    out["zarr"] = root / "zarr"
    return out


def store(s3, local: Path, prefix: str = "c") -> Location:
    """The local cache at local, copied object by object into the test bucket (no code under test involved)."""
    fs = s3.fs()
    for p in sorted(local.rglob("*")):
        if p.is_file() and p.name != ".lock":
            fs.pipe_file(s3.url(prefix, p.relative_to(local).as_posix()), p.read_bytes())
    return Location.parse(s3.url(prefix))


def opened(loc: Location, folder: Path, **settings) -> LocalCache:
    return LocalCache(loc, LocalCacheSettings(folder=folder, retry=FAST, **settings))


def cache_bytes(cache: Path) -> dict[str, bytes]:
    """Every file of every data file and sidecar the manifest names (a zarr group's parts too), by path in data/."""
    m = Manifest.load(cache)
    tops = {f.name for f in m.files} | {quads_path(Path(f.name)).name for f in m.files}
    return {p.relative_to(cache / "data").as_posix(): p.read_bytes() for p in sorted((cache / "data").rglob("*"))
            if p.is_file() and p.relative_to(cache / "data").parts[0] in tops}


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in (folder / "data").rglob("*") if p.name.endswith(TEMP_SUFFIX)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pages", "crops", "zarr"])
def test_items_read_through_the_local_cache_are_the_local_caches(s3, caches, tmp_path, kind):
    local = opened(store(s3, caches[kind]), tmp_path / "lc")
    for name in local.units:
        local.ensure(name)
    assert cache_bytes(local.local_dir) == cache_bytes(caches[kind])
    ours, theirs = CacheDataset(local.local_dir, check_stale=False), CacheDataset(caches[kind], check_stale=False)
    for epoch in (0, 1):
        ours.set_epoch(epoch), theirs.set_epoch(epoch)
        for i in range(len(theirs)):
            assert all(np.array_equal(ours[i][k], theirs[i][k]) for k in theirs[i])
    assert local.downloaded_files == len(local.units) and not leftovers(local.local_dir)


def _read_all(loc_cache: LocalCache, seed: int, results) -> None:
    names = list(loc_cache.units)
    random.Random(seed).shuffle(names)
    got = {n: loc_cache.ensure(n).read_bytes() for n in names}
    results.put((loc_cache.downloaded_files, sorted(got), sum(len(b) for b in got.values())))


@pytest.mark.slow
def test_forked_processes_download_each_file_once(s3, caches, tmp_path):
    """Loader workers forked after the parent used its storage client: each makes its own, one of them downloads
    a file while the others wait for it, and all read the same bytes."""
    local = opened(store(s3, caches["crops"]), tmp_path / "lc")   # the parent's client is in use before the fork
    ctx, results = multiprocessing.get_context("fork"), multiprocessing.get_context("fork").Queue()
    workers = [ctx.Process(target=_read_all, args=(local, seed, results)) for seed in range(4)]
    for w in workers:
        w.start()
    got = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    assert sum(downloads for downloads, _, _ in got) == len(local.units)   # one download per file
    assert len({(tuple(names), size) for _, names, size in got}) == 1
    assert cache_bytes(local.local_dir) == cache_bytes(caches["crops"])


@pytest.mark.slow
def test_a_cache_rebuilt_at_the_same_url_is_never_served_stale(s3, caches, data_copy, tmp_path):
    first = make_tiny_cache(data_copy, tmp_path / "v1", strategy="image", variants=2, geometry="build")
    loc = store(s3, first)
    before = opened(loc, tmp_path / "lc")
    for name in before.units:
        before.ensure(name)
    edit_ufo(data_copy, lambda images: images[first_image(images)]["words"].popitem())
    # rebuilt in place
    second = make_tiny_cache(data_copy, tmp_path / "v1", strategy="image", variants=2, geometry="build")
    s3.fs().rm(s3.url("c"), recursive=True)
    store(s3, second)
    after = opened(loc, tmp_path / "lc")   # the same local folder: the manifest is fetched again at open
    for name in after.units:
        after.ensure(name)
    assert cache_bytes(after.local_dir) == cache_bytes(second)
    changed = sorted(set(before.units) - set(after.units))
    assert changed and Manifest.load(after.local_dir).files == Manifest.load(second).files
    os.unlink(before.path(changed[0]))   # a run opened before the rebuild asks for a file the rebuild removed
    with pytest.raises(CacheError, match="rebuilt while this run read it"):
        before.ensure(changed[0])


def test_a_truncated_object_is_refused_and_leaves_no_file(s3, caches, tmp_path):
    loc = store(s3, caches["crops"])
    name = Manifest.load(caches["crops"]).files[0].name
    fs = s3.fs()
    fs.pipe_file(s3.url("c", "data", name), fs.cat_file(s3.url("c", "data", name))[:-100])
    local = opened(loc, tmp_path / "lc")
    with pytest.raises(RemoteError) as e:
        local.ensure(name)
    msg = str(e.value)
    assert msg.startswith(f"{s3.url('c')}: data file {name} as stored is damaged") and "Rebuild it with:" in msg
    assert "truncated" in msg and "\n" not in msg
    assert not local.present(name) and not leftovers(local.local_dir)


@pytest.mark.slow
def test_a_dropped_connection_is_tried_again(s3, faulty, no_client_retries, caches, tmp_path):
    local = opened(store(s3, caches["pages"]), tmp_path / "lc", block_bytes=64 << 10)
    name = next(iter(local.units))
    faulty.cut(100_000)   # mid-file: its bytes come in blocks of 64 KiB
    local.ensure(name)
    assert faulty.cuts == 1
    assert local.path(name).read_bytes() == (caches["pages"] / "data" / name).read_bytes()


@pytest.mark.slow
def test_a_connection_that_keeps_dropping_ends_in_one_error_and_no_half_file(s3, faulty, no_client_retries, caches,
                                                                             tmp_path):
    loc = store(s3, caches["pages"])
    local = opened(loc, tmp_path / "lc", block_bytes=64 << 10)
    name = next(iter(local.units))
    faulty.cut(30_000, times=10**6)   # less than a block: every block is cut short
    with pytest.raises(RemoteError) as e:
        local.ensure(name)
    msg = str(e.value)
    assert msg.startswith(s3.url("c", "data")) and "after 3 tries" in msg and "Check the URL" in msg
    assert "testing-secret-key" not in msg and "\n" not in msg
    assert not local.present(name) and not leftovers(local.local_dir)
    faulty.heal()
    local.ensure(name)   # the next try starts over cleanly
    assert local.path(name).read_bytes() == (caches["pages"] / "data" / name).read_bytes()


def test_opening_a_url_without_a_cache_says_how_to_build_one(s3, tmp_path):
    with pytest.raises(CacheError, match=r"no finished cache here .*--out s3://"):
        opened(Location.parse(s3.url("nothing")), tmp_path / "lc")


def test_a_file_url_is_read_like_a_bucket(caches, tmp_path):
    """file:// goes through the same storage client path (and runs where moto is not installed)."""
    shutil.copytree(caches["crops"], tmp_path / "stored")
    local = opened(Location.parse(f"file://{tmp_path / 'stored'}"), tmp_path / "lc")
    for name in local.units:
        local.ensure(name)
    assert cache_bytes(local.local_dir) == cache_bytes(caches["crops"]) and not leftovers(local.local_dir)


@pytest.mark.slow
def test_a_sidecar_of_another_data_file_in_the_bucket_is_refused(s3, tiny_data, tmp_path):
    """Data file 0's sidecar object replaced by file 1's (a valid npz, other words) and the manifest's quads
    checksum edited to match: the sidecar's own data checksum names the mix-up, at the reader and in verify."""
    from east_cache.tools.remote import verify_at
    local = make_tiny_cache(tiny_data, tmp_path / "c", strategy="image", variants=1, crop="read")
    m = Manifest.load(local)
    a, b = m.files[0], m.files[1]
    loc = store(s3, local)
    fs = s3.fs()
    sidecar = lambda e: quads_path(Path(e.name)).name   # noqa: E731
    fs.pipe_file(s3.url("c", "data", sidecar(a)), (local / "data" / sidecar(b)).read_bytes())
    doc = json.loads((local / "manifest.json").read_text())
    doc["files"][0]["quads_checksum"] = b.quads_checksum
    fs.pipe_file(s3.url("c", "manifest.json"), json.dumps(doc).encode())
    with pytest.raises(CacheError, match=f"{Path(a.name).stem}.*words of another data file.*verify"):
        ds = CacheDataset(str(loc), local_cache=str(tmp_path / "lc"))
        [ds.quads(i) for i in range(len(ds))]
    bad = verify_at(loc, LocalCacheSettings(folder=tmp_path / "lc2", retry=FAST))
    assert [n for n, _ in bad] == [a.name] and "words of another data file" in bad[0][1], bad
