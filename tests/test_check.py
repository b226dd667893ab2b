"""`east-cache check` and the train/val leak warning: duplicates within and across roots and splits (exact bytes,
resized and re-encoded copies), distinct images left apart, every anomaly kind on a crafted UFO file, the
histogram PNG, exit statuses, and the build's warning on a planted train0/val0 copy with its hashes kept."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import cli_run, train_run
from PIL import Image, ImageOps

from east_cache.config import BuildConfig
from east_cache.store.manifest import Manifest
from east_cache.tools import phash
from east_cache.tools.anomalies import KINDS, self_crossing
from east_cache.tools.leak import warn_run
from east_cache.tools.phash import NEAR_DISTANCE, dct_hash
from east_cache.tools.sampledata import write_sample_dataset

SIZE = (240, 180)   # px (width, height) of the test images
BUILD = ["--image-size", "96", "--input-size", "64", "--variants", "1", "--jobs", "1"]


def scene(seed: int, size=SIZE) -> np.ndarray:
    """A distinct photo-like RGB image: colour fields at three scales and a few blocks."""
    rng = np.random.default_rng(seed)
    w, h = size
    img = np.zeros((h, w, 3), np.float32) + rng.uniform(60, 190, 3)
    for cells, amp in ((3, 70), (8, 40), (24, 20)):
        img += cv2.resize(rng.uniform(-amp, amp, (cells, cells, 3)).astype(np.float32), (w, h),
                          interpolation=cv2.INTER_CUBIC)
    for _ in range(4):
        x, y = int(rng.integers(0, w - 30)), int(rng.integers(0, h - 30))
        img[y:y + int(rng.integers(15, h // 2)), x:x + int(rng.integers(15, w // 2))] = rng.uniform(0, 255, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def word(x, y, w=60, h=20, **extra) -> dict:
    return {"points": [[x, y], [x + w, y], [x + w, y + h], [x, y + h]], **extra}


def write_root(root: Path, splits: dict[str, dict[str, np.ndarray | bytes]], entries: dict | None = None) -> Path:
    """root/ufo/{split}.json and root/images/: each image (pixels saved as JPEG q90, or a file's bytes) with two
    clean words, or the entry given in entries."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "ufo").mkdir(exist_ok=True)
    for split, images in splits.items():
        ufo = {}
        for name, image in images.items():
            path = root / "images" / name
            if isinstance(image, bytes):
                path.write_bytes(image)
            elif not path.exists():
                Image.fromarray(image).save(path, quality=90)
            with Image.open(path) as im:
                w, h = im.size
            ufo[name] = (entries or {}).get(name) or {"img_w": w, "img_h": h,
                                                       "words": {"1": word(10, 10), "2": word(80, 60, 90, 40)}}
        (root / "ufo" / f"{split}.json").write_text(json.dumps({"images": ufo}))
    return root


def jpeg_bytes(image: np.ndarray, quality: int) -> bytes:
    import io
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def test_exact_and_near_copies_are_paired_across_roots_and_splits_and_distinct_images_are_not(tmp_path, capsys):
    a = write_root(tmp_path / "a", {"train": {f"a{i}.jpg": scene(i) for i in range(6)}})
    copy = (a / "images" / "a1.jpg").read_bytes()
    smaller = cv2.resize(scene(2), (SIZE[0] * 3 // 4, SIZE[1] * 3 // 4), interpolation=cv2.INTER_AREA)
    write_root(tmp_path / "b", {"val": {"b_exact.jpg": copy, "b_near.jpg": jpeg_bytes(smaller, 70),
                                        **{f"b{i}.jpg": scene(100 + i) for i in range(4)}},
                                "extra": {"b3.jpg": scene(103), "b_self.jpg": jpeg_bytes(scene(7), 60)}})
    (tmp_path / "b" / "images" / "b_self2.jpg").write_bytes(jpeg_bytes(scene(7), 95))
    ufo = json.loads((tmp_path / "b" / "ufo" / "extra.json").read_text())
    ufo["images"]["b_self2.jpg"] = ufo["images"]["b_self.jpg"]
    (tmp_path / "b" / "ufo" / "extra.json").write_text(json.dumps(ufo))

    status, out, err = cli_run(capsys, "check", "--data", a, "--data", tmp_path / "b", "--out", tmp_path / "rep")
    assert status == 1, err
    pairs = json.loads((tmp_path / "rep" / "report.json").read_text())["duplicates"]
    found = {(p["kind"], p["a"]["name"], p["b"]["name"], p["leak"]) for p in pairs}
    assert found == {("exact", "a1.jpg", "b_exact.jpg", "train/val"), ("near", "a2.jpg", "b_near.jpg", "train/val"),
                     ("near", "b_self.jpg", "b_self2.jpg", "")}, found
    assert all(p["distance"] <= NEAR_DISTANCE for p in pairs)
    assert "LEAK train/val exact (0): " in out and "b3.jpg" not in out   # listed in two splits: one file, not a pair
    rows = list(csv.DictReader((tmp_path / "rep" / "duplicates.csv").open()))
    assert len(rows) == 3 and rows[0]["leak"] == "train/val"


def test_each_anomaly_kind_is_found_on_a_crafted_ufo_file(tmp_path, capsys):
    images = {f"{k}.jpg": scene(i) for i, k in enumerate(["outside", "sliver", "tiny", "bowtie", "poly", "small",
                                                           "empty", "size", "invalid", "clean"])}
    def e(*ws, **kw):
        return {"img_w": SIZE[0], "img_h": SIZE[1], "words": {str(k + 1): w for k, w in enumerate(ws)}, **kw}
    entries = {
        "outside.jpg": e(word(10, 10), word(SIZE[0] - 20, 50, 40, 20)),
        "sliver.jpg": e(word(10, 10), {"points": [[10, 60], [110, 60], [110, 60.4], [10, 60.4]]}),
        "tiny.jpg": e(word(10, 10), {"points": [[50, 50], [50.5, 50], [50.5, 50.5], [50, 50.5]]}),
        "bowtie.jpg": e(word(10, 10), {"points": [[10, 60], [100, 90], [100, 60], [10, 80]]}),
        "poly.jpg": e(word(10, 10), {"points": [[10, 60], [50, 55], [90, 60], [90, 80], [10, 80]]}),
        "small.jpg": e(word(10, 10), word(100, 100, 3, 2)),
        "empty.jpg": e(),
        "size.jpg": {**e(word(10, 10)), "img_w": SIZE[1], "img_h": SIZE[0] + 7},
        "invalid.jpg": e(word(10, 10), {"points": [[1, "x"], [2, 3], [4, 5], [6, 7]]}),
        "missing.jpg": e(word(10, 10)),
    }
    root = write_root(tmp_path / "r", {"train": images}, entries)
    ufo = json.loads((root / "ufo" / "train.json").read_text())
    ufo["images"]["missing.jpg"] = entries["missing.jpg"]   # an entry whose image file is not there
    (root / "ufo" / "train.json").write_text(json.dumps(ufo))

    status, out, err = cli_run(capsys, "check", "--data", root, "--out", tmp_path / "rep")
    assert status == 1, err
    found = {(r["kind"], r["image"], r["word"]) for r in
             json.loads((tmp_path / "rep" / "report.json").read_text())["anomalies"]}
    expected = {("outside", "outside.jpg", "2"), ("degenerate", "sliver.jpg", "2"), ("degenerate", "tiny.jpg", "2"),
                ("self-crossing", "bowtie.jpg", "2"), ("polygon", "poly.jpg", "2"), ("small", "small.jpg", "2"),
                ("no words", "empty.jpg", ""), ("size", "size.jpg", ""), ("invalid", "invalid.jpg", "2"),
                ("unreadable", "missing.jpg", "")}
    assert found == expected, found ^ expected
    assert {k for k, _, _ in found} == set(KINDS)
    assert "clean.jpg" not in out and "anomalies: 10 (" in out


def test_the_histogram_png_is_written_readable_and_counts_every_kept_word(tmp_path, capsys):
    root = write_root(tmp_path / "r", {"train": {f"i{k}.jpg": scene(k) for k in range(3)}})
    status, out, _ = cli_run(capsys, "check", "--data", root, "--out", tmp_path / "rep")
    assert status == 0, out
    figure = cv2.imread(str(tmp_path / "rep" / "words.png"))
    assert figure is not None and figure.shape[0] > 200 and figure.shape[1] > 800
    assert (figure < 128).any() and (figure[..., 0] > figure[..., 2] + 60).any()   # text and the blue bars
    hist = json.loads((tmp_path / "rep" / "report.json").read_text())["histograms"]
    assert sum(hist["height_px"]["counts"]) == 6 == sum(hist["angle_deg"]["counts"])
    assert hist["height_px"]["counts"][4] == 3 and hist["height_px"]["counts"][5] == 3   # 20 px and 40 px tall
    assert "duplicates: 0 pair(s)" in out and "anomalies: 0" in out


@pytest.mark.parametrize("flags, says", [
    (["--split", "nope"], "ufo/nope.json: UFO file not found"),
    (["--out", "{root}/ufo"], "read as splits"),
    (["--out", "{root}/ufo/reports"], "read as splits"),
    (["--distance", "64"], "--distance: 64: must be an integer in [0, 63]"),
])
def test_user_mistakes_are_one_error_line_and_status_2(tmp_path, capsys, flags, says):
    root = write_root(tmp_path / "r", {"train": {"i.jpg": scene(0)}})
    status, out, err = cli_run(capsys, "check", "--data", root, *[f.format(root=root) for f in flags])
    assert status == 2 and err.startswith("error: ") and says in err and err.count("\n") == 1, err
    assert not (root / "ufo" / "report.json").exists() and not (root / "ufo" / "reports").exists()


def test_a_report_beside_the_inputs_is_written_and_they_stay(tmp_path, capsys):
    """An --out inside a root overwrites nothing there: allowed, and the root's files are as they were."""
    root = write_root(tmp_path / "r", {"train": {"i.jpg": scene(0)}})
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    status, _, err = cli_run(capsys, "check", "--data", root, "--out", root / "images")
    assert status in (0, 1) and (root / "images" / "report.json").is_file(), err
    assert all(p.read_bytes() == b for p, b in before.items())


def test_a_folder_that_is_no_root_is_refused(tmp_path, capsys):
    status, _, err = cli_run(capsys, "check", "--data", tmp_path)
    assert status == 2 and "no ufo/ folder" in err


def test_help_names_the_exit_statuses_and_an_example(capsys):
    status, out, _ = cli_run(capsys, "check", "--help")
    assert status == 0 and "east-cache check --data" in out and "Exit status: 0 when nothing was found, 1" in out


def test_self_crossing_tells_a_bow_tie_from_a_quad_and_a_concave_polygon():
    assert self_crossing([(0, 0), (10, 10), (10, 0), (0, 10)])
    assert not self_crossing([(0, 0), (10, 0), (10, 10), (0, 10)])
    assert not self_crossing([(0, 0), (10, 0), (5, 3), (10, 10), (0, 10)])
    assert self_crossing([(0, 0), (10, 0), (10, 10), (12, -2), (0, 10)])


def test_the_dct_hash_keeps_resized_copies_close_and_distinct_images_far():
    gray = lambda im: cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)   # noqa: E731
    h = [dct_hash(gray(scene(s))) for s in range(8)]
    half = dct_hash(gray(cv2.resize(scene(0), (SIZE[0] // 2, SIZE[1] // 2), interpolation=cv2.INTER_AREA)))
    assert phash.distance(h[0], half) <= NEAR_DISTANCE // 2
    assert min(phash.distance(h[i], h[j]) for i in range(8) for j in range(i + 1, 8)) > NEAR_DISTANCE


def planted_folds(root: Path) -> Path:
    """train0 and val0 sharing three images: val0 lists train0's t2.jpg too, its v_copy.jpg is t1.jpg re-encoded at
    quality 70, its v_same.jpg t0.jpg's bytes."""
    train = {f"t{i}.jpg": scene(i) for i in range(3)}
    write_root(root, {"train0": train})
    write_root(root, {"val0": {"v0.jpg": scene(50), "v_copy.jpg": jpeg_bytes(scene(1), 70),
                               "v_same.jpg": (root / "images" / "t0.jpg").read_bytes(), "t2.jpg": scene(2)}})
    return root


def test_the_build_warns_about_a_planted_train0_val0_copy_and_keeps_the_hashes(tmp_path, capsys, monkeypatch):
    data, cache = planted_folds(tmp_path / "d"), tmp_path / "cache"
    status, _, err = cli_run(capsys, "build", "--data", data, "--split", "train0", "--out", cache, *BUILD)
    assert status == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith("warning: validation split")]
    assert "val0 shares 3 image(s) with training split train0" in line and "t2.jpg (listed in both)" in line, line
    assert "v_copy.jpg = t1.jpg (looks alike, distance " in line and "v_same.jpg = t0.jpg (same bytes)" in line
    assert (cache / phash.CACHE_FILE).is_file()

    def no_hashing(path):
        raise AssertionError(f"hashed {path} again")
    monkeypatch.setattr(phash, "hash_file", no_hashing)   # an up-to-date rebuild reads the kept hashes
    status, _, err = cli_run(capsys, "build", "--data", data, "--split", "train0", "--out", cache, *BUILD)
    assert status == 0 and "v_copy.jpg = t1.jpg" in err, err
    monkeypatch.undo()

    warned = []
    warn_run(Manifest.load(cache), cache, data, "val0", warned.append)   # east-train --val-data d --val-split val0
    assert len(warned) == 1 and "v_copy.jpg = t1.jpg" in warned[0]


def test_the_build_says_nothing_when_the_validation_split_is_apart(tmp_path, capsys):
    data = write_root(tmp_path / "d", {"train": {f"t{i}.jpg": scene(i) for i in range(3)},
                                       "val": {f"v{i}.jpg": scene(20 + i) for i in range(2)}})
    status, _, err = cli_run(capsys, "build", "--data", data, "--out", tmp_path / "c", *BUILD)
    assert status == 0 and "validation split" not in err, err
    warned = []
    warn_run(Manifest.load(tmp_path / "c"), tmp_path / "c", data, "val", warned.append)
    assert not warned


def test_a_train_split_without_a_validation_partner_is_not_compared(tmp_path):
    from east_cache.tools.leak import build_warning, validation_split
    assert [validation_split(s) for s in ("train", "train3", "train_a", "all")] == ["val", "val3", "val_a", None]
    data = planted_folds(tmp_path / "d")
    assert build_warning([data], "train1", {"t1.jpg": str(data / "images" / "t1.jpg")}, tmp_path) is None
    assert BuildConfig().min_area > 0


def test_a_copy_leaks_only_across_a_fold_s_own_train_val_boundary():
    from east_cache.tools.check import leak
    folds = lambda k, n=3: [f"val{k}"] + [f"train{j}" for j in range(n) if j != k]   # noqa: E731  split's lists
    # a copy in val0 and one in val1: each trains the other's fold, a leak in both
    assert leak(folds(0), folds(1)) == "train0/val0, train1/val1"
    assert leak(folds(0), folds(0)) == ""              # both in val0: neither trains fold 0
    assert leak(["train"], ["val"]) == "train/val" and leak(["train", "val"], ["train", "val"]) == "train/val"
    assert leak(["train0"], ["val1"]) == "" and leak(["test"], ["val"]) == ""


def test_a_val_split_that_does_not_parse_warns_after_the_build_and_fails_nothing(tmp_path, capsys):
    data = write_root(tmp_path / "d", {"train": {f"t{i}.jpg": scene(i) for i in range(2)}})
    (data / "ufo" / "val.json").write_text('{"images": {')
    status, _, err = cli_run(capsys, "build", "--data", data, "--out", tmp_path / "c", *BUILD)
    assert status == 0 and "warning: the train/val check was skipped: " in err and "val.json" in err, err


@pytest.mark.slow
def test_east_train_warns_about_its_validation_split(tmp_path, capsys):
    data, cache = planted_folds(tmp_path / "d"), tmp_path / "cache"
    assert cli_run(capsys, "build", "--data", data, "--split", "train0", "--out", cache, "--quiet", *BUILD)[0] == 0
    train_run(cache, tmp_path / "run", "--val-data", str(data), "--val-split", "val0", "--max-steps", "1",
              "--epochs", "1", "--device", "cpu")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning: validation split")]
    assert "val0 shares 3 image(s) with training split train0" in line and "v_copy.jpg = t1.jpg" in line


def test_a_near_pair_that_leaks_in_two_folds_is_named_under_each_with_real_paths(tmp_path, capsys):
    """Two folds: a.jpg validates fold 0 and trains fold 1, its re-encoded copy b.jpg the other way round: the pair
    leaks in both folds and the summary says so for each; every printed image path is the file itself (images/
    included), as report.json has it."""
    root = write_root(tmp_path / "d", {"val0": {"a.jpg": scene(1)}, "train1": {"a.jpg": scene(1)},
                                       "val1": {"b.jpg": jpeg_bytes(scene(1), 60)},
                                       "train0": {"b.jpg": jpeg_bytes(scene(1), 60)}})
    status, out, err = cli_run(capsys, "check", "--data", root, "--out", tmp_path / "rep")
    assert status == 1, err
    (p,) = json.loads((tmp_path / "rep" / "report.json").read_text())["duplicates"]
    assert p["leak"] == "train0/val0, train1/val1", p
    assert "1 LEAK(S) across a train/val split (train0/val0: 1, train1/val1: 1)" in out, out
    (line,) = [x for x in out.splitlines() if "LEAK train0/val0, train1/val1 " in x]
    printed = [w for w in line.split() if w.endswith(".jpg")]
    assert printed == [p["a"]["path"], p["b"]["path"]] and all(Path(w).is_file() for w in printed), line
    assert all("/images/" in w for w in printed), line


@pytest.mark.slow
def test_check_finds_resized_reencoded_and_cropped_copies_at_its_default_distance_and_no_distinct_pages(
        tmp_path, capsys):
    """Distinct document pages are never paired; a half-size copy, a JPEG re-encoding at quality 40 and copies
    cropped by 2% on every side (several bits away from their originals) are all found at the default --distance:
    a default much lower (2 bits) would miss the crops."""
    pages = write_sample_dataset(tmp_path / "pages", n_images=8, words_per_page=30, page_size=(300, 400), seed=3)
    names = sorted(json.loads((pages / "ufo" / "train.json").read_text())["images"])
    image = {n: np.asarray(ImageOps.exif_transpose(Image.open(pages / "images" / n)).convert("RGB")) for n in names}

    def cropped(x, f=0.02):
        h, w = x.shape[:2]
        return x[int(h * f):h - int(h * f), int(w * f):w - int(w * f)]
    h, w = image[names[2]].shape[:2]
    copies = {"resized.jpg": (names[2], jpeg_bytes(cv2.resize(image[names[2]], (w // 2, h // 2),
                                                              interpolation=cv2.INTER_AREA), 90)),
              "reencoded.jpg": (names[3], jpeg_bytes(image[names[3]], 40)),
              "cropped1.jpg": (names[1], jpeg_bytes(cropped(image[names[1]]), 90)),
              "cropped4.jpg": (names[4], jpeg_bytes(cropped(image[names[4]]), 90))}
    root = write_root(tmp_path / "copies", {"val": {name: data for name, (_, data) in copies.items()}})
    status, _, err = cli_run(capsys, "check", "--data", pages, "--data", root, "--out", tmp_path / "rep")
    assert status == 1, err
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["distance"] == NEAR_DISTANCE
    found = {(p["a"]["name"], p["b"]["name"]) for p in report["duplicates"]}
    assert found == {(original, copy) for copy, (original, _) in copies.items()}, found
    crops = [p["distance"] for p in report["duplicates"] if p["b"]["name"].startswith("cropped")]
    assert min(crops) > 2, crops   # what makes the default matter
    status, _, err = cli_run(capsys, "check", "--data", pages, "--out", tmp_path / "alone")
    assert not json.loads((tmp_path / "alone" / "report.json").read_text())["duplicates"], "distinct pages paired"
