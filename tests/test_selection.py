"""A run chooses its images from one cache (store/selection.py, CacheDataset.select, east-train --split/--repeat): a
split holds exactly its images, read as the whole cache reads them; repeats per source by count and draw; orders
over epochs, processes and ranks; the build's memberships (a rebuild after `split` computes nothing and touches no
data file); the leak check before the first step; info's table; --resume with a selection."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, TINY, cli_run, read_log, run_args, train_run
from PIL import Image, ImageOps

from east_cache import CacheDataset, Loader
from east_cache.build.run import build_cache
from east_cache.config import BuildConfig
from east_cache.errors import BuildError, CacheError, UsageError
from east_cache.reader.loader import EpochSampler, order
from east_cache.reader.share import NodeShare
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.selection import Selection, parse_repeat
from east_cache.tools.phash import CACHE_FILE
from east_cache.tools.run_recipe import recipe_of
from east_cache.tools.sampledata import write_sample_dataset
from east_cache.train import train
from east_cache.train.config import TrainConfig
from east_cache.train.selection import warn_leaks

FOLDS = 3


def prefixed_root(root, prefix: str, n: int, seed: int):
    """A sample root whose image names start with prefix (names are unique across a cache's roots)."""
    write_sample_dataset(root, n_images=n, words_per_page=6, page_size=(160, 120), seed=seed)
    ufo = json.loads((root / "ufo" / "train.json").read_text())
    images = {}
    for name, entry in ufo["images"].items():
        (root / "images" / name).rename(root / "images" / f"{prefix}{name}")
        images[f"{prefix}{name}"] = entry
    (root / "ufo" / "train.json").write_text(json.dumps({**ufo, "images": images}))
    return root


def write_folds(root, k: int = FOLDS) -> dict[str, list[str]]:
    """ufo/train{i}.json and val{i}.json of root: image j in val{j % k}; returns {split: names}."""
    images = json.loads((root / "ufo" / "train.json").read_text())["images"]
    names, written = sorted(images), {}
    for i in range(k):
        for split, keep in ((f"train{i}", lambda j: j % k != i), (f"val{i}", lambda j: j % k == i)):
            chosen = [n for j, n in enumerate(names) if keep(j)]
            (root / "ufo" / f"{split}.json").write_text(json.dumps({"images": {n: images[n] for n in chosen}}))
            written[split] = chosen
    return written


@pytest.fixture(scope="module")
def two_roots(tmp_path_factory):
    """receipts (7 images, 3 folds) and cord (4 images, train.json only), built into one cache."""
    base = tmp_path_factory.mktemp("two_roots")
    receipts = prefixed_root(base / "receipts", "r_", 7, seed=3)
    folds = write_folds(receipts)
    cord = prefixed_root(base / "cord", "c_", 4, seed=4)
    cache = base / "cache"
    build_cache(BuildConfig(**TINY, map_scale=0.5), [receipts, cord], cache, jobs=1, quiet=True)
    return receipts, cord, cache, folds


def names_of(ds) -> list[str]:
    return [ds.image_name(i) for i in range(len(ds))]


def test_a_split_holds_exactly_its_images_and_reads_them_as_the_whole_cache(two_roots):
    receipts, cord, cache, folds = two_roots
    whole = CacheDataset(cache)
    ds = CacheDataset(cache, split="train0")
    cords = sorted(n for n in whole.names if n.startswith("c_"))
    assert names_of(ds) == sorted(folds["train0"] + cords), "train0's receipts and every cord image (no train0.json)"
    for epoch in (0, 3):
        whole.set_epoch(epoch)
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            a, b = ds[i], whole[whole.names.index(ds.image_name(i))]
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), (epoch, ds.image_name(i))
    assert [s.line() for s in ds.chosen.shares] == [
        f"receipts: {len(folds['train0'])} of 7 images (split train0) x 1 -> {len(folds['train0'])} items an epoch",
        "cord: 4 of 4 images (no ufo/train0.json: all) x 1 -> 4 items an epoch"]
    assert CacheDataset(cache, split="train").selection is None, "a split of every image is the whole cache"


