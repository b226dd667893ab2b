"""zarr chunk files (the npy samples, compressed maps, incremental, verify and repair, crash safety,
the Dataset) and the dask backend (a loopback cluster writes the bytes a local build writes)."""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from helpers import cache_bytes, edit_ufo, nudge_first_word, small_config
from torch.utils.data import DataLoader

from east_cache.reader import CacheDataset, collate
from east_cache.cli import main
from east_cache.errors import BuildError, CacheError
from east_cache.build.run import build_cache
from east_cache.build.cluster import dask_client
from east_cache.store.format import FIELDS
from east_cache.store.formats import get_format
from east_cache.store.manifest import Manifest, data_path
from east_cache.tools.verify import verify

REPO = Path(__file__).resolve().parents[1]


def build(data, out, file_format="zarr", jobs=1, backend=None, **over):
    cfg = small_config(**{"strategy": "chunked", "chunk_size": 3, "crop": "build", **over})   # zarr holds crops
    return build_cache(cfg, [data], out, jobs=jobs, quiet=True, backend=backend, file_format=file_format)


def decoded(out: Path) -> dict:
    """Every sample's record bytes and words, by (image, variant): what the Dataset reads, whatever the format."""
    ds = CacheDataset(out, check_stale=False)
    return {(ds.names[i], v): (ds.record(i, v).tobytes(), *(q.tobytes() for q in ds.quads(i, v)))
            for i in range(len(ds)) for v in range(ds.config.variants)}


def shard_file(group: Path, field: str) -> Path:
    return next(p for p in get_format("zarr").stored_files(group / field) if p.name != "zarr.json")


@pytest.fixture(scope="module")
def caches(sample_root, tmp_path_factory):
    """The same samples as npy and as zarr chunk files (chunks of 3 leave a partial last file)."""
    root = tmp_path_factory.mktemp("formats")
    build(sample_root, root / "npy", file_format="npy")
    build(sample_root, root / "zarr", jobs=2)
    return root


@pytest.mark.slow
def test_zarr_holds_the_samples_of_npy(caches):
    assert decoded(caches / "zarr") == decoded(caches / "npy")
    npy, zr = Manifest.load(caches / "npy").files, Manifest.load(caches / "zarr").files
    assert [Path(f.name).stem for f in zr] == [Path(f.name).stem for f in npy]
    assert [f.checksum for f in zr] == [f.checksum for f in npy], "checksums cover decoded records"
    group = data_path(caches / "zarr", zr[0].name)
    for k in FIELDS:
        array = zarr.open_array(group / k, mode="r")
        assert array.shards == array.shape and array.chunks == (1, *array.shape[1:]), k  # a sample a chunk
        assert bool(array.compressors) == (k != "image"), k
    geo_bytes = sum(p.stat().st_size for p in (caches / "zarr" / "data").glob("*.zarr/geo/**/*") if p.is_file())
    raw = np.load(data_path(caches / "npy", npy[0].name), mmap_mode="r")
    assert geo_bytes < raw.dtype["geo"].itemsize * 10 / 4, "maps are compressed"


def test_dataloader_workers_read_zarr(caches):
    ds, npy = CacheDataset(caches / "zarr"), CacheDataset(caches / "npy")
    ds.set_epoch(1)
    npy.set_epoch(1)
    assert ds[0]["geo"].dtype == np.float16  # opened here, before the workers fork
    assert ds.open_files() == {0: "lazy"}
    assert pickle.loads(pickle.dumps(ds)).open_files() == {}, "no open zarr group is pickled"
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate)
    seen = 0
    for b, batch in enumerate(loader):
        assert batch["image"].dtype == torch.uint8 and batch["geo"].dtype == torch.float16
        for j in range(len(batch["image"])):
            for k in FIELDS:
                assert np.array_equal(batch[k][j].numpy(), npy[b * 2 + j][k]), k
            seen += 1
    assert seen == len(ds) == 5
    in_memory = CacheDataset(caches / "zarr", in_memory=True)
    in_memory.set_epoch(1)
    assert all(np.array_equal(in_memory[3][k], npy[3][k]) for k in FIELDS)


@pytest.mark.slow
def test_zarr_incremental_rebuild_equals_a_full_build(data_copy, tmp_path):
    build(data_copy, tmp_path / "inc")
    edit_ufo(data_copy, nudge_first_word)
    r = build(data_copy, tmp_path / "inc")
    # The edited image's two variants sit in files 0 and 1: those are rewritten, their other rows copied.
    assert (r.computed, r.copied, r.files_written, r.files_reused) == (2, 4, 2, 2)
    build(data_copy, tmp_path / "full")
    assert decoded(tmp_path / "inc") == decoded(tmp_path / "full")
    shards = lambda out: [f.shards for f in Manifest.load(out).files]  # noqa: E731
    assert shards(tmp_path / "inc") == shards(tmp_path / "full"), "the same shard bytes"


