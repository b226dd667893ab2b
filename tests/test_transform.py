"""A user's own transform of each training crop (east_cache/reader/transform.py): pixels only leave the targets
alone; geometric ones move the words, whose targets equal make_targets of the words moved by the same matrix; the
draws are seeded by (seed, epoch, image, variant), so batches repeat and a resume inside an epoch reads what an
uninterrupted run would; the normalisation comes after; bad recipes and failing transforms are named."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from east_cache.errors import UsageError
from east_cache.reader.cache import CacheDataset
from east_cache.reader.loader import Loader
from east_cache.reader.recipe import load_recipe
from east_cache.reader.transform import CropTransform, CropWords, TransformError, crop_seed, seed_pipeline
from east_cache.sample.targets import make_targets
from helpers import make_tiny_cache, train_run

A = pytest.importorskip("albumentations")

SIZES = dict(image_size=256, input_size=128, map_scale=0.5)
KEYPOINTS = dict(format="xy", remove_invisible=False)


@pytest.fixture(scope="module")
def cache(sample_root, tmp_path_factory):
    return make_tiny_cache(sample_root, tmp_path_factory.mktemp("transform") / "c", **SIZES)


def items(ds: CacheDataset, epochs=(0, 1, 2)):
    for e in epochs:
        ds.set_epoch(e)
        for i in range(len(ds)):
            yield e, i, ds[i]


def test_a_pixel_recipe_changes_no_target_byte_and_to_gray_makes_r_g_b_equal(cache):
    plain = CacheDataset(cache)
    grey = CacheDataset(cache, transform=A.Compose([A.GaussNoise(p=1), A.CLAHE(p=1), A.ToGray(p=1)]))
    changed = 0
    for (e, i, want), (_, _, got) in zip(items(plain), items(grey)):
        for k in ("score", "geo", "roi"):
            assert got[k].tobytes() == want[k].tobytes(), (e, i, k)
        image = got["image"]
        assert image.dtype == np.uint8 and image.shape == want["image"].shape
        assert (image[0] == image[1]).all() and (image[1] == image[2]).all(), (e, i)
        changed += not np.array_equal(image, want["image"])
    assert changed


def test_to_gray_reaches_every_crop_of_a_loaders_batches_with_workers(cache):
    with Loader(cache, 2, workers=2, normalize=None, jitter=0, transform=A.Compose([A.ToGray(p=1)])) as loader:
        for _ in range(2):
            for batch in loader:
                image = batch.image
                assert image.dtype == torch.uint8
                assert torch.equal(image[:, 0], image[:, 1]) and torch.equal(image[:, 1], image[:, 2])


def homography(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """points (P, 2) mapped by a 3x3 matrix, float64."""
    h = np.c_[points.astype(np.float64), np.ones(len(points))] @ np.asarray(matrix, np.float64).T
    return h[:, :2] / h[:, 2:]


def expected_targets(ds: CacheDataset, i: int, matrix: np.ndarray, size: int):
    """make_targets of item i's words (before any transform) moved by a 3x3 matrix, the legible ones that leave the
    crop made don't-care."""
    points, offsets, care = ds.quads(i)
    moved = homography(matrix, points).astype(np.float32)
    moved = CropWords(moved, offsets, care)
    lo = np.minimum.reduceat(moved.points, offsets[:-1], axis=0)
    hi = np.maximum.reduceat(moved.points, offsets[:-1], axis=0)
    care = np.where(np.all((lo >= 0) & (hi <= size), axis=1), care, 0).astype(np.uint8)
    return make_targets(moved.points, offsets, care, size, ds.config.map_scale)


