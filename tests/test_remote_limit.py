"""The local cache folder's limit (least recently used files evicted, pinned ones never, the bytes never past the
limit, even with forked readers) and download ahead, against moto's S3 server on loopback."""
from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import make_tiny_cache

from east_cache.errors import RemoteError, UsageError
from east_cache.reader.ahead import Ahead
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
from east_cache.location import Location
from east_cache.retry import RetryPolicy
from east_cache.store.remote.space import folder_bytes, least_limit, parse_size, stem

AHEAD = 1   # files fetched ahead: the limit must hold AHEAD + 2 files


@pytest.fixture(scope="module")
def crops(tmp_path_factory, tiny_data) -> Path:
    """2 images x 3 variants, a file each: 6 files of the same size."""
    return make_tiny_cache(tiny_data, tmp_path_factory.mktemp("limit") / "c", strategy="chunked", chunk_size=1,
                           variants=3, crop="build")


@pytest.fixture
def stored(s3, crops) -> Location:
    fs = s3.fs()
    for p in sorted(crops.rglob("*")):
        if p.is_file() and p.name != ".lock":
            fs.pipe_file(s3.url("c", p.relative_to(crops).as_posix()), p.read_bytes())
    return Location.parse(s3.url("c"))


def opened(loc: Location, folder: Path, limit: int = 0, **settings) -> LocalCache:
    return LocalCache(loc, LocalCacheSettings(folder=folder, limit_bytes=limit, ahead=AHEAD, jobs=2,
                                              retry=RetryPolicy(attempts=2, first_wait_s=0.01), **settings))


def least(loc: Location, tmp_path: Path) -> int:
    unlimited = opened(loc, tmp_path / "probe")
    return least_limit([u.bytes for u in unlimited.units.values()], unlimited.settings.at_once)


def test_a_limit_below_the_largest_files_is_refused_up_front_with_the_number(stored, tmp_path):
    with pytest.raises(UsageError) as e:
        opened(stored, tmp_path / "lc", limit=1000)
    flag = str(e.value).split("pass --local-cache-limit ")[1].split()[0]
    assert str(stored) in str(e.value) and parse_size(flag) >= least(stored, tmp_path)
    opened(stored, tmp_path / "lc", limit=parse_size(flag))   # the number it gave is enough
    assert not list((tmp_path / "lc" / "data").iterdir())     # nothing was downloaded before the refusal


@pytest.mark.slow
def test_least_recently_used_files_go_pinned_ones_stay_and_the_limit_holds(stored, tmp_path):
    limit = least(stored, tmp_path)
    local = opened(stored, tmp_path / "lc", limit)
    names = list(local.units)
    keep = names[1]
    local.pin(keep)
    for round_ in range(2):
        for name in names:
            local.ensure(name)
            assert folder_bytes(local.local_dir / "data") <= limit
            assert local.present(keep)
            time.sleep(0.01)   # distinct last-use times
    assert local.downloaded_files > len(names)   # files were evicted and fetched again
    local.unpin(keep)
    used = {n for n in names if local.present(n)}
    assert len(used) == len(names) - 3 and names[-1] in used   # the newest stayed, the oldest went


def test_a_mapped_file_keeps_reading_after_its_eviction(stored, tmp_path):
    local = opened(stored, tmp_path / "lc", least(stored, tmp_path))
    names = list(local.units)
    first = np.load(local.ensure(names[0]), mmap_mode="r")
    expected = bytes(first.tobytes())
    for name in names[1:]:
        local.ensure(name)
    assert not local.present(names[0])
    assert first.tobytes() == expected


@pytest.mark.slow
def test_no_room_while_every_file_is_pinned_ends_in_one_error(stored, tmp_path):
    local = opened(stored, tmp_path / "lc", least(stored, tmp_path), room_wait_s=0.2)
    names = list(local.units)
    for name in names[:3]:
        local.pin(name)
    with pytest.raises(RemoteError, match=r"--local-cache-limit \S+ leaves no room for .*pass a larger"):
        local.ensure(names[3])
    assert not local.present(names[3]) and folder_bytes(local.local_dir / "data") <= local.settings.limit_bytes


def _read_randomly(local: LocalCache, seed: int, rounds: int, errors) -> None:
    rng = random.Random(seed)
    names = list(local.units)
    try:
        for _ in range(rounds):
            name = rng.choice(names)
            with local.pinned([name]) as (path,):
                assert path.stat().st_size > 0
    except BaseException as e:   # reported to the parent
        errors.put(repr(e))
        raise


@pytest.mark.slow
def test_forked_readers_never_take_the_folder_past_its_limit(stored, tmp_path):
    limit = least(stored, tmp_path)
    local = opened(stored, tmp_path / "lc", limit)
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    readers = [ctx.Process(target=_read_randomly, args=(local, seed, 15, errors)) for seed in range(3)]
    for r in readers:
        r.start()
    most = 0
    while any(r.is_alive() for r in readers):
        most = max(most, folder_bytes(local.local_dir / "data"))
    for r in readers:
        r.join()
    most = max(most, folder_bytes(local.local_dir / "data"))   # readers faster than the first look
    assert errors.empty() and all(r.exitcode == 0 for r in readers)
    assert 0 < most <= limit


def test_ahead_fetches_the_next_files_and_pins_them_until_the_reader_passes(stored, tmp_path):
    local = opened(stored, tmp_path / "lc", least(stored, tmp_path))
    names = list(local.units)
    order = names[::-1]
    pinned = lambda n: local.locks.pinned_here(stem(n))
    with Ahead(local, order) as ahead:
        assert ahead.wait(0) == local.path(order[0])
        ahead.window[1].result()
        assert all(pinned(n) and local.present(n) for n in order[:2])   # the one read and AHEAD more
        ahead.reached(order[3])
        ahead.wait(3), ahead.window[4].result()
        assert all(pinned(n) and local.present(n) for n in order[3:5])
        assert not any(pinned(n) for n in order[:3])   # passed: released
        assert not local.present(order[2])   # passed before it was due: never fetched
    assert not any(pinned(n) for n in names)
    assert local.downloaded_files == 4


def test_ahead_pins_files_already_local_without_a_download_thread(stored, tmp_path):
    """A later epoch, every file local: each pin is taken in the reader's thread (a thread per file would cost the
    reader more than its batches); a file not local still goes to a download thread."""
    local = opened(stored, tmp_path / "lc")
    names = list(local.units)
    for n in names[:-1]:
        local.ensure(n)
    ahead = Ahead(local, names, ahead=len(names))
    threaded, submit = [], ahead.pool.submit
    ahead.pool.submit = lambda fn, name: threaded.append(name) or submit(fn, name)
    try:
        ahead.advance(0)
        assert threaded == names[-1:]
        assert ahead.window[len(names) - 1].result() == local.path(names[-1])
        assert all(local.locks.pinned_here(stem(n)) for n in names)   # the reader has not passed any yet
    finally:
        ahead.close()
    assert not any(local.locks.pinned_here(stem(n)) for n in names)
    assert local.downloaded_files == len(names)
