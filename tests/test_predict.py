"""Full-image prediction (east_cache.predict.predict): inputs prepared as the build prepares images (EXIF-aware, the same
resize convention), batched by shape, and quads mapped back to each image's own frame. A ground-truth-maps test
double stands in for the model, so the predictions are as good as decoding allows and must score so."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from helpers import GroundTruthModel
from PIL import Image

from east_cache.predict.pages import (STRIDE, Page, input_geometry, load_input, load_inputs, pages_from_folder,
                                     pages_from_split, plan_batches)
from east_cache.predict.predict import PredictConfig, predict, write_predictions
from east_cache.evaluate.scoring import Words, load_ground_truth, load_predictions, score
from east_cache.config import BuildConfig
from east_cache.errors import DataError
from east_cache.ingest.ufo import CARE, load_ufo

CPU = __import__("torch").device("cpu")


def gt_setup(root, image_size=256, map_scale=0.5, split="train"):
    records, _ = load_ufo(root / "ufo" / f"{split}.json", root / "images", BuildConfig())
    pages, _ = pages_from_split(root, split)
    words = {r.name: Words.from_record(r) for r in records}
    return pages, words, GroundTruthModel(pages, words, image_size, map_scale)


@pytest.mark.parametrize("map_scale", [0.5, 0.25])
def test_ground_truth_maps_through_prediction_score_high(sample_root, tmp_path, map_scale):
    """Every page (an EXIF-rotated JPEG, a PNG, a grayscale JPEG, RGB JPEGs) through load, batch, decode and
    the mapping back to the frame: rect hmean >= 0.95 against the UFO words, read back from the written file."""
    pages, _, model = gt_setup(sample_root, 256, map_scale)
    cfg = PredictConfig(image_size=256, map_scale=map_scale, batch_size=2)
    results, skipped = predict(model, pages, cfg, CPU, progress=False)
    assert skipped == [] and sorted(results) == sorted(p.name for p in pages)
    write_predictions(tmp_path / "pred.json", results)
    gt = load_ground_truth(sample_root / "ufo" / "train.json", BuildConfig())
    r = score(gt, load_predictions(tmp_path / "pred.json", gt))
    assert r["gt_care"] >= 30 and r["hmean"] >= 0.95, r
    words = [w for e in json.loads((tmp_path / "pred.json").read_text())["images"].values() for w in e["words"].values()]
    assert words and all(cfg.score_thresh < w["score"] <= 1 for w in words), "each word's confidence is written"


def test_inputs_follow_the_exif_orientation(sample_root):
    """Page 0 is stored turned 90 degrees with an EXIF orientation: in the prepared input, the legible words'
    boxes are darker (ink) than the page around them; in the stored layout they would not be."""
    records, _ = load_ufo(sample_root / "ufo" / "train.json", sample_root / "images", BuildConfig())
    rec = records[0]
    assert Image.open(rec.path).size == (rec.height, rec.width), "the test page is stored turned"
    page = Page(rec.name, rec.path, rec.width, rec.height)
    image = load_input(page, 256).mean(axis=2)
    scale = input_geometry(page, 256)[0]
    inside = np.zeros(image.shape, bool)
    for k in np.flatnonzero(rec.reason == CARE):
        (x0, y0), (x1, y1) = (rec.points[rec.offsets[k]:rec.offsets[k + 1]] * scale).min(0), \
            (rec.points[rec.offsets[k]:rec.offsets[k + 1]] * scale).max(0)
        inside[int(y0):int(y1) + 1, int(x0):int(x1) + 1] = True
    h, w = input_geometry(page, 256)[1]
    assert image[inside].mean() < image[:h, :w][~inside[:h, :w]].mean() - 10


def test_input_geometry_and_padding():
    page = Page("p.jpg", "p.jpg", 1200, 1600)
    scale, (h, w), (ph, pw) = input_geometry(page, 1000)
    assert scale == 1000 / 1600 and (h, w) == (1000, 750) and (ph, pw) == (1024, 768)
    assert ph % STRIDE == 0 and pw % STRIDE == 0


def test_batches_hold_one_shape_each():
    pages = [Page(f"{k}.jpg", "", *size) for k, size in
             enumerate([(1200, 1600), (1600, 1200), (1200, 1600), (900, 1200), (1200, 1600), (500, 500)])]
    batches = plan_batches(pages, 512, 2)
    assert sorted(p.name for b in batches for p in b) == sorted(p.name for p in pages)
    for b in batches:
        assert len(b) <= 2 and len({input_geometry(p, 512)[2] for p in b}) == 1
    assert len(batches) == 4   # three portrait pages of one shape (2 + 1), with the 900 x 1200 one; landscape; square
    for b in plan_batches(pages, [512, 200], 2):   # several sizes: one shape at each
        assert all(len({input_geometry(p, s)[2] for p in b}) == 1 for s in (512, 200))


@pytest.mark.parametrize("suffix", ["jpg", "png"])
def test_one_decode_gives_every_size_what_a_decode_for_it_alone_gives(tmp_path, suffix):
    """load_inputs: the largest size's input is load_input's, bit for bit; a smaller one of a PNG too (decoded whole
    either way); of a JPEG, whose decode for the smaller size alone the DCT reduces (to 1/4 here), within 42 dB of it
    (warped from the whole decode instead, it would be 35 dB off)."""
    rng = np.random.default_rng(0)
    blocks = np.repeat(np.repeat(rng.integers(0, 256, (30, 40, 3), np.uint8), 16, axis=0), 16, axis=1)   # 640 x 480
    Image.fromarray(cv2.GaussianBlur(blocks, (0, 0), 3)).save(tmp_path / f"p.{suffix}", quality=95)
    page = Page(f"p.{suffix}", str(tmp_path / f"p.{suffix}"), 640, 480)
    inputs = load_inputs(page, [128, 512])
    assert set(inputs) == {128, 512} and np.array_equal(inputs[512], load_input(page, 512))
    alone = load_input(page, 128)
    if suffix == "png":
        assert np.array_equal(inputs[128], alone)
    else:
        mse = np.mean((inputs[128].astype(float) - alone.astype(float)) ** 2)
        assert 10 * np.log10(255 ** 2 / max(mse, 1e-9)) >= 42


def test_folder_of_images_uses_exif_upright_sizes(sample_root):
    pages, bad = pages_from_folder(sample_root / "images")
    records, _ = load_ufo(sample_root / "ufo" / "train.json", sample_root / "images", BuildConfig())
    assert bad == [] and [(p.name, p.width, p.height) for p in pages] == [(r.name, r.width, r.height) for r in records]


def test_undecodable_image_is_named_or_skipped(data_copy):
    pages, _ = pages_from_split(data_copy, "train")
    broken = pages[1]
    (data_copy / "images" / broken.name).write_bytes(b"not an image at all")
    cfg = PredictConfig(image_size=128, map_scale=0.5)
    with pytest.raises(DataError, match=broken.name):
        predict(EmptyModel(), pages, cfg, CPU, progress=False)
    results, skipped = predict(EmptyModel(), pages, PredictConfig(128, 0.5, skip_bad=True), CPU, progress=False)
    assert [name for name, _ in skipped] == [broken.name] and broken.name in skipped[0][1]
    assert sorted(results) == sorted(p.name for p in pages if p != broken)


def test_missing_image_is_named(data_copy):
    pages, _ = pages_from_split(data_copy, "train")
    (data_copy / "images" / pages[2].name).unlink()
    with pytest.raises(DataError, match=pages[2].name):
        pages_from_split(data_copy, "train")
    kept, skipped = pages_from_split(data_copy, "train", skip_bad=True)
    assert len(kept) == len(pages) - 1 and skipped[0][0] == pages[2].name


def test_predictions_file_is_ufo_and_replaced_whole(tmp_path):
    quad = np.array([[[1.234, 2], [10, 2], [10, 8], [1.234, 8]]])
    out = tmp_path / "sub" / "pred.json"
    write_predictions(out, {"a.jpg": (quad, np.array([0.912345])), "b.jpg": (np.zeros((0, 4, 2)), np.zeros(0))})
    assert json.loads(out.read_text()) == {"predicted_by": {"program": "east-predict"}, "images": {
        "a.jpg": {"words": {"1": {"points": [[1.23, 2.0], [10.0, 2.0], [10.0, 8.0], [1.23, 8.0]], "score": 0.9123}}},
        "b.jpg": {"words": {}}}}
    write_predictions(out, {}, {"checkpoint": "c.pt"})
    assert json.loads(out.read_text()) == {"predicted_by": {"program": "east-predict", "checkpoint": "c.pt"},
                                           "images": {}}
    assert [p.name for p in out.parent.iterdir()] == ["pred.json"]
    assert out.read_text().startswith('{"predicted_by"'), "the mark comes first: a streaming reader meets it early"


class EmptyModel:
    """Maps of nothing, at map scale 0.5."""

    def __call__(self, x):
        import torch
        return torch.zeros(len(x), 1, x.shape[2] // 2, x.shape[3] // 2), torch.zeros(len(x), 5, x.shape[2] // 2, x.shape[3] // 2)


def run_cli(capsys, *flags) -> tuple[int, str]:
    from east_cache.predict.predict import main
    rc = main([*map(str, flags)])
    return rc, capsys.readouterr().err


def test_cli_names_a_missing_image_before_loading_the_model(data_copy, tmp_path, capsys):
    pages, _ = pages_from_split(data_copy, "train")
    (data_copy / "images" / pages[1].name).unlink()
    rc, err = run_cli(capsys, "--checkpoint", tmp_path / "none.pt", "--data", data_copy, "--split", "train",
                      "--out", tmp_path / "p.json")
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1 and pages[1].name in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("case", ["checkpoint", "folder", "split"])
def test_cli_errors_are_one_line_naming_the_path(case, sample_root, tmp_path, capsys):
    source = {"checkpoint": ["--images", sample_root / "images"], "folder": ["--images", tmp_path / "nowhere"],
              "split": ["--data", sample_root, "--split", "nosuch"]}[case]
    rc, err = run_cli(capsys, "--checkpoint", tmp_path / "none.pt", *source, "--out", tmp_path / "p.json")
    expect = {"checkpoint": "none.pt: no such checkpoint", "folder": "nowhere: not a folder",
              "split": "nosuch.json: UFO file not found"}[case]
    assert rc == 2 and err.count("\n") == 1 and expect in err, err


@pytest.mark.slow
def test_the_score_maps_warn_of_no_word_and_of_most_of_the_map_above_the_threshold(sample_root, tmp_path, capsys,
                                                                                      monkeypatch):
    """A briefly trained model scores every pixel alike: at the default --score-thresh no word (the line names the
    threshold, the highest score and the checkpoint, and does not advise a lower threshold, which would make every
    pixel a candidate); below its scores most of the map is candidates, slow to decode: the line says how many and
    why. A map that singles text out suggests the threshold that leaves 5% of it as candidates; a model that finds
    words on a small share of the map gets no line."""
    import torch

    from east_cache.model.model import EAST
    from east_cache.predict.maps import MapStats, map_warning

    def said(background, text, thresh, words) -> str:
        stats = MapStats()
        score = np.full((64, 64), background, np.float32)
        score[8:12, 8:24] = text   # a word: 1.6% of the map
        stats.add(score, thresh, 0.5)
        return map_warning(stats, thresh, words, 1, 1.0, "ck.pt, epoch 1")

    line = said(0.3, 0.3, 0.8, 0)
    assert line.startswith("0 words in all 1 image(s)") and "--score-thresh 0.8 (the highest: 0.30" in line, line
    assert "about the same everywhere" in line and "trained longer" in line and "ck.pt" in line, line
    assert "--score-thresh 0." not in line.split("(the highest")[1], "no lower threshold advised: " + line
    line = said(0.02, 0.5, 0.8, 0)   # text stands out, below the threshold
    assert "0 words" in line and "--score-thresh 0.03 leaves 5% of the map or less" in line, line
    assert said(0.02, 0.95, 0.8, 3) == "", "words on a small share of the map: nothing to say"
    # through east-predict: a flat map of 0.3 under --score-thresh 0.2, every pixel a candidate
    ck = tmp_path / "run" / "latest.pt"
    ck.parent.mkdir()
    torch.save({"model": EAST(0.5).state_dict(), "config": {"image_size": 128, "map_scale": 0.5}, "epoch": 1}, ck)
    monkeypatch.setattr(EAST, "forward", lambda self, x: (torch.full((len(x), 1, x.shape[2] // 2, x.shape[3] // 2),
                                                                     0.3), torch.full((len(x), 5, x.shape[2] // 2,
                                                                                       x.shape[3] // 2), 4.0)))
    rc, err = run_cli(capsys, "--checkpoint", ck, "--images", sample_root / "images", "--out", tmp_path / "p.json",
                      "--device", "cpu", "--quiet", "--score-thresh", "0.2")
    (line,) = err.splitlines()
    assert rc == 0 and line.startswith(f"warning: {tmp_path / 'p.json'}: 100% of the map pixels ("), line
    assert "scored above --score-thresh 0.2" in line and "undertrained" in line and str(ck) in line, line
    assert "not a lower --score-thresh" in line and json.loads((tmp_path / "p.json").read_text())["images"]