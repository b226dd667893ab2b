"""Training from a cache in a bucket (moto's S3 server on loopback): CacheDataset given the URL reads the items of the
local cache, the run's loaders download each file once per machine whatever the worker processes, stay within a
local cache limit, and under the node share two nodes read disjoint files and together every item each epoch."""
from __future__ import annotations

import multiprocessing
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, TINY, edit_ufo, epochs_of, first_image, make_tiny_cache, read_log, train_run, with_flags
from s3 import free_port

from east_cache import config
from east_cache.config import BuildConfig
from east_cache.errors import CacheError
from east_cache.location import Location
from east_cache.reader.cache import CacheDataset
from east_cache.reader.fetch import FetchingLoader
from east_cache.reader.loader import make_loader, open_cache
from east_cache.reader.sampler import ShareSampler
from east_cache.build.run import build_cache
from east_cache.store.remote import local_cache
from east_cache.reader.share import NodeShare
from east_cache.store.remote.space import folder_bytes, least_limit
from east_cache.tools.sampledata import write_sample_dataset

# the page codecs the build knows (raw tiles; compressed ones once they exist): each is read from a URL alike
PAGE_CODECS = [{"image_codec": c} for c in getattr(config, "IMAGE_CODECS", ())] or [{}]


@pytest.fixture(scope="module")
def caches(tmp_path_factory, sample_root) -> dict[str, Path]:
    """The 5 sample pages as page caches (one per codec), a crop cache (npy) and a crop cache (zarr), 2 variants,
    several files each."""
    root = tmp_path_factory.mktemp("loader")
    out = {f"pages{k}": make_tiny_cache(sample_root, root / f"pages{k}", strategy="image", variants=2, crop="read",
                                        geometry="build", **codec) for k, codec in enumerate(PAGE_CODECS)}
    out["crops"] = make_tiny_cache(sample_root, root / "crops", strategy="chunked", chunk_size=2, variants=2,
                                   crop="build")
    cfg = BuildConfig(**{**TINY, "map_scale": 0.5, "strategy": "chunked", "chunk_size": 2, "variants": 2,
                         "crop": "build"})
    build_cache(cfg, [sample_root], root / "zarr", jobs=1, quiet=True, file_format="zarr")
    out["zarr"] = root / "zarr"
    return out


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    """40 small pages as crops, 2 a file: 20 files, each read twice an epoch."""
    root = tmp_path_factory.mktemp("wide")
    data = write_sample_dataset(root / "data", n_images=40, words_per_page=4, page_size=(120, 90), seed=2)
    return make_tiny_cache(data, root / "c", strategy="chunked", chunk_size=2, crop="build")


@pytest.fixture
def downloads(monkeypatch, tmp_path):
    """Every object download of this process and of the processes it forks from now on: () -> Counter of URLs."""
    log, real = tmp_path / "downloads.log", local_cache.download

    def counted(loc, *args, **kw):
        out = real(loc, *args, **kw)
        with open(log, "a") as f:   # appends: one line per call, from any process
            f.write(loc.url + "\n")
        return out
    monkeypatch.setattr(local_cache, "download", counted)
    return lambda: Counter(log.read_text().split()) if log.exists() else Counter()


def epoch_batches(loader, epoch: int) -> list[dict]:
    loader.sampler.set_epoch(epoch)
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def same_batches(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(
        torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k] for k in x) for x, y in zip(a, b))


@pytest.mark.parametrize("kind", [*(f"pages{k}" for k in range(len(PAGE_CODECS))), "crops",
                                  pytest.param("zarr", marks=pytest.mark.slow)])   # zarr: 50 objects each way
def test_items_read_from_a_url_are_the_local_caches(s3, caches, tmp_path, kind):
    url = s3.put_cache(caches[kind])
    for compact in (False, True):   # the second opens the URL again, its files already downloaded by the first
        ours = CacheDataset(url, compact=compact, local_cache=tmp_path / "lc")
        theirs = CacheDataset(caches[kind], compact=compact)
        assert ours.where == url and ours.fingerprint == theirs.fingerprint
        for epoch in (0, 1):
            ours.set_epoch(epoch), theirs.set_epoch(epoch)
            for i in range(len(theirs)):
                a, b = ours[i], theirs[i]
                assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in b if k != "patch"), compact
                assert (a.get("patch") is None) == (b.get("patch") is None)


