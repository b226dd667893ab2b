"""east-predict with several checkpoints and test-time scales (east_cache.predict.fusion, predict.predict_fused): two
equal models give what one gives, one scale what no TTA gives, two scales still find every word; each image is
decoded once whatever the passes, and the fused words are those of each pass predicted alone, fused; models of
different map scales are refused for map averaging with why."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import GroundTruthModel

from east_cache.config import BuildConfig
from east_cache.errors import EXIT_USER
from east_cache.evaluate.ensemble import fuse
from east_cache.evaluate.scoring import Words, load_ground_truth, score
from east_cache.ingest.imageio import decode_image
from east_cache.ingest.ufo import load_ufo
from east_cache.predict import predict
from east_cache.predict.fusion import MapMean
from east_cache.model.model import EAST
from east_cache.predict import pages as pages_module
from east_cache.predict.pages import pages_from_split
from east_cache.predict.predict import PredictConfig, predict_fused

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def pages_and_words(sample_root):
    records, _ = load_ufo(sample_root / "ufo" / "train.json", sample_root / "images", BuildConfig())
    pages, _ = pages_from_split(sample_root, "train")
    return pages, {r.name: Words.from_record(r) for r in records}


def same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_array_equal(a[name][0], b[name][0])
        np.testing.assert_array_equal(a[name][1], b[name][1])


def test_two_equal_models_give_what_one_gives(pages_and_words):
    pages, words = pages_and_words
    model = GroundTruthModel(pages, words, 256, 0.5)
    cfg = PredictConfig(image_size=256, map_scale=0.5, batch_size=2)
    one, _ = predict.predict(model, pages, cfg, CPU, progress=False)
    two, _ = predict_fused([(MapMean([model, model]), 0.5)], pages, cfg, [256], CPU, progress=False)
    assert sum(len(q) for q, _ in one.values()) > 0
    same(two, one)


def test_one_scale_is_no_tta(pages_and_words):
    pages, words = pages_and_words
    model = GroundTruthModel(pages, words, 256, 0.5)
    cfg = PredictConfig(image_size=320, map_scale=0.5, batch_size=2)
    plain, _ = predict.predict(model, pages, PredictConfig(image_size=256, map_scale=0.5, batch_size=2), CPU,
                               progress=False)
    scaled, _ = predict_fused([(model, 0.5)], pages, cfg, [256], CPU, progress=False)
    same(scaled, plain)


def test_two_scales_fused_find_the_words(pages_and_words, sample_root):
    """A double that knows the pages at two input sizes: each scale alone and both fused score alike, high."""
    pages, words = pages_and_words
    model = GroundTruthModel(pages, words, 256, 0.5)
    model.maps.update(GroundTruthModel(pages, words, 320, 0.5).maps)
    cfg = PredictConfig(image_size=256, map_scale=0.5, batch_size=2)
    gt = load_ground_truth(sample_root / "ufo" / "train.json", BuildConfig())

    def hmean(results):
        return score(gt, {k: Words.from_quads(q) for k, (q, _) in results.items()})["hmean"]
    fused, _ = predict_fused([(model, 0.5)], pages, cfg, [256, 320], CPU, progress=False)
    singles = [hmean(predict_fused([(model, 0.5)], pages, cfg, [s], CPU, progress=False)[0]) for s in (256, 320)]
    assert hmean(fused) >= 0.95 and hmean(fused) >= min(singles) - 0.02, (hmean(fused), singles)


class Shifted:
    """A second model double: the first one's maps moved by a few map px, so that two passes differ."""

    def __init__(self, model, px: int = 2):
        self.model, self.px = model, px

    def __call__(self, x):
        score, geo = self.model(x)
        return torch.roll(score, (self.px, self.px), (2, 3)), torch.roll(geo, (self.px, self.px), (2, 3))


@pytest.fixture
def decodes(monkeypatch) -> dict:
    """Every decode of east-predict's loading, counted by image file."""
    counts = {}

    def counting(path, *a, **k):
        counts[Path(path).name] = counts.get(Path(path).name, 0) + 1
        return decode_image(path, *a, **k)
    monkeypatch.setattr(pages_module, "decode_image", counting)
    return counts


@pytest.mark.slow
def test_each_image_is_decoded_once_whatever_the_passes(pages_and_words, decodes):
    """Two checkpoints (model doubles, as --fuse quads runs them) x two scales: one decode per image, and the fused
    words are those of each of the four passes predicted alone (the path that decoded an image per pass), fused."""
    pages, words = pages_and_words
    model = GroundTruthModel(pages, words, 256, 0.5)
    model.maps.update(GroundTruthModel(pages, words, 320, 0.5).maps)
    passes = [(model, 0.5), (Shifted(model), 0.5)]
    cfg = PredictConfig(image_size=256, map_scale=0.5, batch_size=2)
    decodes.clear()   # the doubles decoded the pages to learn them
    fused, skipped = predict_fused(passes, pages, cfg, [256, 320], CPU, votes=2, progress=False)
    assert skipped == [] and decodes == {Path(p.path).name: 1 for p in pages}
    alone = [predict.predict(m, pages, replace(cfg, image_size=s, map_scale=ms), CPU, progress=False)[0]
             for m, ms in passes for s in (256, 320)]
    assert sum(len(q) for q, _ in fused.values()) > 0
    same(fused, fuse(alone, votes=2))