def test_a_ufo_file_selects_by_name_across_sources(two_roots, tmp_path):
    receipts, cord, cache, folds = two_roots
    names = sorted(Manifest.load(cache).images)
    chosen = {names[1]: {}, names[-1]: {}, "not_in_the_cache.jpg": {}}   # one receipt, one cord image
    (tmp_path / "mine.json").write_text(json.dumps({"images": chosen}))
    sel = Selection(Manifest.load(cache), str(tmp_path / "mine.json"))
    assert [names[i] for i in sel.images] == [names[1], names[-1]] and names[1].startswith("c_")
    assert len(sel) == 2 and sel.notes and "1 of its 3 image(s) are not in" in sel.notes[0]
    (tmp_path / "none.json").write_text(json.dumps({"images": {"x.jpg": {}}}))
    with pytest.raises(UsageError, match="none of its 1 image"):
        Selection(Manifest.load(cache), str(tmp_path / "none.json"))


def test_unknown_sources_splits_and_empty_selections_are_refused(two_roots):
    receipts, cord, cache, folds = two_roots
    with pytest.raises(UsageError, match="--repeat nope: .* its sources are receipts, cord"):
        CacheDataset(cache, repeat={"nope": 1})
    with pytest.raises(UsageError, match="no source of .* has ufo/train9.json; the splits its sources have: train, "
                                         "train0"):
        CacheDataset(cache, split="train9")
    with pytest.raises(UsageError, match="--split val0 selects no image of .*receipts: 3 of 7 .* x 0 -> 0 .*cord: "
                                         "4 of 4"):
        CacheDataset(cache, split="val0", repeat={"receipts": 0, "cord": 0})
    with pytest.raises(UsageError, match="R must be a finite number in"):
        CacheDataset(cache, repeat={"cord": -1})
    assert parse_repeat("cord=0.5, receipts=3") == {"cord": 0.5, "receipts": 3.0}
    for bad in ("cord", "cord=x", "=1", "cord=1,cord=2", "cord=1e9"):
        with pytest.raises(Exception, match="SOURCE=R|given twice"):
            parse_repeat(bad)


def test_repeats_count_per_source_and_draw_a_new_fraction_every_epoch(two_roots):
    receipts, cord, cache, folds = two_roots
    ds = CacheDataset(cache, repeat={"receipts": 0.5, "cord": 3}, seed=7)
    r_idx = [i for i, n in enumerate(ds.names) if n.startswith("r_")]
    c_idx = [i for i, n in enumerate(ds.names) if n.startswith("c_")]
    assert len(ds) == round(0.5 * 7) + 3 * 4 == 16
    halves = set()
    for epoch in range(6):
        images, copies = ds.epoch_items(epoch)
        assert len(images) == len(ds), "the same count every epoch"
        drawn = [i for i in images if i in r_idx]
        assert len(drawn) == 4 == len(set(drawn)), "half of receipts, each once (round(3.5) = 4)"
        halves.add(tuple(sorted(drawn)))
        for i in c_idx:
            assert sorted(copies[images == i]) == [0, 1, 2], "three copies of every cord image"
    assert len(halves) > 2, "another half each epoch"
    again = CacheDataset(cache, repeat={"receipts": 0.5, "cord": 3}, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(ds.epoch_items(4), again.epoch_items(4))), "from (seed, epoch)"


def test_a_further_copy_draws_another_crop_the_first_the_whole_caches(two_roots):
    receipts, cord, cache, folds = two_roots
    whole, ds = CacheDataset(cache), CacheDataset(cache, repeat={"cord": 2})
    whole.set_epoch(2)
    ds.set_epoch(2)
    images, copies = ds.epoch_items()
    first = [k for k in range(len(ds)) if copies[k] == 0 and ds.names[images[k]].startswith("c_")]
    second = [k for k in range(len(ds)) if copies[k] == 1]
    assert len(first) == len(second) == 4
    for k in first:
        assert np.array_equal(ds[k]["image"], whole[int(images[k])]["image"])
    assert any(not np.array_equal(ds[k]["image"], whole[int(images[k])]["image"]) for k in second)


def test_orders_differ_by_epoch_and_two_ranks_split_each_epoch(two_roots):
    receipts, cord, cache, folds = two_roots
    ds = CacheDataset(cache, split="train1", repeat={"cord": 1.25}, seed=1)
    assert len(ds) % 2 == 0, len(ds)
    orders = []
    for epoch in range(3):
        shares = []
        for rank in range(2):
            sampler = EpochSampler(order(ds, 1, True, 1, rank, 2, None))
            sampler.set_epoch(epoch)
            shares.append([i for _, i in sampler])
        assert not set(shares[0]) & set(shares[1]) and sorted(shares[0] + shares[1]) == list(range(len(ds)))
        orders.append(shares[0] + shares[1])
    assert orders[0] != orders[1] != orders[2]
    with pytest.raises(UsageError, match="--node-share gives each machine whole files"):
        order(ds, 1, True, 1, 0, 2, NodeShare(2, 0, 0, 1))