def _read_every_file(url: str, folder: Path) -> None:
    ds = CacheDataset(url, local_cache=folder)
    for name in ds.files:
        ds.remote.ensure(name)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_runs_loader_downloads_each_file_once_per_machine(s3, caches, tmp_path, downloads, workers):
    """Forked loader workers and a second process of the machine (another rank) share one download per file; the
    batches are the local cache's, and a second epoch downloads nothing."""
    url = s3.put_cache(caches["pages0"])
    local = make_loader(open_cache(caches["pages0"], False), 2, True, seed=0, workers=workers)
    remote_ds = open_cache(url, False, local_cache=tmp_path / "lc")
    loader = make_loader(remote_ds, 2, True, seed=0, workers=workers)
    assert isinstance(loader, FetchingLoader)
    other = multiprocessing.get_context("fork").Process(target=_read_every_file, args=(url, tmp_path / "lc"))
    other.start()
    first = epoch_batches(loader, 0)
    other.join(timeout=60)
    assert other.exitcode == 0 and same_batches(first, epoch_batches(local, 0))
    counts = downloads()
    assert set(counts.values()) == {1} and sum(not u.endswith(".npz") for u in counts) == len(remote_ds.files)
    assert same_batches(epoch_batches(loader, 1), epoch_batches(local, 1)) and downloads() == counts
    if workers:
        loader.close()