@pytest.mark.parametrize("recipe", ["affine", "perspective"])
def test_geometric_targets_are_make_targets_of_the_words_moved_by_the_same_matrix(cache, recipe):
    """The matrix is read from the very draw: the same nested pipeline under the same seed, its parameters saved."""
    user = (A.Compose([A.Affine(rotate=(17, 17), scale=(0.85, 0.85), shear=(6, 6), p=1)]) if recipe == "affine"
            else A.Compose([A.Perspective(scale=(0.05, 0.1), p=1)]))
    plain, moved = CacheDataset(cache), CacheDataset(cache, transform=user)
    size, seed = plain.config.input_size, plain.config.seed
    checked = 0
    for e in (0, 1):
        plain.set_epoch(e)
        moved.set_epoch(e)
        for i in range(len(plain)):
            before, after = plain[i], moved[i]
            twin = A.Compose([user], keypoint_params=A.KeypointParams(**KEYPOINTS), save_applied_params=True)
            seed_pipeline(twin, crop_seed(seed, e, plain.names[i], plain.variant(i)))   # as the reader seeds it
            out = twin(image=np.ascontiguousarray(before["image"].transpose(1, 2, 0)), keypoints=np.zeros((1, 2)))
            assert np.array_equal(out["image"].transpose(2, 0, 1), after["image"])   # the very same draw
            params = dict(out["applied_transforms"])[type(user.transforms[0]).__name__]
            matrix = np.asarray(params["matrix"], np.float64)
            if "max_width" in params:   # Perspective keeps the size: its warp's output resized back to S x S
                matrix = np.diag([size / params["max_width"], size / params["max_height"], 1]) @ matrix
            score, geo, roi = expected_targets(plain, i, matrix, size)
            # keypoints move in float32: a vertex on a map pixel's rounding edge may land on either side
            assert np.mean(after["score"][0] != score) < 2e-3
            assert np.mean(after["roi"][0] != roi) < 2e-3
            both = (after["score"][0] > 0) & (score > 0)
            assert np.allclose(after["geo"][:, both].astype(np.float32), geo[:, both], atol=0.05, rtol=0.01)
            checked += int(score.sum() > 0)
    assert checked


def test_a_flip_mirrors_the_words_and_puts_them_back_clockwise(cache):
    plain, flipped = CacheDataset(cache), CacheDataset(cache, transform=A.Compose([A.HorizontalFlip(p=1)]))
    size = plain.config.input_size
    mirror = np.array([[-1.0, 0, size - 1], [0, 1, 0], [0, 0, 1]])   # albumentations flips pixel centres
    for e, i, after in items(flipped, (0, 1)):
        plain.set_epoch(e)
        points, offsets, care = plain.quads(i)
        moved = homography(mirror, points).astype(np.float32)
        for k in np.flatnonzero(np.diff(offsets) == 4):   # mirrored quads, corners 1, 0, 3, 2: clockwise again
            q = moved[offsets[k]:offsets[k] + 4]
            moved[offsets[k]:offsets[k] + 4] = q[[1, 0, 3, 2]]
        lo = np.minimum.reduceat(moved, offsets[:-1], axis=0)
        hi = np.maximum.reduceat(moved, offsets[:-1], axis=0)
        care = np.where(np.all((lo >= 0) & (hi <= size), axis=1), care, 0).astype(np.uint8)
        score, geo, roi = make_targets(moved, offsets, care, size, plain.config.map_scale)
        assert np.array_equal(after["score"][0], score) and np.array_equal(after["roi"][0], roi)
        assert np.array_equal(after["geo"], geo.astype(np.float16))


def test_a_word_the_transform_pushes_out_of_the_crop_becomes_dont_care():
    t = CropTransform(A.Compose([A.Affine(translate_px={"x": (40, 40), "y": (0, 0)}, p=1)]))
    quads = np.array([[[10, 10], [30, 10], [30, 20], [10, 20]], [[70, 30], [90, 30], [90, 40], [70, 40]]], np.float32)
    words = CropWords(quads.reshape(-1, 2), np.array([0, 4, 8]), np.array([1, 1], np.uint8))
    image, moved = t(np.zeros((100, 100, 3), np.uint8), words, seed=3, where="image x")
    assert moved.care.tolist() == [1, 0]   # the second word now reaches x = 130
    assert np.allclose(moved.points[:4, 0], quads[0, :, 0] + 40)