def test_a_batch_strategy_cache_reads_a_selection_item_by_item(two_roots, tmp_path):
    receipts, cord, cache, folds = two_roots
    batch = build_cache(BuildConfig(**TINY, map_scale=0.5, strategy="batch", batch_size=2), [receipts, cord],
                        tmp_path / "batch", jobs=1, quiet=True).out
    loader = Loader(batch, 2, split="train2", workers=0)
    sampler = loader.source.sampler.base
    assert type(sampler).__name__ == "DistributedSampler" and len(loader.dataset) == len(folds["train2"]) + 4
    assert sum(len(b.image) for b in loader) == len(loader.dataset) // 2 * 2


@pytest.mark.slow
def test_an_epochs_order_is_the_same_in_a_fresh_process(two_roots):
    receipts, cord, cache, folds = two_roots
    code = ("import sys; from east_cache import Loader\n"
            "l = Loader(sys.argv[1], 1, split='train0', repeat={'cord': 2.5}, seed=3, workers=0)\n"
            "l.source.sampler.set_epoch(5); ds = l.dataset; ds.set_epoch(5)\n"
            "print([ds.names[ds.epoch_items(5)[0][i]] for _, i in l.source.sampler])")
    runs = [subprocess.run([sys.executable, "-c", code, str(cache)], capture_output=True, text=True, check=True,
                           cwd=REPO).stdout for _ in range(2)]
    assert runs[0] == runs[1] and runs[0].count("c_") == 10


def test_a_rebuild_after_split_computes_nothing_and_touches_no_data_file(tmp_path, capsys):
    root = prefixed_root(tmp_path / "set", "s_", 4, seed=5)
    cache = tmp_path / "cache"
    status, _, err = cli_run(capsys, "build", "--data", root, "--out", cache, "--image-size", "96", "--input-size",
                             "64", "--jobs", "1")
    assert status == 0 and Manifest.load(cache).sources[0].splits == ["train"]
    assert not (cache / CACHE_FILE).exists()   # train.json alone: nothing a run could leak, no image decoded twice
    files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (cache / "data").iterdir()}
    assert cli_run(capsys, "split", "--data", root, "--split", "train", "--folds", "2")[0] == 0
    status, _, err = cli_run(capsys, "build", "--out", cache)
    assert status == 0 and "up to date" in err and "computed 0, splits recorded: set: + train0, train1, val0, val1" \
        in err, err
    hashed = json.loads((cache / CACHE_FILE).read_text())["files"]   # folds: a run's leak check reads these
    assert sorted(Path(k).name for k in hashed) == sorted(Manifest.load(cache).images)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (cache / "data").iterdir()} == files
    m = Manifest.load(cache)
    val0 = json.loads((root / "ufo" / "val0.json").read_text())["images"]
    assert {n for n, x in m.members.items() if "val0" in x.splits} == set(val0)
    assert "nothing to do" in cli_run(capsys, "build", "--out", cache)[2]
    (root / "ufo" / "val0.json").write_text(json.dumps({"images": {}}))   # written again since the build
    with pytest.raises(CacheError, match="val0.json changed since .* record them again with .*build --out"):
        CacheDataset(cache, split="val0")


def test_roots_of_one_folder_name_need_names_and_an_unreadable_split_is_a_warning(tmp_path, capsys):
    a = prefixed_root(tmp_path / "a" / "data", "a_", 2, seed=1)
    b = prefixed_root(tmp_path / "b" / "data", "b_", 2, seed=2)
    cfg = BuildConfig(**TINY, map_scale=0.5)
    with pytest.raises(BuildError, match="two --data roots go by the name 'data'.*--name"):
        build_cache(cfg, [a, b], tmp_path / "c", jobs=1, quiet=True)
    (b / "ufo" / "val.json").write_text("{not json")
    messages = []
    build_cache(cfg, [a, b], tmp_path / "c", jobs=1, names=["first", "second"], log=messages.append)
    assert any(m.startswith("warning: ") and "val.json could not be read" in m for m in messages), messages
    assert [s.name for s in Manifest.load(tmp_path / "c").sources] == ["first", "second"]
    with pytest.raises(UsageError, match="ufo/val.json of source second could not be read at the build"):
        CacheDataset(tmp_path / "c", split="val")
    status, _, err = cli_run(capsys, "build", "--out", tmp_path / "c")
    assert status == 0 and "nothing to do" in err, "the names recorded are kept"