def test_models_of_different_map_scales_fused_as_quads_are_each_decoded_at_their_own(pages_and_words, sample_root):
    """--fuse quads of a model at x0.5 and one at x0.25: the fused words are those of each model predicted alone at its
    own map scale, fused (decoding the second at the first's scale would put its words at twice their size, and the
    vote of two would keep none); both find every word."""
    pages, words = pages_and_words
    half, quarter = GroundTruthModel(pages, words, 256, 0.5), GroundTruthModel(pages, words, 256, 0.25)
    cfg = PredictConfig(image_size=256, map_scale=0.5, batch_size=2)
    fused, _ = predict_fused([(half, 0.5), (quarter, 0.25)], pages, cfg, [256], CPU, votes=2, progress=False)
    alone = [predict.predict(m, pages, replace(cfg, map_scale=ms), CPU, progress=False)[0]
             for m, ms in ((half, 0.5), (quarter, 0.25))]
    gt = load_ground_truth(sample_root / "ufo" / "train.json", BuildConfig())
    for result in (*alone, fused):
        assert score(gt, {k: Words.from_quads(q) for k, (q, _) in result.items()})["hmean"] >= 0.9
    same(fused, fuse(alone, votes=2))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two checkpoints of one random EAST (maps at x0.5) and one of another map scale (x0.25)."""
    d = tmp_path_factory.mktemp("ck")
    torch.manual_seed(0)
    cfg = BuildConfig(image_size=64, input_size=64)
    half = {"model": EAST(0.5).state_dict(), "config": {**cfg.to_dict(), "map_scale": 0.5}, "epoch": 1}
    torch.save(half, d / "a.pt")
    torch.save(half, d / "b.pt")
    quarter = {"model": EAST(0.25).state_dict(), "config": {**cfg.to_dict(), "map_scale": 0.25}, "epoch": 1}
    torch.save(quarter, d / "q.pt")
    return d


def run_predict(data, out, *flags) -> dict:
    assert predict.main(["--data", str(data), "--split", "train", "--out", str(out), "--quiet", "--device", "cpu",
                         "--score-thresh", "0.3", *map(str, flags)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_equal_checkpoints_and_one_scale_through_the_command(checkpoints, sample_root, tmp_path):
    one = run_predict(sample_root, tmp_path / "one.json", "--checkpoint", checkpoints / "a.pt", "--image-size", 64)
    two = run_predict(sample_root, tmp_path / "two.json", "--checkpoint", checkpoints / "a.pt",
                      "--checkpoint", checkpoints / "b.pt", "--image-size", 64)
    scaled = run_predict(sample_root, tmp_path / "s.json", "--checkpoint", checkpoints / "a.pt", "--scales", 64)
    assert sum(len(e["words"]) for e in one["images"].values()) > 0, "the random model finds words at 0.3"
    assert two["images"] == one["images"] and scaled["images"] == one["images"]
    assert two["predicted_by"]["checkpoints"] == [str(checkpoints / "a.pt"), str(checkpoints / "b.pt")]


@pytest.mark.slow
def test_the_command_decodes_each_image_once(checkpoints, sample_root, tmp_path, decodes):
    """east-predict with two checkpoints fused as quads at two scales: four passes, one decode per image."""
    run_predict(sample_root, tmp_path / "p.json", "--checkpoint", checkpoints / "a.pt", "--checkpoint",
                checkpoints / "b.pt", "--fuse", "quads", "--scales", "64,96")
    names = json.loads((sample_root / "ufo" / "train.json").read_text())["images"]
    assert sorted(decodes) == sorted(Path(n).name for n in names) and set(decodes.values()) == {1}


@pytest.mark.slow
def test_map_scales_that_differ_are_refused_for_averaging(checkpoints, sample_root, tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = predict.main(["--data", str(sample_root), "--split", "train", "--out", str(out), "--quiet", "--device",
                       "cpu", "--checkpoint", str(checkpoints / "a.pt"), "--checkpoint", str(checkpoints / "q.pt")])
    err = capsys.readouterr().err
    assert rc == EXIT_USER and "q.pt" in err and "x0.25" in err and "--fuse quads" in err and not out.exists()
    run_predict(sample_root, out, "--checkpoint", checkpoints / "a.pt", "--checkpoint", checkpoints / "q.pt",
                "--fuse", "quads", "--image-size", 64)
    assert json.loads(out.read_text())["predicted_by"]["fuse"] == "quads"
