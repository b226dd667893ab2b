"""`east-cache review`: each word classified by the competition DetEval's own matches, the refusals of --out, the
page's records worst first with each image drawn in its own frame (EXIF included), and the page itself in a real
headless Chromium (the slow test): no script error, thumbnails shown, sorting and both filters."""
from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, cli_run, planted_predictions
from PIL import Image, ImageOps

from east_cache.config import BuildConfig
from east_cache.model import review, review_draw as rd, review_page, scoring
from east_cache.tools.sampledata import write_sample_dataset

PAGE = (160, 220)   # (w, h) px of the generated pages: the sample set's image 0 is stored turned, with EXIF 6
TAG = "occlusion"   # a tag the sample set gives some words and that does not make them don't care
RED = 20            # red minus green: the least inside a missed word, whose fill is red at rd.FILL_ALPHA
SAME_PAGE = 12      # grey levels: the most that the picture and the page decoded apart may differ inside words


def box(x0, y0, x1, y1):
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def test_each_word_is_matched_missed_false_or_dont_care_as_deteval_matched_it():
    gt = scoring.Words.from_quads([box(10, 10, 60, 30), box(100, 10, 150, 30), box(10, 100, 60, 120),
                                   box(100, 100, 150, 120)])
    gt = gt._replace(care=np.array([True, True, True, False]))
    det = scoring.Words.from_quads([box(11, 10, 60, 31),                             # word 0
                                    box(200, 200, 240, 220),                         # nothing: false
                                    box(101, 101, 149, 119),                         # the don't-care word
                                    box(10, 100, 34, 120), box(36, 100, 60, 120)])   # word 2, split in two
    counts, gt_state, det_state = review.classify(gt, det)
    assert gt_state.tolist() == [rd.GT_MATCHED, rd.GT_MISSED, rd.GT_MATCHED, rd.GT_DONT_CARE]
    assert det_state.tolist() == [rd.DET_MATCHED, rd.DET_FALSE, rd.DET_IGNORED, rd.DET_MATCHED, rd.DET_MATCHED]
    assert counts == scoring.score({"a": gt}, {"a": det})["per_image"]["a"]   # evaluate's own counts


@pytest.fixture(scope="module")
def review_set(tmp_path_factory):
    """A sample set of 6 pages, its predictions with planted misses and false words (with scores), their names."""
    root = write_sample_dataset(tmp_path_factory.mktemp("set"), n_images=6, words_per_page=12, page_size=PAGE)
    gt = json.loads((root / "ufo" / "train.json").read_text())["images"]
    names = sorted(gt)
    plan = {names[1]: (3, []), names[2]: (0, [0.95, 0.6]), names[3]: (1, [0.3]), names[4]: (99, [])}
    pred = root / "pred.json"
    pred.write_text(json.dumps({"predicted_by": "test", "images": planted_predictions(gt, plan)}))
    return root, pred, names


def run_review(capsys, root: Path, pred: Path, out: Path, *more):
    return cli_run(capsys, "review", "--gt", root / "ufo" / "train.json", "--pred", pred, "--images",
                   root / "images", "--out", out, "--quiet", *more)


def page_data(out: Path) -> dict:
    text = (out / review.PAGE).read_text()
    return json.loads(re.search(r'<script type="application/json" id="review-data">(.*?)</script>', text, re.S)[1])


