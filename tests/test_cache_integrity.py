"""What the reader trusts: a cache is checked when it is opened, verify reports whatever it finds without
crashing (also on a read-only cache), and a cache rebuilt under a running reader is read as it was or
stopped with a message, never mixed."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import small_config

from east_cache.reader import CacheDataset
from east_cache.cli import main as cli_main
from east_cache.errors import CacheError
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.sidecar import quads_path
from east_cache.tools import verify as verify_module
from east_cache.tools.verify import verify


def make(data, out, file_format="npy", **over):
    return build_cache(small_config(**{"strategy": "chunked", "chunk_size": 3, **over}), [data], out, jobs=1,
                       quiet=True, file_format=file_format)


def test_verify_reports_a_garbage_header_by_name_and_the_next_build_redoes_it(data_copy, tmp_path, capsys):
    out = tmp_path / "c"
    make(data_copy, out)
    victim = data_path(out, Manifest.load(out).files[0].name)
    good = victim.read_bytes()
    at = good.index(b"{")
    victim.write_bytes(good[:at] + b"garbage!!!" + good[at + 10:])   # numpy's parser: SyntaxError or ValueError
    assert cli_main(["verify", str(out)]) == 1
    captured = capsys.readouterr()
    assert f"{victim.name}: its npy header is damaged" in captured.out and "Traceback" not in captured.err
    assert json.loads((out / ".corrupt.json").read_text()) == [victim.name]
    make(data_copy, out)
    assert victim.read_bytes() == good and not verify(out)


def test_verify_on_a_read_only_cache_prints_what_it_found_first(data_copy, tmp_path, capsys, monkeypatch):
    out = tmp_path / "c"
    make(data_copy, out)
    victim = data_path(out, Manifest.load(out).files[1].name)
    victim.unlink()

    def read_only(cache_dir, bad):
        raise PermissionError(30, "Read-only file system", str(cache_dir / ".corrupt.json"))
    monkeypatch.setattr(verify_module, "mark_corrupt", read_only)   # root ignores chmod: the file system refuses
    assert cli_main(["verify", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"{victim.name}: missing"]
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cannot be marked" in lines[0]
    assert "Read-only file system" in lines[0]


def test_a_reader_keeps_the_files_it_opened_and_stops_at_those_a_rebuild_replaced(data_copy, tmp_path):
    out = tmp_path / "c"
    make(data_copy, out)
    ds = CacheDataset(out)
    first = ds[0]["image"].copy()            # maps item 0's file, and only that one
    opened = ds.locate(0, ds.variant(0))[0]
    other = next(i for i in range(len(ds)) if ds.locate(i, ds.variant(i))[0] != opened)
    make(data_copy, out, seed=9)             # every file replaced, the old ones deleted after the commit
    assert np.array_equal(ds[0]["image"], first), "an open memory map keeps the old inode"
    with pytest.raises(CacheError, match="the cache was rebuilt while this run read it.*start the run again"):
        ds[other]
    CacheDataset(out)[other]   # a new reader reads the new cache


def test_a_sidecar_whose_offsets_do_not_add_up_is_refused_when_loaded(data_copy, tmp_path):
    out = tmp_path / "c"
    make(data_copy, out)
    side = quads_path(data_path(out, Manifest.load(out).files[0].name))
    arrays = dict(np.load(side))
    arrays["offsets"] = arrays["offsets"][::-1].copy()
    np.savez(side, **arrays)
    ds = CacheDataset(out)   # the quick look at opening sees names and counts, which are right
    with pytest.raises(CacheError, match=rf"{side.name}: word quads sidecar: offsets do not split"):
        for i in range(len(ds)):
            for v in range(ds.config.variants):
                ds.quads(i, v)


@pytest.mark.slow
@pytest.mark.parametrize("damage, expect", [
    ("shard gone", "field geo's shard is missing"),
    ("metadata garbage", "its zarr metadata is damaged"),
    ("field shape edited", "field score is"),
])
def test_a_damaged_zarr_file_is_refused_when_opened_and_repaired(data_copy, tmp_path, damage, expect):
    out = tmp_path / "c"
    make(data_copy, out, file_format="zarr", crop="build")   # zarr holds crop records only
    group = data_path(out, Manifest.load(out).files[0].name)
    if damage == "shard gone":
        for p in (group / "geo").rglob("*"):
            if p.is_file() and p.name != "zarr.json":
                p.unlink()
    elif damage == "metadata garbage":
        (group / "image" / "zarr.json").write_text("{ not json")
    else:
        meta = json.loads((group / "score" / "zarr.json").read_text())
        meta["shape"][-1] += 1
        (group / "score" / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(CacheError, match=rf"{group.name} is damaged or missing: {expect}"):
        CacheDataset(out)
    assert [name for name, _ in verify(out)] == [group.name]
    make(data_copy, out, file_format="zarr", crop="build")
    CacheDataset(out)[0]


def test_an_error_raised_in_a_dataloader_worker_prints_as_its_own_one_line():
    import sys

    from torch._utils import ExceptionWrapper

    from east_cache.errors import one_line
    try:
        raise CacheError("/c: the cache was rebuilt while this run read it (x.npy: gone); start the run again")
    except CacheError:
        wrapped = ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 0")
    with pytest.raises(CacheError) as e:
        wrapped.reraise()
    assert "Traceback" in str(e.value)
    assert one_line(e.value) == "/c: the cache was rebuilt while this run read it (x.npy: gone); start the run again"


def swapped_sidecar(cache) -> str:
    """Data file 0's sidecar replaced by file 1's (a valid npz, other words) and the manifest's quads checksum of
    file 0 edited to match it, as a mix-up of objects could leave them; the name of file 0."""
    m = Manifest.load(cache)
    a, b = m.files[0], m.files[1]
    quads_path(data_path(cache, a.name)).write_bytes(quads_path(data_path(cache, b.name)).read_bytes())
    doc = json.loads((cache / "manifest.json").read_text())
    doc["files"][0]["quads_checksum"] = b.quads_checksum
    (cache / "manifest.json").write_text(json.dumps(doc))
    return a.name


def test_a_sidecar_of_another_data_file_is_refused_by_verify_and_the_reader(tiny_data, tmp_path, capsys):
    out = tmp_path / "c"
    build_cache(small_config(**{"strategy": "image", "input_size": 64, "image_size": 96}), [tiny_data], out, jobs=1,
                quiet=True)
    name = swapped_sidecar(out)
    assert cli_main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"{name}: its word quads sidecar" in printed and "words of another data file" in printed, printed
    with pytest.raises(CacheError, match=f"{name}.*words of another data file"):
        CacheDataset(out)


def test_a_manifest_edited_to_another_image_codec_fails_verify_and_the_reader(tiny_data, tmp_path, capsys):
    """A jpeg page cache whose manifest says raw: the data files' own heads name their record kind."""
    out = tmp_path / "c"
    build_cache(small_config(**{"strategy": "image", "input_size": 64, "image_size": 96, "crop": "read",
                                "geometry": "read", "variants": 1, "image_codec": "jpeg"}), [tiny_data], out, jobs=1, quiet=True)
    assert cli_main(["verify", str(out)]) == 0
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["config"]["image_codec"] == "jpeg"
    doc["config"]["image_codec"] = "raw"
    (out / "manifest.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert cli_main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "holds jpeg-page records (image codec jpeg), where the manifest says raw-page" in printed, printed
    with pytest.raises(CacheError, match="holds jpeg-page records"):
        CacheDataset(out)