def batches(loader: Loader, epochs) -> list[list[torch.Tensor]]:
    out = []
    for e in epochs:
        loader.set_epoch(e)
        out += [[t.clone() for t in b] for b in loader]
    return out


RECIPE = [A.Affine(rotate=(-10, 10), shear=(-5, 5), p=0.8), A.GaussNoise(p=0.5), A.HueSaturationValue(p=0.5)]


@pytest.mark.slow
def test_one_seed_gives_the_same_batches_twice_with_workers_and_another_seed_others(cache):
    def run(seed: int):
        torch.manual_seed(seed)   # the colour jitter's draws (train.py seeds them so)
        with Loader(cache, 2, workers=2, seed=seed, transform=A.Compose(RECIPE)) as loader:
            return batches(loader, (0, 1))

    first, again, other = run(5), run(5), run(6)
    assert all(torch.equal(a, b) for x, y in zip(first, again) for a, b in zip(x, y))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(first, other))


def test_a_resume_inside_an_epoch_reads_the_batches_an_uninterrupted_run_does(cache):
    with Loader(cache, 1, workers=2, seed=2, jitter=0, transform=A.Compose(RECIPE)) as loader:
        whole = batches(loader, (3,))
    with Loader(cache, 1, workers=1, seed=2, jitter=0, transform=A.Compose(RECIPE)) as loader:
        loader.set_epoch(3, skip=2)
        rest = [[t.clone() for t in b] for b in loader]
    assert len(rest) == len(whole) - 2
    assert all(torch.equal(a, b) for x, y in zip(whole[2:], rest) for a, b in zip(x, y))


def test_a_recipe_sees_uint8_pixels_and_the_normalisation_comes_after(cache, tmp_path):
    recipe = tmp_path / "strict.py"
    recipe.write_text("import numpy as np\n\n"
                      "def strict(image):\n"
                      "    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3\n"
                      "    assert image.max() > 1, 'pixels 0..255, not normalised'\n"
                      "    return 255 - image\n")
    with Loader(cache, 2, workers=0, jitter=0, normalize="baseline", transform=f"{recipe}:strict") as loader:
        batch = next(iter(loader))
    assert batch.image.dtype == torch.float32 and -1 <= batch.image.min() and batch.image.max() <= 1
    with Loader(cache, 2, workers=0, jitter=0, normalize=None, transform=f"{recipe}:strict") as loader:
        inverted = next(iter(loader)).image
    with Loader(cache, 2, workers=0, jitter=0, normalize=None) as loader:
        assert torch.equal(inverted, 255 - next(iter(loader)).image)


def test_a_torch_transform_is_seeded_per_crop_and_leaves_the_process_stream_alone(cache):
    class Noise(torch.nn.Module):   # draws from torch's global generator, as torchvision's v2 transforms do
        def forward(self, image):
            return (image.int() + torch.randint(0, 30, image.shape)).clamp(0, 255).to(torch.uint8)

    ds = CacheDataset(cache, transform=Noise())
    ds.set_epoch(1)
    torch.manual_seed(0)
    a = ds[0]["image"]
    after = torch.rand(1)
    torch.manual_seed(0)
    b = ds[0]["image"]
    assert np.array_equal(a, b) and torch.equal(after, torch.rand(1))
    assert not np.array_equal(a, ds[1]["image"][:, :a.shape[1]]) or len(ds) == 1


def test_validation_reads_never_use_the_transform(cache):
    with Loader(cache, 2, train=False, workers=0, normalize=None, transform=A.Compose([A.InvertImg(p=1)])) as val:
        with Loader(cache, 2, train=False, workers=0, normalize=None) as plain:
            assert all(torch.equal(a.image, b.image) for a, b in zip(val, plain))


