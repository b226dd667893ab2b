"""The remote layer's pure parts, no storage: locations, sizes and the limit, sparse writes, retries, the node share."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from east_cache.config import BuildConfig
from east_cache.errors import RemoteError, UsageError
from east_cache.store.layout import Layout
from east_cache.reader.ahead import file_order
from east_cache.location import Location, flag_location, redact
from east_cache.retry import RetryPolicy, retrying, transient
from east_cache.reader.share import node_files, node_items
from east_cache.store.remote.space import check_limit, least_limit, parse_size, size_flag
from east_cache.store.remote.transfer import PIECE_BYTES, write_sparse


def test_a_location_is_a_path_or_a_url_and_joins_below_itself(tmp_path):
    s3 = Location.parse("s3://bucket/some/prefix/")
    assert (s3.protocol, s3.path, s3.remote, s3.url) == ("s3", "bucket/some/prefix", True, "s3://bucket/some/prefix")
    assert s3.join("data", "x.npy").url == "s3://bucket/some/prefix/data/x.npy"
    assert Location.parse("file:///tmp/c").url == "file:///tmp/c" and Location.parse("file:///tmp/c").remote
    local = Location.parse(tmp_path / "c")
    assert not local.remote and local.local_path() == tmp_path / "c"
    for bad in ("../up", "/abs", ""):
        with pytest.raises(ValueError):
            s3.join(bad)
    with pytest.raises(UsageError):
        Location.parse("s3://")


@pytest.mark.parametrize("text", ["s3:/bucket/c", "s3:bucket/c", "S3://bucket/c", "s3://", "s3:///c", "s3://B/c",
                                  "nosuchscheme://bucket/c", "gs:/bucket/c"])
def test_what_starts_like_a_url_but_is_not_one_is_refused_with_what_to_write(text, tmp_path, monkeypatch):
    import argparse
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"write|name a bucket") as e:
        Location.parse(text)
    assert "\n" not in str(e.value)
    with pytest.raises(argparse.ArgumentTypeError):
        flag_location(text)
    assert not any(tmp_path.iterdir()), "nothing made locally"
    assert isinstance(flag_location("./s3:bucket"), Path)   # a local folder of that name, said so
    assert isinstance(flag_location("run-2026-11-28T14:00"), Path)   # no storage's scheme, no slash: a name


def test_a_mistyped_bucket_url_never_builds_into_a_local_folder(tmp_path, monkeypatch, capsys):
    from east_cache.cli import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["build", "--out", "s3:/bucket/c", "--quiet"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "s3://bucket/c" in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "no folder named s3: made"


def test_credentials_never_in_a_url_nor_in_what_is_printed():
    with pytest.raises(UsageError) as e:
        Location.parse("s3://AKIAKEY:s3cr3t@bucket/c")
    assert "s3cr3t" not in str(e.value) and "AKIAKEY" not in str(e.value)
    assert redact("GET https://user:pw@host/b?X-Amz-Signature=abc failed") == "GET https://***@host/b?*** failed"
    loc = Location.parse("s3://bucket/c", options={"secret": "s3cr3t", "key": "AKIAKEY"})
    assert "s3cr3t" not in repr(loc) + str(loc) + loc.key()
    assert Location.parse("s3://bucket/c").key() == loc.key()   # the folder of a URL does not depend on secrets


def test_sizes_read_as_flags_write_them():
    assert parse_size("500M") == 500 << 20 and parse_size("1.5G") == 3 << 29 and parse_size("20GiB") == 20 << 30
    assert parse_size("0") == 0 and parse_size("1234") == 1234
    for n in (1, 1023, 1536, 10**9, 7 * 2**40 + 1):
        assert parse_size(size_flag(n)) >= n   # rounded up: passing it is enough
    with pytest.raises(UsageError):
        parse_size("lots")


def test_a_limit_below_the_largest_files_is_refused_with_the_number_to_pass():
    sizes = [10 << 20, 30 << 20, 20 << 20, 5 << 20]
    assert least_limit(sizes, 2) == 50 << 20
    with pytest.raises(UsageError) as e:
        check_limit(40 << 20, sizes, 2, "s3://b/c")
    flag = str(e.value).split("pass --local-cache-limit ")[1].split()[0]
    assert parse_size(flag) >= 50 << 20
    check_limit(parse_size(flag), sizes, 2, "s3://b/c")
    check_limit(0, sizes, 2, "s3://b/c")   # 0: no limit


def test_sparse_writes_keep_bytes_and_leave_zero_runs_as_holes(tmp_path):
    rng = np.random.default_rng(0)
    data = np.zeros(40 * PIECE_BYTES + 123, np.uint8)
    data[:PIECE_BYTES // 2] = rng.integers(1, 255, PIECE_BYTES // 2)
    data[-200:] = 7
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.truncate(len(data) + PIECE_BYTES)
        write_sparse(f, PIECE_BYTES, data.tobytes())
    assert path.read_bytes()[PIECE_BYTES:] == data.tobytes()
    assert os.stat(path).st_blocks * 512 < 8 * PIECE_BYTES   # the zeros took no blocks


def test_retries_are_bounded_and_end_in_one_error_naming_the_url():
    tries = []

    def flaky():
        tries.append(1)
        raise ConnectionResetError("connection reset by peer")
    with pytest.raises(RemoteError) as e:
        retrying(flaky, "s3://b/c/x.npy", RetryPolicy(attempts=3, first_wait_s=0.001), "Check the network")
    assert len(tries) == 3 and str(e.value).startswith("s3://b/c/x.npy: ConnectionResetError")
    assert "after 3 tries" in str(e.value) and "\n" not in str(e.value)
    tries.clear()
    with pytest.raises(RemoteError):
        retrying(lambda: tries.append(1) or (_ for _ in ()).throw(PermissionError("denied")), "u",
                 RetryPolicy(attempts=5, first_wait_s=0.001), "")
    assert len(tries) == 1   # access refused: not tried again
    assert transient(TimeoutError()) and not transient(OSError(28, "No space left on device"))
    assert not transient(TypeError("a bug"))


def test_file_order_is_first_use_order():
    assert file_order([3, 3, 1, 3, 0, 1, 2]) == [3, 1, 0, 2]


@pytest.mark.parametrize("strategy,n,k,chunk", [("chunked", 10, 3, 4), ("image", 7, 2, 1), ("batch", 9, 2, 1),
                                                ("chunked", 12, 1, 3)])
@pytest.mark.parametrize("nodes", [2, 3])
def test_node_share_is_disjoint_covering_and_reads_every_item_once_per_epoch(strategy, n, k, chunk, nodes):
    cfg = BuildConfig(strategy=strategy, variants=k, chunk_size=chunk, batch_size=4, geometry="build")
    layout = Layout.of(cfg, n)
    sizes = [len(m) * 1000 for m in layout.members()]
    shares = [node_files(sizes, r, nodes) for r in range(nodes)]
    assert sorted(f for s in shares for f in s) == list(range(layout.file_count))   # disjoint and covering
    loads = [sum(sizes[f] for f in s) for s in shares]
    assert max(loads) - min(loads) <= max(sizes)   # about 1/nodes each
    offsets = layout.variant_offsets([f"img{i}" for i in range(n)], seed=3)
    for epoch in range(3):
        items = [node_items(layout, offsets, epoch, s) for s in shares]
        assert sorted(np.concatenate(items).tolist()) == list(range(n))   # every item once per epoch
        for s, mine in zip(shares, items):   # and from the node's own files only
            assert {layout.locate(i, (epoch + int(offsets[i])) % k)[0] for i in mine} <= set(s)
    assert node_files(sizes, 1, nodes) == shares[1]   # the same on every rank, and on resume


def test_node_share_refuses_too_few_files_and_a_bad_rank():
    with pytest.raises(UsageError, match="too few to share among 2 nodes"):
        node_files([100], 0, 2)
    with pytest.raises(UsageError, match="--node-rank 2"):
        node_files([1, 2, 3], 2, 2)
