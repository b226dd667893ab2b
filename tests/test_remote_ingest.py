"""Data sets and builds at URLs (moto's S3 server on loopback): a build from a data set in a bucket makes the samples
a build from the same files on disk makes, fingerprints them from one listing, redoes only a changed image; the
command line builds to a bucket (`build --out s3://`), describes and verifies it there, and every failure is one
line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY, first_image

from east_cache.cli import main
from east_cache.config import BuildConfig
from east_cache.errors import DataError, RemoteError
from east_cache.ingest.objects import listed, source_path
from east_cache.ingest.ufo import load_splits
from east_cache.location import Location, filesystem
from east_cache.retry import RetryPolicy
from east_cache.build.run import build_cache
from east_cache.build.fingerprint import source_fingerprints
from east_cache.store.manifest import Manifest
from east_cache.build.plan import CORRUPT_MARKER
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings

CFG = BuildConfig(**{**TINY, "map_scale": 0.5, "variants": 2, "geometry": "build", "strategy": "image"})
BUILD = ["--image-size", "96", "--input-size", "64", "--variants", "2", "--geometry", "build", "--strategy", "image",
         "--jobs", "1", "--quiet"]


def put_data(s3, local, prefix: str = "set") -> str:
    s3.fs().put(str(local), s3.url(prefix), recursive=True)
    return s3.url(prefix)


def file_fingerprints(root: str) -> dict[str, str]:
    records, _ = load_splits([root], "train", CFG)
    return {name: fp.file for name, fp in source_fingerprints(records).items()}


@pytest.mark.slow
def test_a_build_from_a_bucket_makes_the_samples_a_build_from_disk_makes(s3, data_copy, tmp_path):
    url = put_data(s3, data_copy)
    ours = build_cache(CFG, [url], tmp_path / "from-s3", jobs=1, quiet=True)
    theirs = build_cache(CFG, [data_copy], tmp_path / "from-disk", jobs=1, quiet=True)
    m, local = Manifest.load(tmp_path / "from-s3"), Manifest.load(tmp_path / "from-disk")
    assert ours.computed == theirs.computed == len(m.images) * CFG.variants > 0
    assert [f.checksum for f in m.files] == [f.checksum for f in local.files]   # the records, decoded, equal
    assert m.source.data_dirs == [url] and all(src.path.startswith(url + "/images/") for src in m.images.values())
    assert all(src.file.startswith("obj:") for src in m.images.values())


@pytest.mark.slow
def test_images_are_fingerprinted_from_one_listing_and_only_a_changed_one_is_made_again(s3, data_copy, tmp_path):
    url = put_data(s3, data_copy)
    build_cache(CFG, [url], tmp_path / "c", jobs=1, quiet=True)
    before = file_fingerprints(url)
    image = first_image(before)
    fs = s3.fs()
    fs.pipe_file(f"{url}/images/{image}", fs.cat_file(f"{url}/images/{image}") + b"\0")
    asked = []   # requests for one object's details: none, the listing answers them

    class Asking:
        def __init__(self, fs):
            self.fs = fs

        def __getattr__(self, name):
            if name in ("info", "isdir", "exists"):
                asked.append(name)
            return getattr(self.fs, name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("east_cache.ingest.objects.filesystem", lambda loc: Asking(filesystem(loc)))
        after = file_fingerprints(url)
    assert {k for k in before if before[k] != after[k]} == {image} and not asked
    report = build_cache(CFG, [url], tmp_path / "c", jobs=1, quiet=True)
    assert report.computed == CFG.variants and (report.files_written, report.files_reused) == (1, len(before) - 1)


@pytest.mark.slow
def test_a_missing_object_is_named_and_skip_bad_leaves_it_out(s3, data_copy, tmp_path):
    url = put_data(s3, data_copy)
    gone = first_image(json.loads((data_copy / "ufo" / "train.json").read_text())["images"])
    s3.fs().rm_file(f"{url}/images/{gone}")
    with pytest.raises(DataError, match=f"image file not found at '{url}/images/{gone}'"):
        build_cache(CFG, [url], tmp_path / "c", jobs=1, quiet=True)
    report = build_cache(CFG, [url], tmp_path / "c", jobs=1, quiet=True, skip_bad=True)
    assert [name for name, _ in report.skipped] == [gone]


def test_an_object_path_joins_lists_and_refuses_to_leave_its_root(s3, data_copy):
    root = listed(source_path(put_data(s3, data_copy)))
    assert (root / "images").is_dir() and not (root / "nothing").is_dir()
    assert (root / "ufo/train.json").info()["size"] == (data_copy / "ufo" / "train.json").stat().st_size
    with pytest.raises(FileNotFoundError):
        (root / "images" / "absent.jpg").info()
    with pytest.raises(ValueError):
        root / "../elsewhere"


@pytest.mark.slow
def test_build_info_verify_at_a_url_through_the_command_line(s3, data_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    data, out = put_data(s3, data_copy), s3.url("cache")
    assert main(["build", "--data", data, "--out", out, *BUILD]) == 0
    stored = s3.fs().find(out)
    assert f"{out[5:]}/manifest.json" in stored and not any(p.endswith(".lock") for p in stored)
    capsys.readouterr()
    assert main(["info", out]) == 0
    text = capsys.readouterr().out
    assert f"cache      {out}" in text and f"source     {data} (split train)" in text
    assert main(["info", out, "--json"]) == 0 and json.loads(capsys.readouterr().out)["data_bytes"] > 0
    assert main(["verify", out, "--local-cache", str(tmp_path / "lc")]) == 0
    assert "all files match" in capsys.readouterr().out
    # a bit flipped in a stored data file: found, listed at the URL, redone by the next build, and uploaded
    m = Manifest.load(tmp_path / "lc" / Location.parse(out).key())   # --local-cache DIR holds DIR/HASH of the URL
    name = m.files[0].name
    obj = f"{out}/data/{name}"
    body = bytearray(s3.fs().cat_file(obj))
    body[len(body) // 2] ^= 0xFF   # inside a record (a packed page file ends in alignment padding no record reads)
    s3.fs().pipe_file(obj, bytes(body))
    assert main(["verify", out, "--local-cache", str(tmp_path / "lc2")]) == 1
    assert name in capsys.readouterr().out and s3.fs().exists(f"{out}/{CORRUPT_MARKER}")
    assert main(["build", "--out", out, *BUILD]) == 0
    assert not s3.fs().exists(f"{out}/{CORRUPT_MARKER}") and s3.fs().cat_file(obj) != bytes(body)
    assert main(["verify", out, "--local-cache", str(tmp_path / "lc3")]) == 0


def test_a_url_holding_a_secret_is_refused_in_one_line_without_it(capsys):
    with pytest.raises(SystemExit):
        main(["info", "s3://user:secret@bucket/c"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "not inside the URL" in err and "secret" not in err


def test_a_bucket_that_is_not_there_is_one_line(s3, tmp_path, capsys):
    out = "s3://no-such-bucket-here/c"
    assert main(["build", "--data", "s3://no-such-bucket-here/set", "--out", out, "--staging", str(tmp_path),
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "testing-secret-key" not in err


def test_a_staging_folder_needs_a_url(tmp_path, capsys):
    assert main(["build", "--out", str(tmp_path / "c"), "--staging", str(tmp_path / "s")]) == 2
    assert "go with --out URL" in capsys.readouterr().err


def test_reading_a_url_without_the_remote_extra_says_what_to_install(monkeypatch, tmp_path, capsys):
    import builtins
    real = builtins.__import__

    def without_fsspec(name, *a, **k):
        if name.split(".")[0] in ("fsspec", "s3fs"):
            raise ImportError(name=name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", without_fsspec)
    with pytest.raises(Exception) as e:
        # options of their own: a client this process made before (imports done) would not be asked for
        LocalCache(Location.parse("s3://bucket/cache", {"anon": True}), LocalCacheSettings(folder=tmp_path))
    assert 'pip install "east-cache[remote]"' in str(e.value) and "\n" not in str(e.value)


def test_convert_names_a_url_it_cannot_read_or_write(tmp_path, capsys):
    assert main(["convert", "--from", "icdar2015", "s3://bucket/gt", "--out", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: s3://bucket/gt: convert reads and writes local folders") and "\n" not in err


def test_evaluate_and_predict_read_a_data_set_at_a_url(s3, data_copy, capsys):
    from east_cache.predict.pages import pages_from_split
    url = put_data(s3, data_copy)
    gt, pred = data_copy / "ufo" / "train.json", str(data_copy / "predictions.json")
    images = json.loads(gt.read_text())["images"]   # predictions: the ground truth's words, points only
    Path(pred).write_text(json.dumps({"images": {name: {"words": {k: {"points": w["points"]} for k, w in
                                                                   e["words"].items()}} for name, e in images.items()}}))
    assert main(["evaluate", "--gt", str(gt), "--pred", pred, "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--gt", f"{url}/ufo/train.json", "--pred", pred, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == local
    pages, _ = pages_from_split(url, "train")
    assert [p.path for p in pages] == [f"{url}/images/{p.name}" for p in pages_from_split(data_copy, "train")[0]]


def test_a_store_failing_while_images_are_read_stops_the_build_and_blanks_no_image(s3, data_copy, tmp_path,
                                                                                   monkeypatch):
    """--skip-bad blanks an image that cannot be decoded; one the store could not deliver is not that image's fault:
    the build stops with one line naming it (tries bounded), and nothing is committed."""
    url = put_data(s3, data_copy)
    monkeypatch.setattr("east_cache.ingest.objects.DEFAULT_RETRY", RetryPolicy(attempts=2, first_wait_s=0.01))

    class Dropping:   # the store's answer to every image read: a connection reset
        def __init__(self, fs):
            self.fs = fs

        def cat_file(self, path, *a, **k):
            if "/images/" in path:
                raise ConnectionResetError("connection reset by peer")
            return self.fs.cat_file(path, *a, **k)

        def __getattr__(self, name):
            return getattr(self.fs, name)
    monkeypatch.setattr("east_cache.ingest.objects.filesystem", lambda loc: Dropping(filesystem(loc)))
    with pytest.raises(RemoteError, match=r"/images/.*ConnectionResetError.*after 2 tries") as e:
        build_cache(CFG, [url], tmp_path / "c", jobs=1, quiet=True, skip_bad=True)
    assert "\n" not in str(e.value) and not (tmp_path / "c" / "manifest.json").exists()
