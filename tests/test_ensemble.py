"""`east-cache ensemble`: several predictions files fused by the IoU of their quads. One file comes out as it went
in, N copies of one file too; --votes 1 keeps the union and --votes N the intersection; on five noisy copies of a
ground truth the fused file scores above every copy, whatever the files' or the vertices' order; rotated words
stay rotated; files over different images are refused, or counted as empty with --missing empty."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from ensemble_data import ground_truth, noisy_copies, rotated_box

from east_cache.cli import main
from east_cache.evaluate.ensemble import default_votes, fuse
from east_cache.evaluate.predictions import COORD_DECIMALS, read_quads, write_predictions
from east_cache.evaluate.scoring import Words, score
from east_cache.errors import EXIT_USER

ROUNDING = 10.0 ** -COORD_DECIMALS   # a written coordinate's rounding, and a fused mean's on top of it


def ensemble(capsys, *args) -> tuple[int, str]:
    rc = main(["ensemble", *map(str, args), "--quiet"])
    return rc, capsys.readouterr().err


def hmean(gt: dict, result: dict, metric: str = "rect") -> float:
    return score({k: Words.from_quads(v) for k, v in gt.items()},
                 {k: Words.from_quads(q) for k, (q, _) in result.items()}, metric)["hmean"]


def canonical(quads: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Words as a set: each quad clockwise from its corner of least x + y, the words sorted by their corners."""
    out = []
    for q in np.asarray(quads, np.float64):
        nxt = q[[1, 2, 3, 0]]
        if np.sum(q[:, 0] * nxt[:, 1] - nxt[:, 0] * q[:, 1]) < 0:
            q = q[::-1]
        out.append(np.roll(q, -int(np.argmin(q.sum(axis=1))), axis=0))
    out = np.array(out).reshape(-1, 4, 2)
    order = np.lexsort(out.reshape(len(out), -1).T[::-1])
    return out[order], np.asarray(scores)[order]


@pytest.fixture(scope="module")
def generated():
    """A ground truth of 40 images x 20 words and five noisy copies of it (ensemble_data: 15% of words missed,
    10% false words, corners moved up to 3 px, scores drawn)."""
    gt = ground_truth(40, 20, seed=3)
    return gt, noisy_copies(gt, 5, seed=10)


def test_one_file_in_the_same_words_out(generated, tmp_path, capsys):
    a, out = tmp_path / "a.json", tmp_path / "fused.json"
    write_predictions(a, generated[1][0])
    assert ensemble(capsys, "--pred", a, "--out", out)[0] == 0
    before, after = read_quads(a), read_quads(out)
    assert list(after) == list(before)
    for name in before:
        np.testing.assert_allclose(after[name][0], before[name][0], atol=ROUNDING, rtol=0)
        np.testing.assert_array_equal(after[name][1], before[name][1])
    assert json.loads(out.read_text())["predicted_by"]["program"] == "east-cache ensemble"


@pytest.mark.parametrize("votes", [None, 1, 3])
def test_copies_of_one_file_give_that_file(generated, tmp_path, capsys, votes):
    a, out = tmp_path / "a.json", tmp_path / "fused.json"
    write_predictions(a, generated[1][0])
    flags = [] if votes is None else ["--votes", votes]
    assert ensemble(capsys, "--pred", a, "--pred", a, "--pred", a, "--out", out, *flags)[0] == 0
    before, after = read_quads(a), read_quads(out)
    for name in before:
        np.testing.assert_allclose(after[name][0], before[name][0], atol=ROUNDING, rtol=0)
        np.testing.assert_array_equal(after[name][1], before[name][1])


