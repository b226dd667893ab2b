"""Hostile and careless --augment recipes (issue 50): a "billion laughs" YAML ends at once, a recipe that is not YAML
or not text is one `error:` line naming it in every command that reads one (show, east-train, bench), a checkpoint
whose recorded recipe is damaged is named on --resume, a transform that changes the crop's size or dtype is named
itself, not its Compose. And the draws of a recipe, pinned from outside: each transform of a pipeline draws on its
own (two of p = 0.5 fire together about a quarter of the time), and an image's draws differ across epochs and repeat
for the same (seed, epoch)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from helpers import cli_run, make_tiny_cache, run_args

from east_cache.reader import CacheDataset
from east_cache.reader.transform import CropTransform, CropWords, TransformError, crop_seed
from east_cache.train import train

A = pytest.importorskip("albumentations")

GOOD = "transform:\n  __class_fullname__: Compose\n  transforms:\n  - {__class_fullname__: GaussNoise, p: 0.5}\n"


@pytest.fixture(scope="module")
def cache(sample_root, tmp_path_factory):
    return make_tiny_cache(sample_root, tmp_path_factory.mktemp("recipes") / "c", image_size=128, input_size=64)


def laughs(levels: int = 12) -> str:
    """A YAML of `levels` alias levels, each a Compose of ten of the level below: 10^levels transforms once
    expanded, about a kilobyte written."""
    lines = ["a0: &a0 {__class_fullname__: GaussNoise, p: 0.5}"]
    lines += [f"a{i}: &a{i} {{__class_fullname__: Compose, transforms: [{', '.join([f'*a{i - 1}'] * 10)}]}}"
              for i in range(1, levels + 1)]
    return "\n".join(lines + [f"transform: *a{levels}"]) + "\n"


def one_error(err: str, *named: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert all(n in lines[0] for n in named), (named, lines[0])
    return lines[0]


def test_a_billion_laughs_recipe_ends_at_once_naming_its_line(cache, tmp_path, capsys):
    recipe = tmp_path / "laughs.yaml"
    recipe.write_text(laughs())
    assert len(recipe.read_bytes()) < 2000
    t0 = time.perf_counter()
    status, _, err = cli_run(capsys, "show", cache, "0", "--augment", recipe, "--epochs", "0-1", "-o",
                             tmp_path / "s.png")
    assert status == 2 and time.perf_counter() - t0 < 10
    one_error(err, str(recipe), "line 2", "alias")
    assert not (tmp_path / "s.png").exists()


BAD = {"not yaml": ("bad.yaml", b"transform: [unclosed\n  - {\n", "not a yaml file"),
       "binary": ("bin.yaml", b"\xff\xfe\x00junk\x80\x81", "not a text file"),
       "not json": ("bad.json", b'{"transform": ', "not a json file")}


@pytest.mark.parametrize("case", BAD)
def test_a_recipe_that_is_no_yaml_or_no_text_is_one_line_naming_it_in_every_command(cache, tmp_path, capsys, case):
    name, content, says = BAD[case]
    recipe = tmp_path / name
    recipe.write_bytes(content)
    status, _, err = cli_run(capsys, "show", cache, "0", "--augment", recipe, "-o", tmp_path / "s.png")
    assert status == 2
    one_error(err, str(recipe), says)
    status, _, err = cli_run(capsys, "bench", cache, "--augment", recipe)
    assert status == 2
    one_error(err, str(recipe), says)
    status = train.main(run_args(tmp_path / "no-cache", tmp_path / "run", "--augment", str(recipe), "--device", "cpu"))
    assert status == 2
    one_error(capsys.readouterr().err, str(recipe), says)


def test_a_recipe_too_large_is_refused(cache, tmp_path, capsys):
    recipe = tmp_path / "big.yaml"
    recipe.write_text(GOOD + "#" * (1 << 20) + "\n")
    status, _, err = cli_run(capsys, "show", cache, "0", "--augment", recipe, "-o", tmp_path / "s.png")
    assert status == 2
    one_error(err, str(recipe), "bytes")


@pytest.mark.slow
@pytest.mark.parametrize("recorded", ["x", 5, {"recipe": "a.yaml", "format": "yaml"}])
def test_a_checkpoint_whose_recorded_recipe_is_damaged_is_named_on_resume(cache, tmp_path, capsys, recorded):
    recipe = tmp_path / "aug.yaml"
    recipe.write_text(GOOD)
    out = tmp_path / "run"
    assert train.main(run_args(cache, out, "--augment", str(recipe), "--max-steps", "1", "--device", "cpu")) == 0
    ck_path = out / "latest.pt"
    ck = torch.load(ck_path, weights_only=False)
    ck["transform"] = recorded
    torch.save(ck, ck_path)
    capsys.readouterr()
    status = train.main(run_args(cache, out, "--resume", str(ck_path), "--max-steps", "2", "--device", "cpu"))
    assert status == 2
    one_error(capsys.readouterr().err, f"--resume {ck_path}", "recorded --augment recipe", "--augment RECIPE")


def words_none() -> CropWords:
    return CropWords(np.zeros((0, 2), np.float32), np.zeros(1, np.int64), np.zeros(0, np.uint8))


@pytest.mark.parametrize("culprit, transform", [("RandomCrop", lambda: A.RandomCrop(32, 32, p=1)),
                                                ("Normalize", lambda: A.Normalize(p=1))])
def test_a_transform_that_changes_the_crop_is_named_itself_not_its_compose(culprit, transform):
    t = CropTransform(A.Compose([A.GaussNoise(p=1), transform(), A.CLAHE(p=0)]), "aug.yaml", label="--augment aug.yaml")
    image = np.full((64, 64, 3), 100, np.uint8)
    with pytest.raises(TransformError, match=rf"--augment aug\.yaml: transform {culprit} gave") as e:
        t(image, words_none(), 7, "image a.jpg")
    assert "Compose" not in str(e.value)


@pytest.mark.slow
def test_transforms_of_one_probability_fire_independently():
    """Two transforms at p = 0.5 over 600 crops: each fires about half the time, both together about a quarter (as
    draws of their own give; albumentations' one seed for all made it a half)."""
    t = CropTransform(A.Compose([A.GaussNoise(p=0.5), A.CLAHE(p=0.5)]))
    image = np.full((32, 32, 3), 128, np.uint8)
    fired = []
    for k in range(600):
        applied = []
        t(image, words_none(), crop_seed(0, k % 3, f"img_{k}", 0), "x", applied)
        fired.append(("GaussNoise" in applied, "CLAHE" in applied))
    a, b = np.array(fired).T
    assert abs(a.mean() - 0.5) < 0.07 and abs(b.mean() - 0.5) < 0.07, (a.mean(), b.mean())
    assert abs((a & b).mean() - 0.25) < 0.06, (a & b).mean()


class Draws:
    """A recipe that records the random number each crop's transform draws (from numpy's global generator, which
    the reader seeds per crop), and changes nothing."""

    def __init__(self):
        self.seen: list[float] = []

    def __call__(self, image):
        self.seen.append(float(np.random.random()))
        return image


def draws(cache, seed: int, epochs) -> dict[int, list[float]]:
    """Each epoch's draws of the recipe, one per image, read through the dataset as training reads it."""
    recipe, found = Draws(), {}
    ds = CacheDataset(cache)
    ds.set_transform(CropTransform(recipe), seed)
    for e in epochs:
        ds.set_epoch(e)
        recipe.seen.clear()
        for i in range(len(ds)):
            ds[i]
        found[e] = list(recipe.seen)
    return found


def test_an_images_recipe_draws_differ_across_epochs_and_repeat_for_the_same_seed_and_epoch(cache):
    first = draws(cache, seed=3, epochs=(0, 1, 2, 0))
    assert len(first[0]) >= 2
    assert first[0] != first[1] and first[1] != first[2] and first[0] != first[2]
    for image in range(len(first[0])):   # every image draws anew each epoch
        assert len({first[e][image] for e in (0, 1, 2)}) == 3
    again = draws(cache, seed=3, epochs=(2, 1))
    assert again[1] == first[1] and again[2] == first[2]   # the same (seed, epoch): the same draws, in any order
    assert draws(cache, seed=4, epochs=(1,))[1] != first[1]
