"""What the README and docs/remote.md promise about buckets, on the local S3 server: `info` on a missing URL leaves
no folder behind; a build to a bucket says where its staging copy is, what it takes and how to remove it;
someone else's manifest.json at an --out URL is refused naming the URL; `show` reads a cache at a URL through
--local-cache; and the docs' snippet that puts a data set into a bucket runs as written."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import cli_run

from east_cache.tools.sampledata import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--input-size", "64", "--image-size", "96", "--variants", "1", "--jobs", "1"]


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("promises") / "d", n_images=2, words_per_page=4,
                                page_size=(120, 96))


def test_info_on_a_missing_url_leaves_no_folder(s3, tmp_path, capsys):
    status, _, err = cli_run(capsys, "info", s3.url("nothing"), "--local-cache", tmp_path / "lc")
    assert status == 2 and err.startswith("error: ") and s3.url("nothing") in err, err
    assert not (tmp_path / "lc").exists(), sorted(str(p) for p in (tmp_path / "lc").rglob("*"))


@pytest.mark.slow
def test_a_build_to_a_bucket_says_where_its_staging_copy_is_and_how_to_remove_it(s3, small_data, tmp_path, capsys):
    staging = tmp_path / "staging"
    status, _, err = cli_run(capsys, "build", "--data", small_data, "--out", s3.url("c"), "--staging", staging, *FLAGS)
    assert status == 0, err
    line = [x for x in err.splitlines() if "staging" in x and "MiB" in x][-1]
    assert str(staging) in line and f"rm -r {staging}" in line, err


@pytest.mark.slow
def test_someone_elses_manifest_at_an_out_url_is_refused_naming_the_url(s3, small_data, tmp_path, capsys):
    s3.fs().pipe_file(s3.url("theirs", "manifest.json"), b'{"name": "not a cache of ours"}')
    status, _, err = cli_run(capsys, "build", "--data", small_data, "--out", s3.url("theirs"), "--staging",
                             tmp_path / "staging", *FLAGS)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert status == 2 and len(lines) == 1 and s3.url("theirs") in lines[0], err
    assert str(tmp_path / "staging") not in lines[0], "the staging folder is no place the user can fix it"
    assert s3.fs().cat_file(s3.url("theirs", "manifest.json")) == b'{"name": "not a cache of ours"}'


@pytest.mark.slow
def test_show_reads_a_cache_at_a_url_through_local_cache(s3, small_data, tmp_path, capsys):
    from helpers import make_tiny_cache
    url = s3.put_cache(make_tiny_cache(small_data, tmp_path / "c"))
    status, out, err = cli_run(capsys, "show", url, "0", "-o", tmp_path / "s.png", "--local-cache", tmp_path / "lc")
    assert status == 0 and (tmp_path / "s.png").stat().st_size > 0, err
    assert any((tmp_path / "lc").rglob("manifest.json")), "the cache was read through --local-cache"


def docs_snippet() -> str:
    """The python block of docs/remote.md that puts a data set into a bucket."""
    text = (REPO / "docs" / "remote.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return next(b for b in blocks if "fs.put" in b)


@pytest.mark.slow
def test_the_docs_snippet_puts_a_data_set_into_a_bucket(s3, small_data, monkeypatch):
    code = docs_snippet().replace("/data/receipts", str(small_data)).replace("s3://bucket/", s3.url("") )
    exec(compile(code, "docs/remote.md", "exec"), {})
    stored = {p.rsplit("/", 1)[-1] for p in s3.fs().find(s3.url("sets", "receipts"))}
    assert {"train.json", *(p.name for p in (small_data / "images").iterdir())} <= stored
    from east_cache.ingest.ufo import find_split
    from east_cache.ingest.objects import source_path
    find_split(source_path(s3.url("sets", "receipts")), "train")   # a build reads it as a data set
