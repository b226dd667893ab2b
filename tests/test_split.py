"""`east-cache split` (east_cache/tools/split.py): folds that partition the images, balanced by legible words,
groups kept whole, the same for a seed, every field of the source kept, the split itself never written, and a fold
taken by the build and by validation as any split."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from helpers import cli_run

from east_cache.config import BuildConfig
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest
from east_cache.tools.split import legible_words

WORD = {"points": [[0, 0], [40, 0], [40, 12], [0, 12]], "transcription": "x", "illegibility": False, "tags": []}
ILLEGIBLE = {**WORD, "illegibility": True}


def ufo_root(tmp_path, words_per_image, names=None, extra=None):
    """ROOT/ufo/train.json of images with the given legible word counts (plus one illegible word each); no
    pixels: split reads the annotations only."""
    names = names or [f"img_{i:04d}.jpg" for i in range(len(words_per_image))]
    images = {name: {"img_w": 400, "img_h": 300, "license_tag": {"usable": True, "k": i},
                     "words": {**{f"{j + 1}": {**WORD, "note": [i, j]} for j in range(n)}, "999": ILLEGIBLE}}
              for i, (name, n) in enumerate(zip(names, words_per_image))}
    root = tmp_path / "root"
    (root / "ufo").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "ufo" / "train.json").write_text(json.dumps({"version": "0.1", **(extra or {}), "images": images}))
    return root


def folds(root, k):
    """[(train images, val images)] of each fold, as written."""
    read = lambda name: json.loads((root / "ufo" / f"{name}.json").read_text())["images"]   # noqa: E731
    return [(read(f"train{i}"), read(f"val{i}")) for i in range(k)]


def test_folds_partition_the_images_and_train_holds_the_others(tmp_path, capsys):
    root = ufo_root(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    status, out, err = cli_run(capsys, "split", "--data", root, "--folds", 4)
    assert status == 0, err
    source = json.loads((root / "ufo" / "train.json").read_text())["images"]
    written = folds(root, 4)
    val_names = [n for _, val in written for n in val]
    assert sorted(val_names) == sorted(source), "every image in exactly one validation fold"
    for train, val in written:
        assert val and set(train) == set(source) - set(val)
        assert list(train) == [n for n in source if n in train], "the source's order is kept"
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [[int(x) for x in r] for r in rows] == [
        [k, len(val), sum(len(e["words"]) - 1 for e in val.values()), len(train),
         sum(len(e["words"]) - 1 for e in train.values())] for k, (train, val) in enumerate(written)]


@pytest.mark.slow
def test_words_are_balanced_within_the_largest_image(tmp_path, capsys):
    """150 images of 1 to 3 legible words, 25 of 40 to 100, 2 of 250 and 30 without, in 5 folds: every fold's words within
    the largest image's words of the others (the greedy rule's bound), and within 1% of the mean on this set (a
    split by image count is 25% off); the images without words even out the folds' image counts."""
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 4, 150).tolist() + rng.integers(40, 101, 25).tolist() + [250, 250] + [0] * 30
    rng.shuffle(counts)
    root = ufo_root(tmp_path, counts)
    assert cli_run(capsys, "split", "--data", root, "--folds", 5)[0] == 0
    written = folds(root, 5)
    per_fold = [sum(len(e["words"]) - 1 for e in val.values()) for _, val in written]
    assert sum(per_fold) == sum(counts)
    assert max(per_fold) - min(per_fold) <= max(counts)
    assert max(per_fold) - min(per_fold) <= 0.01 * np.mean(per_fold), per_fold
    sizes = [len(val) for _, val in written]
    assert max(sizes) - min(sizes) <= 1, sizes


def test_legible_words_follow_the_build_rules():
    entry = {"img_w": 100, "img_h": 100, "words": {
        "1": WORD, "2": ILLEGIBLE, "3": {**WORD, "tags": ["masked"]}, "4": {**WORD, "points": [[0, 0], [2, 0], [2, 2], [0, 2]]},
        "5": {"points": "bad"}, "6": {**WORD, "points": [[0, 0], [9, 0], [9, 9], [5, 12], [0, 9]]}}}
    assert legible_words(entry, "here") == 1


def test_groups_stay_in_one_fold(tmp_path, capsys):
    """Images of one source (the pattern's group 1, or its whole match without a group) share a fold; images the
    pattern does not match are a group each, and the output says how many."""
    names = [f"src{g}_{i}.jpg" for g in range(6) for i in range(g + 2)] + [f"other{i}.jpg" for i in range(4)]
    root = ufo_root(tmp_path, [2] * len(names), names)
    for pattern in (r"^(src\d+)_", r"src\d+"):
        status, out, _ = cli_run(capsys, "split", "--data", root, "--folds", 3, "--group-by", pattern, "--force")
        assert status == 0
        assert "10 groups" in out and "4 image(s) it does not match" in out
        fold_of = {n: k for k, (_, val) in enumerate(folds(root, 3)) for n in val}
        for g in range(6):
            assert len({fold_of[f"src{g}_{i}.jpg"] for i in range(g + 2)}) == 1, (pattern, g)


def test_the_same_seed_gives_the_same_folds(tmp_path, capsys):
    root = ufo_root(tmp_path, [2] * 30)

    def run(seed):
        assert cli_run(capsys, "split", "--data", root, "--folds", 3, "--seed", seed, "--force")[0] == 0
        return [sorted(val) for _, val in folds(root, 3)]

    first = run(7)
    assert run(7) == first
    assert run(8) != first, "equal images are ordered by the seed"


