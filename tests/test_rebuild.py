"""The cache follows the data: fingerprints, incremental rebuild, crash safety, lock, verify, bad input."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import cache_bytes, edit_ufo, first_image, nudge_first_word, small_config

from east_cache.reader import CacheDataset, StaleCacheError
from east_cache.build.request import config_from_args
from east_cache.cli import get_parser
from east_cache.cli import main as cli_main
from east_cache.errors import BuildError, CacheError, DataError
from east_cache.build.run import build_cache, build_lock, rebuild
from east_cache.build.fingerprint import code_hash
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.sidecar import quads_path
from east_cache.build.stale import check_stale
from east_cache.tools.verify import verify

LOCK_WAIT_LIMIT_S = 300   # far beyond a refusal on any machine; a build that waits for the lock never ends here

REPO = Path(__file__).resolve().parents[1]


def build(data, out, **over):
    skip_bad = over.pop("skip_bad", False)
    return build_cache(small_config(**{"strategy": "chunked", "chunk_size": 3, **over}), [data], out, jobs=1,
                       quiet=True, skip_bad=skip_bad)


def test_noop_rebuild_does_nothing(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    before = cache_bytes(tmp_path / "c")
    r = build(data_copy, tmp_path / "c")
    assert r.up_to_date and r.computed == 0 and r.copied == 0
    assert cache_bytes(tmp_path / "c") == before


def test_noop_rebuild_reads_no_annotations(data_copy, tmp_path, monkeypatch):
    """The up-to-date answer comes from file fingerprints alone (the 10k-image figure in docs/performance.md)."""
    build(data_copy, tmp_path / "c")

    def no_parsing(*a, **k):
        raise AssertionError("the UFO files were parsed for a no-op rebuild")
    monkeypatch.setattr("east_cache.build.run.load_splits", no_parsing)
    monkeypatch.setattr("east_cache.build.stale.load_splits", no_parsing)
    assert build(data_copy, tmp_path / "c").up_to_date
    assert not check_stale(Manifest.load(tmp_path / "c")).stale


def test_a_ufo_file_saved_again_unchanged_is_up_to_date_and_recorded(data_copy, tmp_path, monkeypatch):
    build(data_copy, tmp_path / "c")
    before = cache_bytes(tmp_path / "c")
    edit_ufo(data_copy, lambda images: None)         # same entries, new mtime (and maybe new formatting)
    r = build(data_copy, tmp_path / "c")
    assert r.up_to_date and r.computed == 0 and cache_bytes(tmp_path / "c") == before
    monkeypatch.setattr("east_cache.build.run.load_splits", lambda *a, **k: pytest.fail("parsed again"))
    assert build(data_copy, tmp_path / "c").up_to_date, "the new UFO fingerprint was not recorded"


def test_a_skipped_image_that_comes_back_is_built(data_copy, tmp_path):
    victim = sorted((data_copy / "images").iterdir())[0]
    kept = victim.read_bytes()
    victim.unlink()
    assert build(data_copy, tmp_path / "c", skip_bad=True).images == 4
    victim.write_bytes(kept)
    r = build(data_copy, tmp_path / "c", skip_bad=True)
    assert not r.up_to_date and r.images == 5 and r.changes.added == [victim.name]


def test_exif_rotated_images_are_counted_and_the_count_survives_an_incremental_build(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    m = Manifest.load(tmp_path / "c")
    rotated = m.exif_applied
    assert len(rotated) == 1 and m.ingest["exif_applied"] == 1   # the sample set has one EXIF-rotated page
    edit_ufo(data_copy, lambda images: images.pop(sorted(n for n in images if n not in rotated)[0]))
    r = build(data_copy, tmp_path / "c")
    m = Manifest.load(tmp_path / "c")
    assert r.computed == 0 and m.exif_applied == rotated and m.ingest["exif_applied"] == 1


@pytest.mark.parametrize("geometry", ["build", "read"])
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
@pytest.mark.parametrize("edit", ["change", "add", "remove"])
def test_incremental_rebuild_equals_a_full_build(data_copy, tmp_path, edit, codec, geometry):
    """Pages stored warped (two variants each) and stored resized only (one page each)."""
    flags = dict(image_codec=codec, geometry=geometry, variants=2 if geometry == "build" else 1)
    per_image = flags["variants"]
    build(data_copy, tmp_path / "inc", **flags)
    if edit == "change":
        edit_ufo(data_copy, nudge_first_word)
    elif edit == "add":
        def add(images):
            name = first_image(images)
            shutil.copy(data_copy / "images" / name, data_copy / "images" / ("zz-" + name))
            images["zz-" + name] = images[name]
        edit_ufo(data_copy, add)
    else:
        edit_ufo(data_copy, lambda images: images.pop(first_image(images)))
    r = build(data_copy, tmp_path / "inc", **flags)
    assert not r.up_to_date and not r.full_rebuild_reason
    if edit == "change":
        assert r.changes.changed and r.computed == per_image  # the one edited image, each of its variants
    if edit == "add":
        assert r.changes.added and r.computed == per_image
    if edit == "remove":
        assert r.changes.removed and r.computed == 0  # everything else is copied
    build(data_copy, tmp_path / "full", **flags)
    assert cache_bytes(tmp_path / "inc") == cache_bytes(tmp_path / "full")


def test_config_change_rebuilds_everything_and_says_why(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    r = build(data_copy, tmp_path / "c", seed=7)
    assert r.computed == 10 and "seed: 0 -> 7" in r.full_rebuild_reason


def test_stale_cache_is_refused_with_the_command_to_run(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    edit_ufo(data_copy, nudge_first_word)
    with pytest.raises(StaleCacheError, match=r"1 changed image.*python -m preprocess build --data .* --out"):
        CacheDataset(tmp_path / "c")
    CacheDataset(tmp_path / "c", check_stale=False)  # an explicit opt-out still reads
    report = rebuild(tmp_path / "c", jobs=1, quiet=True)
    assert report.computed == 2
    CacheDataset(tmp_path / "c")


def test_image_file_change_is_detected_by_mtime(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    image = sorted((data_copy / "images").iterdir())[0]
    st = image.stat()
    os.utime(image, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert build(data_copy, tmp_path / "c").computed == 2


def _start_build(data, out, *extra):
    args = [sys.executable, "-m", "preprocess", "build", "--data", str(data), "--out", str(out), "--quiet",
            "--strategy", "chunked", "--chunk-size", "1", "--variants", "12", "--geometry", "build",
            "--input-size", "96",
            "--image-size", "192", "--jobs", "1", *extra]
    return subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE)


def _kill_after_files(proc, out: Path, n: int) -> None:
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if len(list((out / "data").glob("*.npy"))) >= n:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the build finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_sigkill_first_build_leaves_no_cache_then_resumes(data_copy, tmp_path, codec):
    out = tmp_path / "c"
    _kill_after_files(_start_build(data_copy, out, "--image-codec", codec), out, 3)
    with pytest.raises(CacheError, match="no finished cache"):
        CacheDataset(out)
    finished = {p.name for p in (out / "data").glob("*.npy")}
    proc = _start_build(data_copy, out, "--image-codec", codec)
    assert proc.wait() == 0, proc.stderr.read().decode()
    names = {f.name for f in Manifest.load(out).files}
    assert finished <= names, "files finished before the kill are reused"
    assert Manifest.load(out).build.files_reused >= len(finished)
    assert not verify(out)
    assert not list((out / "data").glob("*.tmp*")), "leftovers of the killed build are removed"


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_sigkill_rebuild_keeps_the_previous_cache_readable(data_copy, tmp_path, codec):
    out = tmp_path / "c"
    assert _start_build(data_copy, out, "--image-codec", codec).wait() == 0
    before = cache_bytes(out)
    _kill_after_files(_start_build(data_copy, out, "--seed", "3", "--image-codec", codec), out, 12 * 5 + 3)
    assert cache_bytes(out) == before and not verify(out)
    CacheDataset(out)[0]


def test_concurrent_build_fails_at_once(data_copy, tmp_path):
    """A second build refuses the cache instead of waiting for the lock: one that waited would still be waiting
    here, while this test holds the lock (the join's limit is only there so that such a build fails the test)."""
    out = tmp_path / "c"
    out.mkdir()
    raised = []

    def second_build():
        try:
            build(data_copy, out)
        except BuildError as e:
            raised.append(e)
    with build_lock(out):
        t = threading.Thread(target=second_build, daemon=True)
        t.start()
        t.join(timeout=LOCK_WAIT_LIMIT_S)
        assert not t.is_alive(), "the second build waited for the lock"
    assert len(raised) == 1 and "another build" in str(raised[0]) and "is writing" in str(raised[0])


@pytest.mark.slow
def test_verify_finds_corruption_and_build_repairs_exactly_that(data_copy, tmp_path):
    out = tmp_path / "c"
    build(data_copy, out)
    good = cache_bytes(out)
    victim = data_path(out, Manifest.load(out).files[1].name)
    with open(victim, "r+b") as f:
        f.seek(-100, os.SEEK_END)
        f.write(b"\xff" * 10)
    missing = data_path(out, Manifest.load(out).files[2].name)
    missing.unlink()
    bad = dict(verify(out))
    assert bad == {victim.name: "checksum mismatch (corrupt data)", missing.name: "missing"}
    cli = subprocess.run([sys.executable, "-m", "preprocess", "verify", str(out)], cwd=REPO, capture_output=True)
    assert cli.returncode == 1
    r = build(data_copy, out)
    assert r.files_written == 2 and r.files_reused == len(good) // 2 - 2
    assert cache_bytes(out) == good and not verify(out)


def test_malformed_json_names_file_and_position(data_copy, tmp_path):
    (data_copy / "ufo" / "train.json").write_text('{"images": {"a.jpg": {"img_w": 10,,}}}')
    with pytest.raises(DataError, match=r"train\.json.*line 1"):
        build(data_copy, tmp_path / "c")


def test_missing_image_is_named_and_skip_bad_records_it(data_copy, tmp_path):
    build(data_copy, tmp_path / "c")
    victim = sorted((data_copy / "images").iterdir())[0]
    victim.unlink()
    with pytest.raises(DataError, match=victim.name):
        build(data_copy, tmp_path / "c")
    assert not verify(tmp_path / "c"), "a failed build leaves the cache intact"
    r = build(data_copy, tmp_path / "c", skip_bad=True)
    assert r.images == 4
    assert [b[0] for b in Manifest.load(tmp_path / "c").bad] == [victim.name]


def test_corrupt_image_with_skip_bad_becomes_an_ignored_sample(data_copy, tmp_path):
    victim = sorted((data_copy / "images").iterdir())[0]
    victim.write_bytes(b"not an image")
    with pytest.raises(DataError, match="skip-bad"):
        build(data_copy, tmp_path / "c")
    build(data_copy, tmp_path / "c", skip_bad=True)
    ds = CacheDataset(tmp_path / "c")
    i = ds.names.index(victim.name)
    assert not ds[i]["roi"].any() and victim.name in Manifest.load(tmp_path / "c").notes


def test_duplicate_image_names_across_json_files(data_copy, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(data_copy, other)
    with pytest.raises(DataError, match="train.json"):
        build_cache(small_config(), [data_copy, other], tmp_path / "c", jobs=1, quiet=True)


def test_page_without_words_is_valid(data_copy, tmp_path):
    def empty(images):
        images[first_image(images)]["words"] = {}
    edit_ufo(data_copy, empty)
    build(data_copy, tmp_path / "c")
    ds = CacheDataset(tmp_path / "c")
    item = ds[0]
    assert not item["score"].any() and item["roi"].all()
    assert len(ds.quads(0)[2]) == 0


def test_full_disk_fails_cleanly_and_keeps_the_cache(data_copy, tmp_path, monkeypatch):
    out = tmp_path / "c"
    build(data_copy, out)
    before = cache_bytes(out)
    monkeypatch.setattr("east_cache.build.run.shutil.disk_usage", lambda p: shutil._ntuple_diskusage(1 << 30, 1 << 30, 1000))
    with pytest.raises(BuildError, match="not enough disk space"):
        build(data_copy, out, seed=5)
    assert cache_bytes(out) == before
    assert np.asarray(CacheDataset(out)[0]["image"]).any()


def test_the_printed_update_command_rebuilds_the_same_cache(data_copy, tmp_path):
    """The command that stale, verify and format errors print carries the cache's own data and options: running
    it updates the cache in place instead of replacing it with a default build of the sample set."""
    out = tmp_path / "c"
    build_cache(small_config(strategy="batch", batch_size=2, variants=3, seed=5, min_area=4.0, fit_polygons=True,
                             ignore_tags=("stamp",)), [data_copy], out, split="train", jobs=1, quiet=True)
    words = Manifest.load(out).build_command(out).split()
    assert words[:3] == ["python", "-m", "preprocess"]
    args = get_parser().parse_args(words[3:])
    assert args.data == [data_copy.resolve()] and args.out == out and args.strategy == "batch"
    assert config_from_args(args) == Manifest.load(out).config
    edit_ufo(data_copy, nudge_first_word)
    assert cli_main([*words[3:], "--jobs", "1", "--quiet"]) == 0
    report = Manifest.load(out).build
    # the edited image's 3 variants are redone; its batch partner's 3 rows are copied; every other file is kept
    assert (report.computed, report.copied, report.files_reused) == (3, 3, 6)


def test_garbage_collection_deletes_only_what_a_build_wrote(data_copy, tmp_path):
    """A --out that already holds a data/ folder of the user's keeps every file the build did not write."""
    out = tmp_path / "c"
    theirs = [out / "data" / "images" / "page.jpg", out / "data" / "notes.txt", out / "data" / "x.npy"]
    for f in theirs:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("not the cache's")
    build(data_copy, out)
    leftovers = [out / "data" / f"chunked-00000-0123456789abcdef{end}"   # of a killed build
                 for end in (".quads.npz.tmp.npz", ".npy.tmp", ".zarr.tmp")]
    for p in leftovers:
        p.write_bytes(b"")
    build(data_copy, out, seed=3)   # a full rebuild: every old data file and sidecar is garbage now
    assert all(f.read_text() == "not the cache's" for f in theirs)
    assert not any(p.exists() for p in leftovers)
    named = {f.name for f in Manifest.load(out).files}
    ours = {p.name for p in (out / "data").glob("chunked-*")}
    assert ours == named | {quads_path(data_path(out, n)).name for n in named}, "the old build's files are gone"


def test_code_version_sees_code_not_comments_or_docstrings():
    base = 'def f(x):\n    """Doc."""\n    return x * 0.3  # shrink\n'
    assert code_hash([base]) == code_hash(['def f(x):\n    """Other doc."""\n\n    return x*0.3\n'])
    assert code_hash([base]) != code_hash([base.replace("0.3", "0.4")])


@pytest.mark.parametrize("flags, expect", [
    (["--input-size", "100"], "--input-size 100 must be a positive multiple of 32"),
])
def test_bad_flag_values_are_errors_not_tracebacks(data_copy, tmp_path, capsys, flags, expect):
    assert cli_main(["build", "--data", str(data_copy), "--out", str(tmp_path / "c"), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expect in err and "Traceback" not in err


def test_an_out_that_cannot_be_a_directory_is_named(data_copy, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert cli_main(["build", "--data", str(data_copy), "--out", str(tmp_path / "file" / "c"), "--quiet"]) == 2
    assert str(tmp_path / "file") in capsys.readouterr().err