def test_a_recipe_file_round_trips_and_bad_ones_are_named(tmp_path):
    good = tmp_path / "aug.yaml"
    A.save(A.Compose([A.GaussNoise(p=1), A.Perspective(p=1)]), str(good), data_format="yaml")
    t = load_recipe(good)
    assert t.moves and t.record["format"] == "yaml" and t.recipe == str(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("GaussNoise", "GaussNoize"))
    with pytest.raises(UsageError, match=r"bad\.yaml: unknown transform GaussNoize"):
        load_recipe(bad)
    args = tmp_path / "args.yaml"
    args.write_text(good.read_text().replace("per_channel: true", "per_channel: [1, 2]"))
    with pytest.raises(UsageError, match=r"args\.yaml: transform GaussNoise does not load"):
        load_recipe(args)
    with pytest.raises(UsageError, match=r"nope\.yaml: no such file"):
        load_recipe(tmp_path / "nope.yaml")
    (tmp_path / "r.py").write_text("x = 1\n")
    with pytest.raises(UsageError, match=r"r\.py:pipeline: the file defines no 'pipeline'"):
        load_recipe(f"{tmp_path / 'r.py'}:pipeline")


def test_a_transform_that_raises_or_changes_the_crop_is_named_with_the_image(cache):
    def boom(image):
        raise ValueError("no")

    with pytest.warns(UserWarning, match="lambda"):   # albumentations' own word on Lambda and processes
        lam = A.Lambda(image=lambda x, **kw: boom(x))
    ds = CacheDataset(cache, transform=A.Compose([A.GaussNoise(p=1), lam]))
    ds.set_epoch(0)
    with pytest.raises(TransformError, match=r"transform Lambda failed on image \S+ \(variant 0, epoch 0\): "
                                             r"ValueError: no"):
        ds[0]
    ds.transform = lambda image: image[:64]
    with pytest.raises(TransformError, match=r"gave uint8 \(64, 128, 3\) for image .* must keep the size"):
        ds[0]
    ds.transform = lambda image: image.astype(np.float32) / 255
    with pytest.raises(TransformError, match=r"transform <lambda> gave float32"):
        ds[0]


def test_a_cache_whose_geometry_was_built_refuses_a_transform(sample_root, tmp_path):
    built = make_tiny_cache(sample_root, tmp_path / "b", geometry="build", **SIZES)
    with pytest.raises(UsageError, match=r"its pages are stored warped .* --geometry read"):
        CacheDataset(built, transform=A.Compose([A.ToGray(p=1)]))