def test_votes_one_keeps_the_union_and_votes_n_the_intersection():
    """A and B share one word (moved 2 px in B); each has one of its own."""
    shared, only_a, only_b = rotated_box(100, 100, 120, 30, 10), rotated_box(400, 100, 80, 30, 0), \
        rotated_box(100, 400, 80, 30, -15)
    a = {"x.jpg": (np.array([shared, only_a]), np.array([0.9, 0.8]))}
    b = {"x.jpg": (np.array([only_b, shared + 2]), np.array([0.7, 0.6]))}
    union, inter = fuse([a, b], votes=1)["x.jpg"], fuse([a, b], votes=2)["x.jpg"]
    assert len(union[0]) == 3 and len(inter[0]) == 1
    # the shared word: corners weighted by score (0.9 : 0.6), score the mean over both files
    np.testing.assert_allclose(inter[0][0], shared + 2 * 0.6 / 1.5)
    assert inter[1][0] == pytest.approx((0.9 + 0.6) / 2)
    # a word one file of two found keeps half its score
    assert sorted(union[1]) == pytest.approx(sorted([0.75, 0.8 / 2, 0.7 / 2]))
    assert default_votes(2) == 2 and default_votes(5) == 3


def test_fused_noisy_copies_beat_every_copy(generated):
    gt, copies = generated
    single = [hmean(gt, c) for c in copies]
    fused = hmean(gt, fuse(copies))
    assert fused > max(single), f"fused rect hmean {fused:.4f}, copies {', '.join(f'{h:.4f}' for h in single)}"


def test_vertex_order_and_file_order_change_nothing(generated):
    gt, copies = generated
    rng = np.random.default_rng(0)
    turned = []
    for c in copies:   # every quad from another corner, half of them the other way round
        t = {}
        for name, (q, s) in c.items():
            q = np.array([np.roll(x[::-1] if rng.random() < 0.5 else x, int(rng.integers(4)), axis=0) for x in q])
            t[name] = (q.reshape(-1, 4, 2), s)
        turned.append(t)
    weights = [1.0, 2.0, 1.0, 0.5, 1.0]
    base = fuse(copies, weights)
    order = [3, 0, 4, 2, 1]
    for other in (fuse(turned, weights), fuse([copies[k] for k in order], [weights[k] for k in order])):
        assert list(other) == list(base)
        for name in base:
            q0, s0 = canonical(*base[name])
            q1, s1 = canonical(*other[name])
            np.testing.assert_allclose(q1, q0, atol=1e-9)
            np.testing.assert_allclose(s1, s0, atol=1e-12)
        assert hmean(gt, other) == hmean(gt, base)


def test_a_rotated_word_stays_rotated():
    """Three files find a word turned 30 degrees: the fused quad is that word (its enclosing rectangle is not)."""
    word = rotated_box(300, 200, 200, 40, 30)
    files = [{"x.jpg": (word[None] + d, np.array([0.9]))} for d in (0, 1.5, -1.5)]
    fused = fuse(files)["x.jpg"][0]
    assert len(fused) == 1
    np.testing.assert_allclose(fused[0], word, atol=1e-9)


def test_files_over_different_images(tmp_path, capsys):
    q = np.array([rotated_box(50, 50, 60, 20, 0)])
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "f.json"
    write_predictions(a, {"x.jpg": (q, np.array([0.9])), "y.jpg": (q, np.array([0.8]))})
    write_predictions(b, {"x.jpg": (q, np.array([0.7]))})
    rc, err = ensemble(capsys, "--pred", a, "--pred", b, "--out", out)
    assert rc == EXIT_USER and "'y.jpg'" in err and str(b) in err and "--missing empty" in err
    assert not out.exists()
    assert ensemble(capsys, "--pred", a, "--pred", b, "--out", out, "--missing", "empty", "--votes", "1")[0] == 0
    fused = read_quads(out)
    assert fused["x.jpg"][1].tolist() == [0.8] and fused["y.jpg"][1].tolist() == [0.4]


@pytest.mark.parametrize("flags, words", [
    (["--weights", "1,2,3"], "one weight per --pred file (2)"),
    (["--weights", "0,0"], "not all 0"),
    (["--weights", "1,-1"], "must be a finite number >= 0"),
    (["--votes", "3"], "more than the 2 --pred files"),
    (["--iou", "1"], "--iou: 1: must be a finite number in (0, 1)"),
])
def test_bad_flags_are_one_line(tmp_path, capsys, flags, words):
    a, out = tmp_path / "a.json", tmp_path / "f.json"
    write_predictions(a, {"x.jpg": (np.zeros((0, 4, 2)), np.zeros(0))})
    try:
        rc = main(["ensemble", "--pred", str(a), "--pred", str(a), "--out", str(out), *flags])
    except SystemExit as e:   # argparse's usage errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == EXIT_USER and err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_out_may_not_be_an_input(tmp_path, capsys):
    a = tmp_path / "a.json"
    write_predictions(a, {"x.jpg": (np.zeros((0, 4, 2)), np.zeros(0))})
    rc, err = ensemble(capsys, "--pred", a, "--pred", a, "--out", a)
    assert rc == EXIT_USER and "--out" in err and "--pred" in err