@pytest.mark.parametrize("where", ["root", "pred", "linked"])
def test_an_out_that_is_or_holds_an_input_or_a_link_to_one_is_refused(review_set, tmp_path, capsys, where):
    root, pred, _ = review_set
    linked = tmp_path / "linked"
    (linked / review.THUMBS).mkdir(parents=True)
    (linked / review.PAGE).symlink_to(root / "ufo" / "train.json")
    (linked / review.THUMBS / "00000_x.jpg").hardlink_to(pred)
    out = {"root": root, "pred": pred, "linked": linked}[where]
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    status, _, err = run_review(capsys, root, pred, out, "--force")
    assert status == 2 and err.startswith("error: --out") and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_a_folder_no_review_wrote_needs_force(review_set, tmp_path, capsys):
    root, pred, names = review_set
    (tmp_path / "notes.txt").write_text("mine")
    status, _, err = run_review(capsys, root, pred, tmp_path)
    assert status == 2 and "--force" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert run_review(capsys, root, pred, tmp_path, "--force", "--format", "jpg")[0] == 0
    assert (tmp_path / "notes.txt").read_text() == "mine" and len(page_data(tmp_path)["images"]) == len(names)
    with Image.open(tmp_path / page_data(tmp_path)["images"][0]["picture"]) as picture:
        assert picture.format == "JPEG"


def test_a_later_review_deletes_only_what_a_review_wrote(review_set, tmp_path, capsys):
    """--force into the user's folder, whose images/ holds the user's own files: the next review (plain, then
    forced) deletes the pictures a review wrote and nothing else; a user's file under a name a review would write
    is refused before anything is deleted."""
    root, pred, names = review_set
    mine = tmp_path / "mine"
    (mine / review.PICTURES).mkdir(parents=True)
    (mine / review.PICTURES / "holiday.png").write_bytes(b"the user's photo")
    assert run_review(capsys, root, pred, mine, "--force")[0] == 0
    status, _, err = run_review(capsys, root, pred, mine)
    assert status == 2 and "holiday.png" in err and "--force" in err, err
    first = json.loads((mine / review.MARKER).read_text())["files"]
    assert run_review(capsys, root, pred, mine, "--force", "--format", "jpg")[0] == 0
    assert (mine / review.PICTURES / "holiday.png").read_bytes() == b"the user's photo"
    assert not any((mine / f).exists() for f in first if f.endswith(".png")), "the last review's pictures stay"
    clash = mine / page_data(mine)["images"][0]["picture"]
    (mine / review.MARKER).write_text(json.dumps({"files": ["../../etc/passwd", review.PAGE]}))
    status, _, err = run_review(capsys, root, pred, mine, "--force", "--format", "jpg")
    assert status == 2 and clash.name in err and clash.exists(), err


def test_the_page_lists_images_worst_first_drawn_in_their_own_frame(review_set, tmp_path, capsys):
    root, pred, names = review_set
    out = tmp_path / "review"
    status, printed, _ = run_review(capsys, root, pred, out, "--size", "200")
    assert status == 0 and "hmean" in printed
    data = page_data(out)
    gt = scoring.load_ground_truth(root / "ufo" / "train.json", BuildConfig())
    per_image = scoring.score(gt, scoring.load_predictions(pred, gt))["per_image"]
    order = sorted(names, key=lambda n: (per_image[n].hmean, per_image[n].recall, n))
    assert [r["name"] for r in data["images"]] == order
    assert order[0] == names[4] and data["images"][0]["h"] == 0.0           # every word missed: worst
    assert [(r["missed"], r["false"]) for r in data["images"] if r["name"] == names[3]] == [(1, 1)]
    assert data["scores"] is True and data["tags"][TAG][0] > 0
    first = next(r for r in data["images"] if r["name"] == names[0])      # stored turned, EXIF orientation 6
    assert first["note"] == "EXIF orientation applied"
    for r in data["images"]:
        with Image.open(out / r["picture"]) as png, Image.open(out / r["thumb"]) as thumb:
            assert png.size[1] > r["size"][1] and r["size"] == [round(PAGE[0] * 200 / PAGE[1]), 200]
            assert thumb.size == tuple(r["tsize"]) and max(thumb.size) <= review.THUMB_SIDE
    with Image.open(out / first["picture"]) as png:   # the picture without its legend strip
        png.crop((0, 0, *first["size"])).save(tmp_path / "first.png")
    assert shows_the_upright_page(tmp_path / "first.png", root / "images" / names[0], gt[names[0]], 200 / PAGE[1])
    worst = data["images"][0]   # every word missed: filled red where the words are
    with Image.open(out / worst["picture"]) as png:
        rgb = np.asarray(png.convert("RGB"), np.float64)
    redness = inner_boxes(rgb[..., 0] - rgb[..., 1], gt[names[4]], 200 / PAGE[1])
    assert min(redness) > RED and np.median(rgb[..., 0] - rgb[..., 1]) < RED / 4
    again = run_review(capsys, root, pred, out)   # a review's own folder is replaced without --force
    assert again[0] == 0 and len(list((out / review.PICTURES).iterdir())) == len(names)