@pytest.mark.slow
def test_east_train_augment_records_the_recipe_and_a_resume_inside_an_epoch_is_exact(tiny_cache, tmp_path, capsys):
    recipe = tmp_path / "aug.yaml"
    A.save(A.Compose([A.Affine(rotate=(-15, 15), p=0.9), A.GaussNoise(p=0.5)]), str(recipe), data_format="yaml")
    flags = ("--epochs", "2", "--batch-size", "1", "--augment", str(recipe))
    whole = tmp_path / "whole"
    log = train_run(tiny_cache, whole, *flags)
    assert log[0]["transform"]["text"] == recipe.read_text() and log[0]["config"]["augment"] == str(recipe)
    assert "each training crop through --augment" in capsys.readouterr().out
    cut = tmp_path / "cut"
    train_run(tiny_cache, cut, *flags, "--max-steps", "3")   # stops after the first step of epoch 2
    recipe.write_text("not a recipe any more")   # a resume makes the transform from the checkpoint's text
    train_run(tiny_cache, cut, "--epochs", "2", "--batch-size", "1", "--resume", str(cut / "latest.pt"))
    assert "as recorded in" in capsys.readouterr().out
    a, b = (torch.load(d / "latest.pt", weights_only=True) for d in (whole, cut))
    assert a["step"] == b["step"] == 4 and b["transform"]["text"] == a["transform"]["text"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


@pytest.mark.slow
def test_a_recipe_that_fails_mid_run_saves_the_run_first_then_says_so_in_one_line(tiny_cache, tmp_path, capsys):
    from east_cache.train import train
    recipe = tmp_path / "third.py"
    recipe.write_text("calls = 0\n\n"
                      "def third(image):\n"
                      "    global calls\n"
                      "    calls += 1\n"
                      "    if calls == 3:\n"
                      "        raise RuntimeError('the third crop')\n"
                      "    return image\n")
    out = tmp_path / "run"
    status = train.main(["--cache", str(tiny_cache), "--out", str(out), "--workers", "0", "--batch-size", "1",
                         "--backbone-weights", "random", "--epochs", "3", "--augment", f"{recipe}:third"])
    err = [line for line in capsys.readouterr().err.splitlines() if not line.lstrip().startswith("epoch ")]
    assert status == 2 and len(err) == 1
    assert re.match(rf"error: --augment {re.escape(str(recipe))}:third: transform third failed on image \S+ "
                    rf"\(variant 0, epoch 1\): RuntimeError: the third crop; saved {re.escape(str(out))}/epoch_2_step_",
                    err[0]), err[0]
    assert torch.load(out / "latest.pt", weights_only=True)["transform"]["name"] == "third"


def test_east_train_refuses_a_recipe_that_does_not_load_before_the_caches_open(tmp_path, capsys):
    from east_cache.train import train
    bad = tmp_path / "aug.json"
    bad.write_text('{"transform": {"__class_fullname__": "Compose", "transforms": [{"__class_fullname__": "Blurr"}]}}')
    status = train.main(["--cache", str(tmp_path / "no-cache"), "--augment", str(bad)])
    assert status == 2
    assert capsys.readouterr().err.strip() == (f"error: --augment {bad}: unknown transform Blurr (albumentations "
                                               f"{A.__version__} has no such class); check the name and the "
                                               f"albumentations version")


def test_show_draws_a_contact_sheet_of_the_epochs_through_a_recipe(cache, tmp_path, capsys):
    from PIL import Image
    from helpers import cli_run
    recipe = tmp_path / "aug.yaml"
    A.save(A.Compose([A.ToGray(p=1), A.Perspective(p=1)]), str(recipe), data_format="yaml")
    sheet = tmp_path / "sheet.png"
    status, out, err = cli_run(capsys, "show", cache, "0", "--augment", recipe, "--epochs", "0-5", "-o", sheet)
    assert status == 0, err
    pixels = np.asarray(Image.open(sheet).convert("RGB"))
    size = 128
    assert pixels.shape[1] == 4 * (size + 8) and pixels.shape[0] > 2 * size   # 6 crops: 4 a row, 2 rows
    status, _, err = cli_run(capsys, "show", cache, "0", "--augment", tmp_path / "none.yaml", "-o", sheet)
    assert status == 2 and "none.yaml: no such file" in err


def test_bench_augment_prints_a_cores_rate_without_and_with_the_recipe_and_each_transforms_share(cache, tmp_path,
                                                                                               capsys, monkeypatch):
    from helpers import cli_run
    from east_cache.inspect import bench_augment
    recipe = tmp_path / "aug.yaml"
    A.save(A.Compose([A.GaussNoise(p=1), A.Affine(rotate=(-5, 5), p=1)]), str(recipe), data_format="yaml")
    monkeypatch.setattr(bench_augment, "REPEAT_S", 0.05)
    status, out, err = cli_run(capsys, "bench", cache, "--augment", recipe)
    assert status == 0, err
    assert re.search(r"without --augment: +[\d.]+ crops/s", out)
    assert re.search(rf"with {re.escape(str(recipe))}: +[\d.]+ crops/s \([\d.]+x\); words moved as keypoints", out)
    shares = [float(x) for x in re.findall(r"^  (?:GaussNoise|Affine) +[\d.]+ +([\d.]+)%$", out, re.M)]
    assert len(shares) == 2 and abs(sum(shares) - 100) < 0.2


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["pixels", "affine"])
def test_train_pys_compact_batches_hold_the_targets_of_the_plain_items(cache, recipe):
    """Loader's batches (compact items: packed maps and word table, expanded on the device) equal CacheDataset's
    plain items under the same transform; a pixel recipe leaves them as they are without it."""
    user = (A.Compose([A.GaussNoise(p=1), A.Sharpen(p=1)]) if recipe == "pixels"
            else A.Compose([A.Affine(rotate=(-20, 20), shear=(-8, 8), p=1)]))
    plain = CacheDataset(cache, transform=user)
    with Loader(cache, 1, workers=0, seed=plain.config.seed, jitter=0, normalize=None, shuffle=False,
                transform=user) as loader, Loader(cache, 1, workers=0, jitter=0, normalize=None,
                                                  shuffle=False) as untransformed:
        for epoch in (0, 1):
            plain.set_epoch(epoch)
            loader.set_epoch(epoch)
            untransformed.set_epoch(epoch)
            for i, (batch, before) in enumerate(zip(loader, untransformed)):
                item = plain[i]
                assert np.array_equal(batch.image[0].numpy(), item["image"])
                assert np.array_equal(batch.score[0].numpy(), item["score"].astype(np.float32))
                assert np.array_equal(batch.roi[0].numpy(), item["roi"].astype(np.float32))
                assert np.allclose(batch.geo[0].numpy(), item["geo"].astype(np.float32), atol=0.05, rtol=2e-3)
                if recipe == "pixels":
                    assert torch.equal(batch.score, before.score) and torch.equal(batch.geo, before.geo)
                    assert torch.equal(batch.roi, before.roi) and not torch.equal(batch.image, before.image)


