"""`python -m preprocess bench` and `show`: the table a sweep prints, and PNGs that draw what the cache holds."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import small_config
from PIL import Image

from east_cache.reader import CacheDataset
from east_cache.cli import main
from east_cache.ingest.ufo import load_splits
from east_cache.build.run import build_cache
from east_cache.inspect.draw import GAP, SCORE_ALPHA, figure_size, panel_side


@pytest.fixture(scope="module")
def cache(sample_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench_show") / "c"
    build_cache(small_config(), [sample_root], out, jobs=1, quiet=True)
    return out


@pytest.mark.slow
def test_bench_prints_a_row_per_setting_a_memcpy_row_and_a_recommendation(cache, capsys):
    assert main(["bench", str(cache), "--workers", "0,1", "--batch-sizes", "2", "--batches", "3"]) == 0
    out = capsys.readouterr().out
    sweep = out.split("train.py's reading beside")[0]   # the first table; test_bench_loops.py reads the second
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in sweep.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert header[:2] == ["workers", "batch"] and len(header) == 8
    settings = [r for r in body if r[0].isdigit()]
    assert [(int(r[0]), int(r[1])) for r in settings] == [(0, 2), (1, 2)]
    memcpy = [r for r in body if r[0].startswith("memcpy")]
    assert len(memcpy) == 1 and len(body) == 3
    for r in settings + memcpy:
        numbers = [float(c) for c in r[2:] if c not in ("n/a", "-")]
        assert len(numbers) >= 3 and all(x > 0 for x in numbers), r
    assert "fadvise" in out
    assert "Recommendation: train.py --workers " in out


@pytest.mark.slow
def test_bench_reads_a_zarr_cache(sample_root, tmp_path, capsys):
    build_cache(small_config(strategy="chunked", chunk_size=4, crop="build"), [sample_root], tmp_path / "z", jobs=1, quiet=True,
                file_format="zarr")
    assert main(["bench", str(tmp_path / "z"), "--workers", "0", "--batch-sizes", "2", "--batches", "2"]) == 0
    assert "Recommendation: train.py --workers 0 " in capsys.readouterr().out


def test_bench_rejects_a_bad_list(cache, capsys):
    with pytest.raises(SystemExit):
        main(["bench", str(cache), "--batch-sizes", "0"])
    assert "each an integer >= 1" in capsys.readouterr().err


def overlay_pixels(panel: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Pixels where the PNG shows the raw crop blended with red, i.e. where the score overlay was drawn."""
    raw = raw.astype(np.float32)
    blend = raw * (1 - SCORE_ALPHA) + np.array([255, 0, 0], np.float32) * SCORE_ALPHA
    panel = panel.astype(np.float32)
    return (np.abs(panel - blend).max(-1) <= 1) & (np.abs(panel - raw).max(-1) > 1)


def test_show_draws_the_score_only_inside_legible_words(cache, tmp_path):
    ds = CacheDataset(cache, check_stale=False)
    s = ds.config.input_size
    drawn = 0
    for i in range(len(ds)):
        for v in range(ds.config.variants):
            png = tmp_path / f"{i}-{v}.png"
            assert main(["show", str(cache), str(i), "--variant", str(v), "-o", str(png)]) == 0
            fig = np.asarray(Image.open(png).convert("RGB"))
            assert (fig.shape[1], fig.shape[0]) == figure_size(s)
            assert fig.shape[1] == s + GAP + 2 * (panel_side(s) + GAP) and fig.shape[0] >= s
            ds.set_epoch((v - int(ds.offsets[i])) % ds.config.variants)   # the epoch at which item i is variant v
            raw = np.transpose(ds[i]["image"], (1, 2, 0))
            red = overlay_pixels(fig[:s, :s], raw)
            points, offsets, care = ds.quads(i, v)
            legible = np.zeros((s, s), np.uint8)
            for k in np.flatnonzero(care):
                cv2.fillPoly(legible, [np.rint(points[offsets[k]:offsets[k + 1]]).astype(np.int32)], 1)
            near = cv2.dilate(legible, np.ones((5, 5), np.uint8)) > 0   # within 2 px
            assert not (red & ~near).any(), f"image {i} variant {v}: score drawn outside legible words"
            drawn += int(red.sum())
    assert drawn > 0, "no score overlay was found at all: the test would prove nothing"


def test_show_names_an_unknown_sample(cache, tmp_path, capsys):
    assert main(["show", str(cache), "99", "-o", str(tmp_path / "x.png")]) == 2
    assert "holds images 0..4" in capsys.readouterr().err


def test_show_source_draws_the_page_and_its_sample(sample_root, tmp_path):
    name = load_splits([sample_root], "train", small_config())[0][0].name
    png = tmp_path / "page.png"
    assert main(["show", "--source", str(sample_root), "--name", name, "--input-size", "96", "-o", str(png)]) == 0
    w, h = Image.open(png).size
    assert w > figure_size(96)[0] and h >= figure_size(96)[1]