def test_existing_folds_need_force_and_the_split_itself_is_never_written(tmp_path, capsys):
    root = ufo_root(tmp_path, [1, 2, 3, 4])
    (root / "ufo" / "val1.json").write_text("mine")
    status, _, err = cli_run(capsys, "split", "--data", root, "--folds", 2)
    assert status == 2 and err.count("error:") == 1 and "--force" in err and "val1.json" in err
    assert (root / "ufo" / "val1.json").read_text() == "mine" and not (root / "ufo" / "train0.json").exists()
    assert cli_run(capsys, "split", "--data", root, "--folds", 2, "--force")[0] == 0
    assert (root / "ufo" / "val1.json").read_text() != "mine"
    before = (root / "ufo" / "train0.json").read_bytes()
    status, _, err = cli_run(capsys, "split", "--data", root, "--split", "train0", "--folds", 2, "--force")
    assert status == 2 and "would replace the split it is made from" in err
    assert (root / "ufo" / "train0.json").read_bytes() == before


def test_every_field_of_the_source_is_kept(tmp_path, capsys):
    root = ufo_root(tmp_path, [2, 0, 3, 1], extra={"info": {"made": "by hand"}, "pseudo_labels": {"x": 1}})
    source = json.loads((root / "ufo" / "train.json").read_text())
    assert cli_run(capsys, "split", "--data", root, "--folds", 2)[0] == 0
    for k in range(2):
        for name in (f"train{k}", f"val{k}"):
            written = json.loads((root / "ufo" / f"{name}.json").read_text())
            assert {key: v for key, v in written.items() if key != "images"} == \
                {key: v for key, v in source.items() if key != "images"}
            assert all(entry == source["images"][n] for n, entry in written["images"].items())


def test_user_mistakes_are_one_error_line(tmp_path, capsys):
    root = ufo_root(tmp_path, [1, 2, 3])
    for flags, said in ((["--folds", 1], "--folds: 1: must be an integer >= 2"), (["--folds", 4], "has 3 images"),
                        (["--group-by", "("], "not a regular expression"), (["--split", "nope"], "nope.json"),
                        (["--seed", -1], "--seed: -1: must be an integer >= 0")):
        status, _, err = cli_run(capsys, "split", "--data", root, *flags)
        assert status == 2 and err.count("error:") == 1 and said in err, err
    status, _, err = cli_run(capsys, "split", "--data", "s3://bucket/set")
    assert status == 2 and "local" in err
    assert not list((root / "ufo").glob("val*.json"))


def test_a_fold_is_built_and_validated_as_any_split(sample_root, tmp_path, capsys):
    """build --split train0 caches exactly fold 0's training images; --val-split val0 validates on its others."""
    from east_cache.train.validate import val_pages   # imports torch
    import shutil
    root = tmp_path / "data"
    shutil.copytree(sample_root, root)
    assert cli_run(capsys, "split", "--data", root, "--folds", 2)[0] == 0
    train, val = folds(root, 2)[0]
    cfg = BuildConfig(image_size=96, input_size=64, variants=1, crop_tries=20)
    build_cache(cfg, [root], tmp_path / "cache", split="train0", jobs=1, quiet=True)
    assert sorted(Manifest.load(tmp_path / "cache").images) == sorted(train)
    assert sorted(r.name for r in val_pages(root, "val0", cfg, 2).records) == sorted(val)


def test_each_command_shows_an_example_in_its_help(capsys):
    for command, example in (("split", "east-cache split --data"), ("pseudo", "east-cache pseudo --pred")):
        status, out, _ = cli_run(capsys, command, "--help")
        assert status == 0 and example in out


def test_a_root_with_a_folder_per_split_gets_its_folds_images_linked(sample_root, tmp_path, capsys):
    """The competition's layout, images in img/train/ (as the baseline reads them): split links img/train{k} and
    img/val{k} to img/train and says so; a fold then builds, validates and checks as any split, its images once."""
    import shutil
    from east_cache.ingest.ufo import find_split
    root = tmp_path / "medical"
    shutil.copytree(sample_root / "ufo", root / "ufo")
    shutil.copytree(sample_root / "images", root / "img" / "train")
    status, _, err = cli_run(capsys, "split", "--data", root, "--split", "train", "--folds", 2)
    assert status == 0, err
    assert "linked" in err and str(root / "img" / "train0") in err
    for k in range(2):
        for name in (f"train{k}", f"val{k}"):
            link = root / "img" / name
            assert link.is_symlink() and os.readlink(link) == "train"
            assert find_split(root, name) == (root / "ufo" / f"{name}.json", link)
    train, _ = folds(root, 2)[0]
    cfg = BuildConfig(image_size=96, input_size=64, variants=1, crop_tries=20)
    build_cache(cfg, [root], tmp_path / "cache", split="train0", jobs=1, quiet=True)
    assert sorted(Manifest.load(tmp_path / "cache").images) == sorted(train)
    status, out, _ = cli_run(capsys, "check", "--data", root, "--quiet")
    assert status in (0, 1) and "duplicates: 0 pair(s)" in out, "a linked image is the one file, not a copy"
    assert cli_run(capsys, "split", "--data", root, "--folds", 2, "--force")[0] == 0, "the links kept as they are"
    (root / "img" / "val1").unlink()
    (root / "img" / "val1").mkdir()   # a folder of its own there: refused, before anything is written
    status, _, err = cli_run(capsys, "split", "--data", root, "--folds", 2, "--force")
    assert status == 2 and "img/val1" in err and "a folder of its own" in err