def test_a_cache_that_records_no_sources_says_how_to_record_them(two_roots, tmp_path):
    receipts, cord, cache, folds = two_roots
    old = tmp_path / "old"
    shutil.copytree(cache, old)
    d = json.loads((old / "manifest.json").read_text())
    del d["sources"], d["members"]
    (old / "manifest.json").write_text(json.dumps(d))
    assert len(CacheDataset(old)) == 11
    with pytest.raises(CacheError, match="records no image sources.*build --out"):
        CacheDataset(old, split="train0")


@pytest.mark.slow
def test_info_prints_each_sources_share_of_a_run(two_roots, capsys):
    receipts, cord, cache, folds = two_roots
    status, out, _ = cli_run(capsys, "info", cache)
    assert status == 0 and "sources    receipts: 7 images" in out and "           cord: 4 images" in out
    status, out, _ = cli_run(capsys, "info", cache, "--split", "train0", "--repeat", "cord=0.5")
    assert f"run        receipts: {len(folds['train0'])} of 7 images (split train0) x 1" in out
    assert "run        cord: 4 of 4 images (no ufo/train0.json: all) x 0.5 -> 2 items an epoch" in out
    status, _, err = cli_run(capsys, "info", cache, "--repeat", "nope=1")
    assert status == 2 and "its sources are receipts, cord" in err