@pytest.mark.slow
def test_verify_finds_a_corrupt_shard_and_build_repairs_it(data_copy, tmp_path):
    out = tmp_path / "c"
    build(data_copy, out)
    good = decoded(out)
    name = Manifest.load(out).files[1].name
    victim = shard_file(data_path(out, name), "image")
    with open(victim, "r+b") as f:  # raw pixels: the shard still decodes, to wrong values
        f.seek(1000)
        f.write(b"\xff" * 10)
    rel = victim.relative_to(data_path(out, name)).as_posix()
    assert verify(out) == [(name, f"{rel}: checksum mismatch (corrupt data)")]
    assert main(["verify", str(out)]) == 1
    r = build(data_copy, out)
    assert (r.files_written, r.computed) == (1, 3), "exactly the corrupt file is redone, from the source"
    assert decoded(out) == good and not verify(out)


def test_chunk_too_big_for_a_worker_fails_before_building(data_copy, tmp_path, monkeypatch):
    monkeypatch.setattr("east_cache.store.formats.zarr.available_ram", lambda: 100_000)  # bytes; a chunk of 3 needs 166 kB
    with pytest.raises(BuildError, match="a worker holds a whole chunk file in memory.*smaller --chunk-size"):
        build(data_copy, tmp_path / "c")
    assert not (tmp_path / "c").exists(), "a failed first build leaves nothing behind"


@pytest.mark.slow
def test_sigkill_zarr_build_leaves_no_cache_then_resumes(data_copy, tmp_path):
    out = tmp_path / "c"
    args = [sys.executable, "-m", "preprocess", "build", "--data", str(data_copy), "--out", str(out), "--quiet",
            "--format", "zarr", "--crop", "build", "--chunk-size", "1", "--variants", "6", "--input-size", "96", "--image-size", "192",
            "--jobs", "1"]
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and len(list((out / "data").glob("*.zarr"))) < 3:
        time.sleep(0.005)
    assert proc.poll() is None, "the build finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with pytest.raises(CacheError, match="no finished cache"):
        CacheDataset(out)
    finished = {p.name for p in (out / "data").glob("*.zarr")}
    assert subprocess.run(args, cwd=REPO).returncode == 0
    assert finished <= {f.name for f in Manifest.load(out).files}, "groups finished before the kill are reused"
    assert not verify(out) and not list((out / "data").glob("*.tmp*"))


@pytest.mark.slow
def test_cli_zarr_build_info_and_format_rules(sample_root, tmp_path, capsys):
    out = tmp_path / "c"
    code = ("import sys, east_cache.cli as c; rc = c.main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'preprocess must not import torch'; sys.exit(rc)")
    args = ["build", "--data", str(sample_root), "--out", str(out), "--input-size", "64", "--image-size", "128",
            "--format", "zarr", "--crop", "build", "--chunk-size", "2", "--jobs", "1"]
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "strategy chunked, zarr files: --format zarr: zarr files hold the chunked strategy" in r.stderr
    assert main(["info", str(out)]) == 0
    assert "in 3 zarr data files" in capsys.readouterr().out
    assert main([*args, "--strategy", "whole"]) == 2
    assert "--format zarr stores the chunked strategy only" in capsys.readouterr().err
    assert main([*args, "--backend", "dask"]) == 2
    assert "--backend dask and --scheduler ADDRESS go together" in capsys.readouterr().err


@pytest.mark.slow
def test_a_build_without_format_keeps_the_caches_format(data_copy, tmp_path):
    out = tmp_path / "c"
    build(data_copy, out)
    edit_ufo(data_copy, nudge_first_word)
    r = build(data_copy, out, file_format=None)
    assert r.computed == 2 and Manifest.load(out).file_format == "zarr"
    assert build(data_copy, out, file_format=None).up_to_date
    build(data_copy, out, file_format=None, strategy="image")   # zarr holds chunk files only: back to npy
    assert Manifest.load(out).file_format == "npy"


def test_dask_cluster_writes_the_bytes_of_a_local_build(sample_root, tmp_path):
    distributed = pytest.importorskip("distributed", reason='dask is not installed: pip install -e ".[dask]"')
    build(sample_root, tmp_path / "local", file_format="npy")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        with dask_client(cluster.scheduler_address), distributed.get_task_stream() as tasks:
            build(sample_root, tmp_path / "dask", file_format="npy", jobs=-1, backend="dask")
    assert {t["worker"] for t in tasks.data}, "the cluster's workers ran the build"
    assert cache_bytes(tmp_path / "dask") == cache_bytes(tmp_path / "local")


def test_unreachable_scheduler_is_named(tmp_path):
    pytest.importorskip("distributed", reason='dask is not installed: pip install -e ".[dask]"')
    with pytest.raises(BuildError, match="cannot reach the dask scheduler at tcp://127.0.0.1:1 "):
        with dask_client("tcp://127.0.0.1:1", timeout=0.5):
            pass


def test_missing_dask_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now raises ImportError
    with pytest.raises(BuildError, match=r'pip install -e "\.\[dask\]"'):
        with dask_client("tcp://127.0.0.1:8786"):
            pass