@pytest.mark.slow
def test_reading_within_a_limit_keeps_the_folder_under_it_and_downloads_files_not_items(s3, wide, tmp_path,
                                                                                       downloads, monkeypatch):
    url = s3.put_cache(wide)
    probe = CacheDataset(url, local_cache=tmp_path / "probe").remote
    sizes = [u.bytes for u in probe.units.values()]
    limit = max(least_limit(sizes, probe.settings.at_once), sum(sizes) // 2)
    assert limit < sum(sizes)
    folder, most, counted = tmp_path / "lc" / Location.parse(url).key(), [0], local_cache.download

    def measured(*args, **kw):
        """The folder's bytes, and those this process maps of files gone from it, as a download starts: its room
        was just made and its temp files reserved at full size, so the folder's peaks are seen here."""
        most[0] = max(most[0], folder_bytes(folder / "data") + mapped_deleted(folder))
        return counted(*args, **kw)
    monkeypatch.setattr(local_cache, "download", measured)
    ds = open_cache(url, False, local_cache=tmp_path / "lc", local_cache_limit=limit)
    assert ds.remote.local_dir == folder
    loader = make_loader(ds, 1, True, seed=0, workers=0)
    assert isinstance(loader.sampler.base, ShareSampler) and loader.sampler.base.window_bytes == limit // 2
    seen = []
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        seen.append(sorted(i for _, i in loader.sampler))
        for _ in loader:
            pass
    # beyond the limit, only maps of the few files downloading ahead evicted since this reader last opened one
    assert 0 < most[0] <= limit + max(sizes) * (ds.remote.settings.ahead + 1)
    files = sum(n for u, n in downloads().items() if not u.endswith(".npz"))
    assert files <= 3 * len(ds.files) < 3 * len(ds)   # about a download per file per epoch, not one per item
    assert all(s == list(range(len(ds))) for s in seen)   # every item once per epoch


def mapped_deleted(folder: Path) -> int:
    """Bytes this process maps of files deleted from folder (Linux's /proc/self/maps; 0 elsewhere)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return 0
    spans = [line.split()[0].split("-") for line in lines if str(folder) in line and line.endswith("(deleted)")]
    return sum(int(b, 16) - int(a, 16) for a, b in spans)


def _node(url: str, folder: Path, node: int, results) -> None:
    """One machine of two: reads its share for two epochs; reports the items it read and the files it holds."""
    ds = CacheDataset(url, compact=True, local_cache=folder)
    loader = make_loader(ds, 1, True, seed=0, workers=0, share=NodeShare(2, node))
    items = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        items.append([i for _, i in loader.sampler])
        for _ in loader:
            pass
    held = sorted(p.name for p in (ds.remote.local_dir / "data").iterdir() if p.suffix == ".npy")
    results.put((node, items, held, len(loader)))


@pytest.mark.slow
def test_two_nodes_read_disjoint_files_and_together_every_item_each_epoch(s3, caches, tmp_path):
    url = s3.put_cache(caches["pages0"])
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    nodes = [ctx.Process(target=_node, args=(url, tmp_path / f"node{n}", n, results)) for n in range(2)]
    for p in nodes:
        p.start()
    got = dict((r[0], r[1:]) for r in (results.get(timeout=120) for _ in nodes))
    for p in nodes:
        p.join(timeout=60)
        assert p.exitcode == 0
    (items0, held0, steps0), (items1, held1, steps1) = got[0], got[1]
    assert held0 and held1 and not set(held0) & set(held1)   # each node downloaded its own files only
    assert steps0 == steps1   # the same steps on every rank, or DDP would wait forever
    n = len(CacheDataset(url, local_cache=tmp_path / "probe"))
    for a, b in zip(items0, items1):
        assert not set(a) & set(b) and set(a) | set(b) == set(range(n))
        assert len(a) == len(b) >= max(len(set(a)), len(set(b)))   # padding repeats a node's own items only
    ds = CacheDataset(url, local_cache=tmp_path / "node0")
    again = ShareSampler(ds, NodeShare(2, 0), [ds.remote.units[f].bytes for f in ds.files], seed=0)
    again.set_epoch(1)
    assert list(again) == items0[1]   # the same order in a run resumed at epoch 2


@pytest.mark.slow
def test_a_cache_rebuilt_at_its_url_under_a_run_stops_it_with_one_line(s3, data_copy, tmp_path):
    first = make_tiny_cache(data_copy, tmp_path / "v1", strategy="image", variants=2, geometry="build")
    url = s3.put_cache(first)
    ds = CacheDataset(url, local_cache=tmp_path / "lc")
    edit_ufo(data_copy, lambda images: images[first_image(images)]["words"].popitem())
    s3.fs().rm(url, recursive=True)
    s3.put_cache(make_tiny_cache(data_copy, tmp_path / "v2", strategy="image", variants=2, geometry="build"))
    with pytest.raises(CacheError, match="rebuilt while this run read it") as e:
        for i in range(len(ds)):
            ds[i]
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_train_py_trains_from_a_url_within_a_limit(s3, wide, tmp_path):
    url = s3.put_cache(wide)
    sizes = [u.bytes for u in CacheDataset(url, local_cache=tmp_path / "probe").remote.units.values()]
    limit = least_limit(sizes, 6)   # the default download-ahead and what is read: the least a run may have
    log = train_run(url, tmp_path / "run", "--epochs", "2", "--max-steps", "6", "--local-cache", str(tmp_path / "lc"),
                    "--local-cache-limit", str(limit))
    assert epochs_of(log)[-1]["step"] == 6 and log[0]["cache"] == url
    assert 0 < folder_bytes(tmp_path / "lc" / Location.parse(url).key() / "data") <= limit


@pytest.mark.slow
def test_torchrun_on_two_nodes_trains_from_a_url_each_downloading_its_share(s3, caches, tmp_path):
    """Two machines simulated as two torchrun launches on this one (--nnodes 2, a node rank each, one process each,
    a local cache folder each): DDP steps in lock step, and each node holds only its own files."""
    url = s3.put_cache(caches["pages0"])
    for attempt in range(3):   # the master port is looked up before node 0 binds it: another program may take it
        here, port = tmp_path / str(attempt), free_port()
        runs = [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank",
             str(n), "--master-addr", "127.0.0.1", "--master-port", str(port), "train.py", "--cache", url,
             "--node-share", "--local-cache", str(here / f"node{n}"), "--out", str(here / "run"), "--epochs", "2",
             "--batch-size", "1", "--workers", "0", "--log-every", "1", "--backbone-weights", "random"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in range(2)]
        out = [r.communicate(timeout=300)[0] for r in runs]
        if "EADDRINUSE" not in out[0] + out[1]:
            break
    assert [r.returncode for r in runs] == [0, 0], out[0][-3000:] + out[1][-3000:]
    held = [{p.name for p in (here / f"node{n}" / Location.parse(url).key() / "data").glob("*.npy")}
            for n in range(2)]
    assert held[0] and held[1] and not held[0] & held[1]
    assert [r["epoch"] for r in epochs_of(read_log(here / "run"))] == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("flags, says", [
    ([], "no finished cache here"),
    (["--local-cache-limit", "1K"], "pass --local-cache-limit"),
    (["--node-share", "--nodes", "2", "--node-rank", "2"], "--node-rank 2 must lie in [0, --nodes 2)"),
    (["--rebuild"], "build --out s3://"),
    (["--out", "s3://bucket/run"], "checkpoints and logs go to a local folder"),
])
def test_train_py_says_what_is_wrong_with_a_url_in_one_line(s3, caches, tmp_path, capsys, flags, says):
    from east_cache.train.train import main as train_main
    url = s3.put_cache(caches["crops"]) if flags else s3.url("nothing")
    args = ["--cache", url, "--out", str(tmp_path / "run"), "--local-cache", str(tmp_path / "lc"), "--max-steps", "1",
            "--workers", "0", "--backbone-weights", "random"]
    assert train_main(with_flags(args, flags)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and says in err, err