def plant_copy(receipts, photo: str, pseudo):
    """A pseudo-label root (no fold files) holding photo resized to 3/4 and re-encoded, as p_copy.jpg."""
    (pseudo / "images").mkdir(parents=True)
    (pseudo / "ufo").mkdir()
    im = ImageOps.exif_transpose(Image.open(receipts / "images" / photo)).convert("RGB")   # upright, as hashed
    im.resize((im.width * 3 // 4, im.height * 3 // 4)).save(pseudo / "images" / "p_copy.jpg", quality=75)
    entry = json.loads((receipts / "ufo" / "train.json").read_text())["images"][photo]
    entry = {**entry, "img_w": im.width * 3 // 4, "img_h": im.height * 3 // 4, "words": {}}
    (pseudo / "ufo" / "train.json").write_text(json.dumps({"images": {"p_copy.jpg": entry}}))
    return pseudo


def test_the_leak_of_a_resized_copy_under_another_name_is_named(two_roots, tmp_path):
    """A pseudo-label root holding a validation photo resized and re-encoded under another name: its images join
    every fold (it has no train0.json), and the check names the pair by look, from the hashes the build kept."""
    receipts, cord, cache, folds = two_roots
    photo = folds["val0"][0]
    pseudo = plant_copy(receipts, photo, tmp_path / "pseudo")
    mixed = tmp_path / "mixed"
    shutil.copytree(cache, mixed)
    build_cache(BuildConfig(**TINY, map_scale=0.5), [receipts, cord, pseudo], mixed, jobs=1, quiet=True)
    from east_cache.tools.leak import warn_build
    warn_build([receipts, cord, pseudo], "train", mixed, print, quiet=True)   # what `build` does: hashes kept
    ds = CacheDataset(mixed)
    ds.select("train0", None)
    said = []
    warn_leaks(TrainConfig(cache=mixed, val_data=receipts, val_split="val0"), ds, said.append)
    assert len(said) == 1 and said[0].startswith("warning: validation split val0 shares 1 image(s) with training "
                                                 f"split train0") and f"{photo} = p_copy.jpg (looks alike" in said[0]
    ds.select("train1", None)   # photo is in train1 itself: a copy of a training image is no leak
    said.clear()
    warn_leaks(TrainConfig(cache=mixed, val_data=receipts, val_split="val1"), ds, said.append)
    assert all(photo not in s for s in said), said


@pytest.mark.slow
def test_east_train_names_a_leak_before_its_first_step(two_roots, tmp_path, capsys):
    receipts, cord, cache, folds = two_roots
    photo = folds["val0"][0]
    pseudo = plant_copy(receipts, photo, tmp_path / "pseudo")
    mixed = tmp_path / "mixed"
    assert cli_run(capsys, "build", "--data", receipts, "--data", cord, "--data", pseudo, "--out", mixed,
                   "--image-size", "96", "--input-size", "64", "--jobs", "1")[0] == 0
    train_run(mixed, tmp_path / "run", "--split", "train0", "--val-data", str(receipts), "--val-split", "val0",
              "--max-steps", "1")
    lines = capsys.readouterr().out.splitlines()
    leak = next(k for k, line in enumerate(lines) if line.startswith("warning: validation split val0 shares 1"))
    assert f"{photo} = p_copy.jpg" in lines[leak] and "images: pseudo: 1 of 1 images (no ufo/train0.json: all) x 1 " \
        "-> 1 items an epoch" in lines and leak < next(k for k, line in enumerate(lines) if line.startswith("epoch 1/"))


def test_split_and_val_split_naming_the_same_images_are_refused(two_roots, tmp_path):
    receipts, cord, cache, folds = two_roots
    with pytest.raises(UsageError, match="--split train0 and --val-data .* --val-split train0 name the same images"):
        train.run(run_args(cache, tmp_path / "run", "--split", "train0", "--val-data", str(receipts), "--val-split",
                           "train0"))
    with pytest.raises(UsageError, match="--split .*val1.json and --val-data .* --val-split val1"):
        train.run(run_args(cache, tmp_path / "run", "--split", str(receipts / "ufo" / "val1.json"), "--val-data",
                           str(receipts), "--val-split", "val1"))


def test_runs_shows_the_split_the_repeats_and_the_items_per_source():
    header = {"config": {"split": None, "repeat": None, "lr": 0.001},
              "selection": {"split": "train0", "repeat": {"cord": 0.5},
                            "sources": {"receipts": {"images": 7, "selected": 4, "items": 4},
                                        "cord": {"images": 4, "selected": 4, "items": 2}}}}
    recipe = recipe_of(header)
    assert (recipe["split"], recipe["repeat"], recipe["items.receipts"], recipe["items.cord"]) == ("train0",
                                                                                                  "cord=0.5", 4, 2)
    assert not any(k.startswith("repeat.") for k in recipe)


@pytest.mark.slow
def test_a_run_on_a_selection_resumes_exactly(two_roots, tmp_path, monkeypatch, capsys):
    from east_cache.train import engine
    receipts, cord, cache, folds = two_roots
    flags = ("--epochs", "2", "--batch-size", "2", "--split", "train0", "--repeat", "cord=1.5,receipts=0.5",
             "--val-data", str(receipts), "--val-split", "val0", "--eval-every", "0")
    whole = tmp_path / "whole"
    log = train_run(cache, whole, *flags)
    out = capsys.readouterr().out
    assert "images: cord: 4 of 4 images (no ufo/train0.json: all) x 1.5 -> 6 items an epoch" in out
    header = log[0]
    assert header["selection"]["split"] == "train0" and header["selection"]["sources"]["cord"]["items"] == 6
    calls, real = iter(range(1, 100)), engine.east_loss

    def ctrl_c_in_step_5(*args):
        if next(calls) == 5:
            os.kill(os.getpid(), 2)
        return real(*args)
    monkeypatch.setattr(engine, "east_loss", ctrl_c_in_step_5)
    cut = tmp_path / "cut"
    assert train.run(run_args(cache, cut, *flags)) == train.INTERRUPTED
    monkeypatch.setattr(engine, "east_loss", real)
    ck = torch.load(cut / "latest.pt", weights_only=True)
    assert not ck["complete"] and ck["selection"] == header["selection"]
    with pytest.raises(UsageError, match="--split train1 \\(recorded train0\\)"):
        train.run(run_args(cache, cut, "--epochs", "2", "--batch-size", "2", "--split", "train1", "--resume",
                           str(cut / "latest.pt")))
    train_run(cache, cut, *flags, "--resume", str(cut / "latest.pt"))
    a, b = (torch.load(d / "latest.pt", weights_only=True) for d in (whole, cut))
    assert a["step"] == b["step"] and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert read_log(cut)[-1]["event"] == "end"