def write_gt(path, gt: dict) -> None:
    path.write_text(json.dumps({"images": {name: {"img_w": 1000, "img_h": 1000, "words": {
        str(k + 1): {"points": q.tolist(), "illegibility": False} for k, q in enumerate(quads)}}
        for name, quads in gt.items()}}))


def test_evaluate_compares_several_files_in_one_table(generated, tmp_path, capsys):
    """Copies and their fusion scored in one command: a row per file, the same figures each alone gets, and
    per image which file scores best."""
    gt, copies = generated
    g, fused = tmp_path / "gt.json", tmp_path / "fused.json"
    write_gt(g, gt)
    paths = [tmp_path / f"copy{k}.json" for k in range(3)]
    for p, c in zip(paths, copies):
        write_predictions(p, c)
    assert ensemble(capsys, *[x for p in paths for x in ("--pred", p)], "--out", fused)[0] == 0
    preds = [x for p in [*paths, fused] for x in ("--pred", str(p))]
    assert main(["evaluate", "--gt", str(g), *preds, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["files"]
    assert [r["pred"] for r in rows] == [str(p) for p in [*paths, fused]]
    for p, r in zip([*paths, fused], rows):
        assert main(["evaluate", "--gt", str(g), "--pred", str(p), "--json"]) == 0
        alone = json.loads(capsys.readouterr().out)
        assert r["hmean"] == alone["hmean"] and r["precision"] == alone["precision"]
    assert rows[-1]["hmean"] > max(r["hmean"] for r in rows[:-1])
    assert rows[-1]["best"] >= max(r["best"] for r in rows[:-1]) and sum(r["alone"] for r in rows) <= len(gt)
    assert main(["evaluate", "--gt", str(g), *preds]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| ") == 5 and str(fused) in out   # a header and a row per file
    rc = main(["evaluate", "--gt", str(g), *preds, "--per-image", str(tmp_path / "x.csv")])
    assert rc == EXIT_USER and "give one --pred" in capsys.readouterr().err


def test_best_and_alone_count_images():
    from east_cache.evaluate.compare import compare
    from east_cache.evaluate.deteval import ImageCounts
    def result(*hmeans):   # an image's counts whose hmean is h: one gt, one detection, credit h
        return {"per_image": {f"{k}.jpg": ImageCounts(1, 1, h, h, ()) for k, h in enumerate(hmeans)}}
    rows = compare([result(1.0, 0.5, 0.2), result(1.0, 0.7, 0.1), result(0.0, 0.1, 0.2)])
    assert [(r["best"], r["alone"]) for r in rows] == [(2, 0), (2, 1), (1, 0)]


def test_a_word_beyond_the_coordinate_bound_is_refused_naming_it(tmp_path, capsys):
    """Two files that both hold a word at 1e200 px: its areas overflow, and the fusion dropped it with numpy's
    RuntimeWarnings; refused instead, naming the file, the image and the word, as a prediction's other faults are."""
    far = [[1e200, 1e200], [1e200 + 1e190, 1e200], [1e200 + 1e190, 1e200 + 1e190], [1e200, 1e200 + 1e190]]
    near = [[10, 10], [50, 10], [50, 30], [10, 30]]
    doc = {"predicted_by": {"program": "test"}, "images": {"a.jpg": {"words": {"1": {"points": near},
                                                                                 "2": {"points": far}}}}}
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no RuntimeWarning of an overflow
        rc, err = ensemble(capsys, "--pred", tmp_path / "a.json", "--pred", tmp_path / "b.json", "--out",
                           tmp_path / "out.json")
    assert rc == EXIT_USER and err.count("\n") == 1 and err.startswith("error: "), err
    assert "a.json" in err and "'a.jpg'" in err and "'2'" in err and "1e+06 px" in err, err
    assert not (tmp_path / "out.json").exists()