def shows_the_upright_page(png: Path, source: Path, words: scoring.Words, k: float) -> bool:
    """The middle of every legible word shows what the page turned upright by its EXIF orientation shows there:
    the picture is in the words' frame."""
    with Image.open(png) as im, Image.open(source) as src:
        picture = np.asarray(im.convert("L"), np.float64)
        upright = ImageOps.exif_transpose(src).convert("L").resize((im.width, im.height), Image.BILINEAR)
    upright = np.asarray(upright, np.float64)
    return float(np.mean(inner_boxes(np.abs(picture - upright), words, k))) < SAME_PAGE


def inner_boxes(values: np.ndarray, words: scoring.Words, k: float) -> list[float]:
    """The mean of values (H, W) over the middle of each legible word: its enclosing box (frame px times k)
    shrunk to a third, inside any outline."""
    means = []
    for i in np.flatnonzero(words.care):
        q = words.points[words.offsets[i]:words.offsets[i + 1]] * k
        lo, hi = q.min(0), q.max(0)
        (x0, y0), (x1, y1) = np.rint(lo + (hi - lo) / 3).astype(int), np.rint(hi - (hi - lo) / 3).astype(int)
        means.append(float(values[y0:y1 + 1, x0:x1 + 1].mean()))
    return means


def test_a_missing_image_is_named_or_with_skip_bad_drawn_on_a_grey_page(review_set, tmp_path, capsys):
    root, pred, names = review_set
    entries = json.loads((root / "ufo" / "train.json").read_text())["images"]
    gt = tmp_path / "gt.json"   # the set's ground truth and one image that is not in --images
    gt.write_text(json.dumps({"images": {**entries, "ghost.jpg": entries[names[1]]}}))
    args = ("review", "--gt", gt, "--pred", pred, "--images", root / "images", "--quiet")
    status, _, err = cli_run(capsys, *args, "--out", tmp_path / "a")
    assert status == 2 and "'ghost.jpg'" in err and "--skip-bad" in err and err.count("\n") == 1
    assert not (tmp_path / "a").exists()
    assert cli_run(capsys, *args, "--out", tmp_path / "b", "--skip-bad")[0] == 0
    ghost = next(r for r in page_data(tmp_path / "b")["images"] if r["name"] == "ghost.jpg")
    assert ghost["note"].startswith("not drawn") and ghost["missed"] > 0
    assert (tmp_path / "b" / ghost["picture"]).is_file()


def test_a_score_that_is_no_number_is_an_error_naming_the_word(review_set, tmp_path, capsys):
    root, pred, names = review_set
    bad = json.loads(pred.read_text())
    bad["images"][names[0]]["words"]["2"]["score"] = "high"
    (tmp_path / "pred.json").write_text(json.dumps(bad))
    status, _, err = run_review(capsys, root, tmp_path / "pred.json", tmp_path / "out")
    assert status == 2 and f"image {names[0]!r}, word '2'" in err and '"score"' in err and err.count("\n") == 1


def test_help_shows_an_example(capsys):
    status, out, _ = cli_run(capsys, "review", "--help")
    assert status == 0 and "example:" in out and "east-cache review --gt" in out


def test_the_page_template_ships_with_the_package():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f"{pkg.replace('.', '/')}/{pattern}" for pkg, patterns in data.items() for pattern in patterns}
    assert f"east_cache/model/{review_page.TEMPLATE}" in shipped
    assert (REPO / "east_cache" / "model" / review_page.TEMPLATE).is_file()


