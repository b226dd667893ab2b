"""`convert`: tiny files in each source format, written here, converted, then built into a cache."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import small_config
from PIL import Image

from east_cache.cli import main
from east_cache.convert.rules import orient, start_top_left
from east_cache.convert.run import convert, describe
from east_cache.errors import DataError, UsageError
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest

W, H = 160, 120
TL, TR, BR, BL = (10, 10), (70, 10), (70, 30), (10, 30)   # a clockwise quad, area 1200
QUAD = [TL, TR, BR, BL]


def flat(points) -> list:
    return [v for p in points for v in p]


def csv(points) -> str:
    return ",".join(str(v) for v in flat(points))


def image(path: Path, size=(W, H), orientation: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    Image.new("RGB", size, (200, 200, 200)).save(path, exif=exif)
    return path


def ufo(root: Path, split: str = "train") -> dict:
    return json.loads((root / "ufo" / f"{split}.json").read_text())["images"]


def built(roots, tmp_path: Path, **over) -> dict:
    """The build's ingest summary of the converted roots, as the cache's manifest records it."""
    out = tmp_path / "cache"
    build_cache(small_config(**over), [Path(r) for r in roots], out, jobs=1, quiet=True)
    return Manifest.load(out).ingest


def icdar2015_set(src: Path, bom: bool = True) -> Path:
    image(src / "img" / "img_1.jpg")
    image(src / "img" / "img_2.png")
    lines = [f"{csv(QUAD)},Hello, world", f"{csv([(80, 40), (150, 40), (150, 70), (80, 70)])},###",
             f"{csv([(5, 80), (60, 80), (60, 110), (5, 110)])},ÄÖ 12"]
    (src / "gt").mkdir(parents=True)
    (src / "gt" / "gt_img_1.txt").write_bytes((b"\xef\xbb\xbf" if bom else b"") + "\r\n".join(lines).encode())
    (src / "gt" / "gt_img_2.txt").write_text(f"{csv(QUAD)},second\n\n")
    return src


def test_icdar2015_round_trip_with_bom_commas_and_illegible(tmp_path):
    src = icdar2015_set(tmp_path / "src")
    s = convert("icdar2015", src / "gt", tmp_path / "root", images=src / "img")
    assert (s.images, s.words, s.illegible, s.fixed, s.bad_lines) == (2, 4, 1, 0, [])
    images = ufo(tmp_path / "root")
    assert sorted(images) == ["img_1.jpg", "img_2.png"]
    words = images["img_1.jpg"]["words"]
    assert words["1"] == {"points": [list(p) for p in QUAD], "transcription": "Hello, world",
                          "illegibility": False, "tags": []}
    assert words["2"]["illegibility"] is True and words["3"]["transcription"] == "ÄÖ 12"
    assert (images["img_1.jpg"]["img_w"], images["img_1.jpg"]["img_h"]) == (W, H)
    assert (tmp_path / "root" / "images" / "img_1.jpg").is_symlink()
    ingest = built([tmp_path / "root"], tmp_path)
    assert (ingest["images"], ingest["legible"], ingest["illegible"]) == (2, 3, 1)


def test_sroie_text_files_beside_their_images(tmp_path):
    src = tmp_path / "sroie"
    image(src / "X51005.jpg")
    (src / "X51005.txt").write_text(f"{csv(QUAD)},TOTAL: 1,234.00\n{csv([(20, 50), (90, 50), (90, 70), (20, 70)])},TAX\n")
    s = convert("sroie", src, tmp_path / "root", copy=True)
    assert (s.images, s.words) == (1, 2)
    assert ufo(tmp_path / "root")["X51005.jpg"]["words"]["1"]["transcription"] == "TOTAL: 1,234.00"
    assert not (tmp_path / "root" / "images" / "X51005.jpg").is_symlink(), "--copy copies"
    assert built([tmp_path / "root"], tmp_path)["legible"] == 2


def test_icdar2013_space_and_comma_separated_boxes(tmp_path):
    src = tmp_path / "src"
    image(src / "100.jpg")
    (src / "gt_100.txt").write_text('10 10 70 30 "Footpath"\n80, 40, 150, 70, "say \\"hi\\""\n5 80 60 110 "###"\n')
    s = convert("icdar2013", src, tmp_path / "root")
    words = ufo(tmp_path / "root")["100.jpg"]["words"]
    assert words["1"]["points"] == [list(p) for p in QUAD] and words["2"]["transcription"] == 'say "hi"'
    assert (s.words, s.illegible) == (3, 1)
    ingest = built([tmp_path / "root"], tmp_path)
    assert (ingest["legible"], ingest["illegible"]) == (2, 1)


def test_mmocr_textdet_json_polygon_bbox_and_ignore(tmp_path):
    src = tmp_path / "mmocr"
    image(src / "textdet_imgs" / "train" / "img_7.jpg")
    data = {"metainfo": {"dataset_type": "TextDetDataset", "task_name": "textdet"},
            "data_list": [{"img_path": "textdet_imgs/train/img_7.jpg", "height": H, "width": W, "instances": [
                {"polygon": flat(QUAD), "bbox": [10, 10, 70, 30], "bbox_label": 0, "ignore": False},
                {"bbox": [80, 40, 150, 70], "bbox_label": 0, "ignore": False},
                {"polygon": flat([(5, 80), (60, 80), (60, 110), (5, 110)]), "ignore": True}]}]}
    (src / "textdet_train.json").write_text(json.dumps(data))
    s = convert("mmocr", src / "textdet_train.json", tmp_path / "root")
    assert (s.images, s.words, s.illegible) == (1, 3, 1)
    assert ufo(tmp_path / "root")["img_7.jpg"]["words"]["2"]["points"] == [[80, 40], [150, 40], [150, 70], [80, 70]]
    ingest = built([tmp_path / "root"], tmp_path)
    assert (ingest["legible"], ingest["illegible"]) == (2, 1)
    data["data_list"][0]["instances"].append({"polygon": [1, 2, 3], "ignore": False})
    (src / "textdet_train.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"textdet_train\.json: data_list\[0\] \(textdet_imgs/train/img_7\.jpg\), instance 3"):
        convert("mmocr", src / "textdet_train.json", tmp_path / "again")


def test_wildreceipt_counter_clockwise_boxes_are_fixed_and_counted(tmp_path):
    src = tmp_path / "wildreceipt"
    image(src / "image_files" / "Image_16" / "11" / "r0.jpeg")
    # WildReceipt's own order: bottom-left, bottom-right, top-right, top-left (counter-clockwise on screen).
    anns = [{"box": flat([BL, BR, TR, TL]), "text": "SAFEWAY", "label": 1},
            {"box": flat([(80, 70), (150, 70), (150, 40), (80, 40)]), "text": "###", "label": 0}]
    lines = [json.dumps({"file_name": "image_files/Image_16/11/r0.jpeg", "height": H, "width": W, "annotations": anns})]
    (src / "train.txt").write_text("\n".join(lines) + "\n")
    s = convert("wildreceipt", src / "train.txt", tmp_path / "root")
    assert (s.images, s.words, s.fixed, s.illegible) == (1, 2, 2, 1)
    words = ufo(tmp_path / "root")["r0.jpeg"]["words"]
    assert words["1"]["points"] == [list(p) for p in QUAD], "clockwise from the top-left"
    assert built([tmp_path / "root"], tmp_path)["legible"] == 1


def test_cord_split_folder_with_meta_size(tmp_path):
    src = tmp_path / "CORD" / "train"
    image(src / "image" / "receipt_00000.png")
    quad = dict(zip(("x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4"), flat(QUAD)))
    doc = {"valid_line": [{"words": [{"quad": quad, "is_key": 1, "row_id": 1, "text": "TOTAL"},
                                     {"quad": {**quad, "y1": 40, "y2": 40, "y3": 60, "y4": 60}, "is_key": 0,
                                      "text": "12.000"}], "category": "total.total_price", "group_id": 1}],
           "dontcare": [{"quad": {**quad, "x1": 80, "x4": 80, "x2": 150, "x3": 150}}],
           "meta": {"split": "train", "image_id": 0, "image_size": {"width": W, "height": H}}}
    (src / "json").mkdir(parents=True)
    (src / "json" / "receipt_00000.json").write_text(json.dumps(doc))
    s = convert("cord", src, tmp_path / "root", prefix="cord_")
    assert (s.images, s.words, s.illegible) == (1, 3, 1)
    assert list(ufo(tmp_path / "root")) == ["cord_receipt_00000.png"]
    ingest = built([tmp_path / "root"], tmp_path)
    assert (ingest["legible"], ingest["illegible"]) == (2, 1)


def cocotext_set(src: Path) -> Path:
    for i in (1, 2, 3):
        image(src / f"COCO_train2014_{i}.jpg")
    data = {"imgs": {"1": {"id": 1, "file_name": "COCO_train2014_1.jpg", "width": W, "height": H, "set": "train"},
                     "2": {"id": 2, "file_name": "COCO_train2014_2.jpg", "width": W, "height": H, "set": "train"},
                     "3": {"id": 3, "file_name": "COCO_train2014_3.jpg", "width": W, "height": H, "set": "val"}},
            "anns": {"10": {"id": 10, "image_id": 1, "bbox": [10, 10, 60, 20], "legibility": "legible",
                            "utf8_string": "STOP", "class": "machine printed"},
                     "11": {"id": 11, "image_id": 1, "mask": flat([(80, 40), (150, 40), (150, 70), (80, 70)]),
                            "bbox": [80, 40, 70, 30], "legibility": "illegible"},
                     "12": {"id": 12, "image_id": 3, "bbox": [10, 10, 60, 20], "legibility": "legible"}},
            "imgToAnns": {"1": [10, 11], "2": [], "3": [12]}}
    (src / "COCO_Text.json").write_text(json.dumps(data))
    return src / "COCO_Text.json"


def test_cocotext_keeps_the_split_set_and_pages_without_text(tmp_path):
    s = convert("cocotext", cocotext_set(tmp_path / "coco"), tmp_path / "root")
    assert (s.images, s.words, s.illegible) == (2, 2, 1)
    images = ufo(tmp_path / "root")
    assert sorted(images) == ["COCO_train2014_1.jpg", "COCO_train2014_2.jpg"] and images["COCO_train2014_2.jpg"]["words"] == {}
    assert images["COCO_train2014_1.jpg"]["words"]["1"]["points"] == [list(p) for p in QUAD]
    ingest = built([tmp_path / "root"], tmp_path)
    assert (ingest["images"], ingest["legible"], ingest["illegible"]) == (2, 1, 1)
    assert convert("cocotext", tmp_path / "coco" / "COCO_Text.json", tmp_path / "all", subset="all").images == 3
    with pytest.raises(DataError, match=r"\"set\": 'test'.*train, val"):
        convert("cocotext", tmp_path / "coco" / "COCO_Text.json", tmp_path / "t", split="test")


ARC_X = "10 40 70 100 100 70 40 10"
ARC_Y = "30 12 12 30 50 32 32 50"


def test_totaltext_polygons_stay_polygons_and_fit_polygons_works(tmp_path):
    src = tmp_path / "tt"
    image(src / "img11.jpg")
    (src / "poly_gt_img11.txt").write_text(
        f"x: [[{ARC_X[:9]}\n{ARC_X[9:]}]], y: [[{ARC_Y}]], ornt: [u'c'], transcriptions: [u'ARC']\n"
        "x: [[115 150 150 115]], y: [[60 60 90 90]], ornt: [u'#'], transcriptions: [u'#']\n"
        "x: [[10 60 60 10]], y: [[80 80 110 110]], ornt: [u'h'], transcriptions: [u\"it's\"]\n")
    s = convert("totaltext", src, tmp_path / "root")
    assert (s.images, s.words, s.illegible, s.polygons) == (1, 3, 1, 1)
    words = ufo(tmp_path / "root")["img11.jpg"]["words"]
    assert len(words["1"]["points"]) == 8 and words["3"]["transcription"] == "it's"
    plain = built([tmp_path / "root"], tmp_path / "a")
    assert (plain["legible"], plain["not_quad"], plain["illegible"], plain["fitted"]) == (1, 1, 1, 0)
    fitted = built([tmp_path / "root"], tmp_path / "b", fit_polygons=True)
    assert (fitted["legible"], fitted["not_quad"], fitted["fitted"]) == (2, 0, 1)


def test_polygon_lines_with_text_marker(tmp_path):
    src = tmp_path / "ctw"
    image(src / "1001.jpg")
    arc = list(zip(map(int, ARC_X.split()), map(int, ARC_Y.split())))
    (src / "1001.txt").write_text(f"{csv(arc)},####a, b\n{csv(QUAD)},#######\n{csv([(80, 40), (150, 40), (150, 70)])}\n")
    s = convert("polygon", src, tmp_path / "root")
    words = ufo(tmp_path / "root")["1001.jpg"]["words"]
    assert words["1"]["transcription"] == "a, b" and words["2"]["illegibility"] is True and len(words["3"]["points"]) == 3
    assert (s.words, s.illegible, s.polygons) == (3, 1, 1)
    assert built([tmp_path / "root"], tmp_path)["not_quad"] == 2


def test_size_comes_from_the_exif_oriented_header(tmp_path):
    src = tmp_path / "src"
    image(src / "rot.jpg", size=(W, H), orientation=6)     # stored 160x120, shown 120x160
    (src / "rot.txt").write_text(f"{csv(QUAD)},word\n")
    convert("sroie", src, tmp_path / "root")
    entry = ufo(tmp_path / "root")["rot.jpg"]
    assert (entry["img_w"], entry["img_h"]) == (H, W)
    assert built([tmp_path / "root"], tmp_path)["exif_applied"] == 1


def wildreceipt_line(name: str, w: int, h: int) -> str:
    return json.dumps({"file_name": name, "width": w, "height": h, "annotations": [{"box": flat(QUAD), "text": "x"}]})


def test_stated_size_is_checked_against_the_image(tmp_path):
    src = tmp_path / "w"
    image(src / "rot.jpg", size=(W, H), orientation=6)
    image(src / "plain.jpg")
    (src / "train.txt").write_text(wildreceipt_line("rot.jpg", W, H) + "\n")   # the stored layout: accepted
    s = convert("wildreceipt", src / "train.txt", tmp_path / "a")
    assert s.stored_layout == 1 and (ufo(tmp_path / "a")["rot.jpg"]["img_w"], s.images) == (W, 1)
    (src / "train.txt").write_text(wildreceipt_line("plain.jpg", 2 * W, H) + "\n")
    with pytest.raises(DataError, match=rf"train\.txt:1.*{2 * W}x{H}.*{W}x{H}"):
        convert("wildreceipt", src / "train.txt", tmp_path / "b")
    s = convert("wildreceipt", src / "train.txt", tmp_path / "c", skip_bad=True)
    assert s.images == 0 and len(s.bad_images) == 1


def test_bad_line_is_named_with_file_and_line_or_skipped(tmp_path):
    src = icdar2015_set(tmp_path / "src")
    gt = src / "gt" / "gt_img_1.txt"
    gt.write_bytes(gt.read_bytes() + b"\r\n10,10,70,oops,70,30,10,30,bad\r\n")
    with pytest.raises(DataError, match=r"gt_img_1\.txt:4: '10,10,70,oops.*--skip-bad"):
        convert("icdar2015", src / "gt", tmp_path / "root", images=src / "img")
    assert not (tmp_path / "root").exists(), "nothing is written when a line is bad"
    s = convert("icdar2015", src / "gt", tmp_path / "root", images=src / "img", skip_bad=True)
    assert (s.words, [w.split(":")[-1] for w, _ in s.bad_lines]) == (4, ["4"])
    assert "--skip-bad: skipped 1 line(s)" in describe("icdar2015", src, tmp_path / "root", "train", False, s)


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    src = tmp_path / "src"
    image(src / "a.jpg")
    (src / "a.txt").write_bytes(f"{csv(QUAD)},fine\n".encode() + b"10,10,70,10,70,30,10,30,caf\xe9\n")
    with pytest.raises(DataError, match=r"a\.txt:2: not UTF-8"):
        convert("sroie", src, tmp_path / "root")


def test_image_path_leaving_the_image_folder_is_refused(tmp_path):
    src = tmp_path / "w"
    image(tmp_path / "outside.jpg")
    (src).mkdir()
    (src / "train.txt").write_text(wildreceipt_line("../outside.jpg", W, H) + "\n")
    with pytest.raises(DataError, match=r"train\.txt:1: image path '\.\./outside\.jpg' leaves the image folder"):
        convert("wildreceipt", src / "train.txt", tmp_path / "root")


def test_same_names_in_two_roots_fail_the_build_and_suggest_prefix(tmp_path):
    for name in ("one", "two"):
        src = tmp_path / f"src_{name}"
        image(src / "receipt.jpg")
        (src / "receipt.txt").write_text(f"{csv(QUAD)},{name}\n")
        convert("sroie", src, tmp_path / name)
    with pytest.raises(DataError, match=r"'receipt\.jpg' appears in both.*convert --prefix"):
        built([tmp_path / "one", tmp_path / "two"], tmp_path / "clash")
    convert("sroie", tmp_path / "src_two", tmp_path / "two_p", prefix="two_")
    ingest = built([tmp_path / "one", tmp_path / "two_p"], tmp_path / "ok")
    assert (ingest["images"], ingest["legible"]) == (2, 2)


def test_existing_output_is_kept_unless_forced(tmp_path):
    src = icdar2015_set(tmp_path / "src")
    convert("icdar2015", src / "gt", tmp_path / "root", images=src / "img")
    before = (tmp_path / "root" / "ufo" / "train.json").read_text()
    with pytest.raises(UsageError, match=r"train\.json already exists; pass --force"):
        convert("icdar2015", src / "gt", tmp_path / "root", images=src / "img")
    other = tmp_path / "other"
    image(other / "img_1.jpg", size=(W + 1, H))
    (other / "img_1.txt").write_text(f"{csv(QUAD)},x\n")
    with pytest.raises(DataError, match=r"img_1\.jpg already exists.*nothing was written.*--prefix"):
        convert("sroie", other, tmp_path / "root", split="val")
    assert (tmp_path / "root" / "ufo" / "train.json").read_text() == before
    assert not (tmp_path / "root" / "ufo" / "val.json").exists()
    convert("sroie", other, tmp_path / "root", split="val", force=True)
    assert ufo(tmp_path / "root", "val")["img_1.jpg"]["img_w"] == W + 1


def test_orientation_rules():
    assert orient([TL, BL, BR, TR], trusted_start=True) == (QUAD, True)
    assert orient([BL, BR, TR, TL], trusted_start=True) == (QUAD, True)
    vertical = [TR, BR, BL, TL]   # clockwise, starting where a top-to-bottom reading starts: kept
    assert orient(vertical, trusted_start=True) == (vertical, False)
    assert orient(vertical, trusted_start=False) == (QUAD, False)
    tilted = [(0, 0), (86.6, -50), (96.6, -32.7), (10, 17.3)]   # 30 degrees up, clockwise from its top-left
    assert start_top_left(tilted[2:] + tilted[:2]) == tilted


def test_cli_prints_a_summary_and_errors_in_one_line(tmp_path, capsys):
    src = icdar2015_set(tmp_path / "src")
    argv = ["convert", "--from", "icdar2015", str(src / "gt"), "--images", str(src / "img"), "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "converted icdar2015" in err and "2 images, 4 words (3 legible, 1 illegible)" in err
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--force" in err


def test_convert_imports_no_torch():
    code = ("import sys, east_cache.cli, east_cache.convert.run, east_cache.convert.icdar, east_cache.convert.mmocr, "
            "east_cache.convert.cord, east_cache.convert.cocotext, east_cache.convert.polygons; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False, cwd=Path(__file__).parent.parent).returncode == 0


def test_a_root_inside_its_source_folder_or_the_folder_itself_is_converted_again(tmp_path):
    """Nothing is overwritten: --out SRC/conv, and SRC itself (an SROIE layout converted in place), run twice (the
    second with --force), leave the source's files as they were; a root whose images/ is the source is refused."""
    src = tmp_path / "sroie"
    image(src / "X51005.jpg")
    (src / "X51005.txt").write_text(f"{csv(QUAD)},TOTAL\n")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    for out in (src / "conv", src):
        for force in (False, True):
            assert convert("sroie", src, out, force=force).images == 1
            assert ufo(out)["X51005.jpg"]["words"]["1"]["transcription"] == "TOTAL"
    assert {p.name: p.read_bytes() for p in src.iterdir() if p.is_file()} == before
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "images").symlink_to(src)
    with pytest.raises(UsageError, match=r"would write .*images, which is the source SRC"):
        convert("sroie", src, tmp_path / "linked")