def test_the_sheet_names_the_transforms_that_fired_on_each_crop(cache, tmp_path):
    """show --augment's caption of a crop names the recipe's transforms that fired on it (albumentations' applied
    transforms), not only the geometric draw: ToGray named exactly where the crop came out grey."""
    from east_cache.inspect.show import show_epochs
    recipe = tmp_path / "aug.yaml"
    A.save(A.Compose([A.GaussNoise(p=0.5), A.ToGray(p=0.5)]), str(recipe), data_format="yaml")
    epochs = list(range(8))
    labels = show_epochs(cache, "0", epochs, tmp_path / "sheet.png", recipe=load_recipe(str(recipe)))
    assert all(label[0].startswith(f"epoch {e}: x") for e, label in zip(epochs, labels))
    fired = [" ".join(label[1:]) for label in labels]
    assert {"ToGray" in f for f in fired} == {True, False} and any("GaussNoise" in f for f in fired), fired
    assert any(f == "none fired" for f in fired) or all(f for f in fired)
    ds = CacheDataset(cache, transform=load_recipe(str(recipe)))
    for e, f in zip(epochs, fired):
        image = ds[(e, 0)]["image"].astype(int)
        grey = not np.abs(image[0] - image[1]).any() and not np.abs(image[1] - image[2]).any()
        assert grey == ("ToGray" in f), (e, f)


def test_bench_augment_takes_the_runs_augment_flags(cache, tmp_path, capsys, monkeypatch):
    """bench --augment with --input-size, --max-rotation and --scale times crops drawn by them (it returned before
    reading them: the crops were the cache's)."""
    from helpers import cli_run
    from east_cache.inspect import bench_augment
    recipe = tmp_path / "aug.yaml"
    A.save(A.Compose([A.GaussNoise(p=1)]), str(recipe), data_format="yaml")
    monkeypatch.setattr(bench_augment, "REPEAT_S", 0.05)
    seen = []
    real = bench_augment.worker_rate
    monkeypatch.setattr(bench_augment, "worker_rate", lambda ds, keys, *a: seen.append(ds.aug) or real(ds, keys, *a))
    status, out, err = cli_run(capsys, "bench", cache, "--augment", recipe, "--input-size", "96", "--max-rotation",
                               "45", "--scale", "0.5,1")
    assert status == 0, err
    assert "16 crops of 96 px" in out and "rotation U[-45, 45] deg, scale U[0.5, 1]" in out, out
    assert seen and all(a.input_size == 96 and a.max_rotation == 45 and a.scale == (0.5, 1.0) for a in seen), seen