# --- the page in a real browser -----------------------------------------------------------------------------------

def browser_or_skip():
    """Headless Chromium driven by the system's chromedriver (selenium is never left to download one)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[dev])")
    chrome, driver = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not (chrome and driver):
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1200"):
        options.add_argument(flag)
    options.binary_location = chrome
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def visible_names(d) -> list[str]:
    return d.execute_script("return [...document.querySelectorAll('#grid .card')].map(c => c.dataset.name)")


def choose(d, element_id: str, value) -> None:
    """Set a control as a user would leave it, and tell the page (the event a user's change fires)."""
    event = "input" if element_id == "score" else "change"
    d.execute_script(f"const e = document.getElementById('{element_id}'); e.value = arguments[0]; "
                     f"e.dispatchEvent(new Event('{event}'))", value)


def errors(d) -> list[str]:
    return [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.slow
def test_the_page_in_a_headless_browser(review_set, tmp_path, capsys):
    root, pred, names = review_set
    d = browser_or_skip()
    try:
        out = tmp_path / "review"
        assert run_review(capsys, root, pred, out)[0] == 0
        data = page_data(out)
        d.get((out / review.PAGE).as_uri())
        assert errors(d) == []
        d.save_screenshot(str(tmp_path / "page.png"))
        shown = visible_names(d)
        assert shown == [r["name"] for r in data["images"]] and shown[0] == names[4]   # worst first
        loaded = d.execute_script(
            "const imgs = [...document.querySelectorAll('#grid .card img')].filter(i => "
            "i.getBoundingClientRect().top < window.innerHeight);"
            "return Promise.all(imgs.map(i => i.decode().catch(() => null)))"
            ".then(() => imgs.map(i => i.naturalWidth));")
        assert loaded and all(w > 0 for w in loaded)

        choose(d, "sort", "name")
        assert visible_names(d) == sorted(names)
        choose(d, "sort", "false")
        assert visible_names(d)[0] == names[2]                      # two planted false words
        gt = json.loads((root / "ufo" / "train.json").read_text())["images"]
        tagged = {n for n, e in gt.items() if any(TAG in w.get("tags", []) for w in e["words"].values())}
        choose(d, "tag", TAG)
        assert set(visible_names(d)) == tagged and 0 < len(tagged) < len(names)
        d.save_screenshot(str(tmp_path / "tag_filter.png"))
        choose(d, "tag", "")
        choose(d, "score", 0.5)
        assert visible_names(d) == [names[2]]                       # false words scored 0.95 and 0.6
        choose(d, "score", 0.2)
        assert set(visible_names(d)) == {names[2], names[3]}        # and the one scored 0.3
        d.save_screenshot(str(tmp_path / "score_filter.png"))

        first = visible_names(d)[0]
        d.find_element("css selector", "#grid .card a").click()    # the viewer shows that image's PNG
        hidden, width, alt = d.execute_script(
            "const i = document.getElementById('viewer-img');"
            "return i.decode().then(() => [document.getElementById('viewer').hidden, i.naturalWidth, i.alt])")
        with Image.open(out / next(r["picture"] for r in data["images"] if r["name"] == first)) as png:
            assert (hidden, width, alt) == (False, png.size[0], first)
        d.save_screenshot(str(tmp_path / "viewer.png"))
        assert errors(d) == []

        unscored = tmp_path / "unscored.json"   # predictions without a per-word score: no score filter
        unscored.write_text(json.dumps({"images": planted_predictions(gt, {names[2]: (0, [None])}, score=None)}))
        assert run_review(capsys, root, unscored, tmp_path / "unscored")[0] == 0
        d.get((tmp_path / "unscored" / review.PAGE).as_uri())
        assert not d.find_element("id", "score-box").is_displayed()
        assert d.find_element("id", "score-none").is_displayed()
        assert len(visible_names(d)) == len(names) and errors(d) == []
    finally:
        d.quit()