def test_images_already_in_the_roots_images_folder_stay_and_only_ufo_is_written(tmp_path, capsys):
    """convert --from icdar2015 gt --images data/ic15/images --out data/ic15: the images are where the root wants
    them; they stay as they are (no link over a file, nothing refused) and only ufo/train.json is written."""
    src = icdar2015_set(tmp_path / "src")
    root = tmp_path / "data" / "ic15"
    shutil.copytree(src / "img", root / "images")
    before = {p.name: (p.stat().st_ino, p.read_bytes()) for p in (root / "images").iterdir()}
    argv = ["convert", "--from", "icdar2015", str(src / "gt"), "--images", str(root / "images"), "--out", str(root)]
    assert main(argv) == 0, capsys.readouterr().err
    assert "left as they are" in capsys.readouterr().err
    assert {p.name: (p.stat().st_ino, p.read_bytes()) for p in (root / "images").iterdir()} == before
    assert not any(p.is_symlink() for p in (root / "images").iterdir())
    assert sorted(ufo(root)) == ["img_1.jpg", "img_2.png"]
    assert main([*argv, "--split", "val", "--prefix", "x_"]) == 2   # a name that is not there: refused
    assert "stays as it is" in capsys.readouterr().err and not (root / "ufo" / "val.json").exists()
    assert sorted(p.name for p in (root / "images").iterdir()) == sorted(before)
