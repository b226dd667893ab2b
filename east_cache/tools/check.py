"""`east-cache check`: duplicate images (exact and near, within and across roots and splits, a copy on both sides
of a train/val fold flagged as a leak), annotation anomalies (anomalies.py) and the words' size and angle
histograms (wordplot.py) of one or more UFO dataset roots; a summary printed, a report written with --out.

An image file is checked once however many splits list it: its splits are named beside each finding. Exit status
0 when nothing was found, 1 when something was, 2 for a user mistake.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from east_cache.bounds import Bound, flag_number
from east_cache.config import BuildConfig
from east_cache.errors import UsageError
from east_cache.inputs import check_output, refuse_overwrite
from east_cache.ingest.objects import is_url
from east_cache.ingest.ufo import dataset_inputs, find_split, load_ufo, read_images
from east_cache.atomic import write_atomic
from east_cache.tools.anomalies import KINDS, Found, WordShapes, entry_anomalies, frame_problem
from east_cache.tools.leak import TRAIN, validation_split
from east_cache.tools.phash import HASH_BITS, NEAR_DISTANCE, HashStore, ImageHash, near_pairs
from east_cache.tools.wordplot import draw_histograms, histograms

EXIT_FOUND = 1
SHOWN = 8            # findings of each list printed; --out's files hold them all
REPORT, DUPLICATES, ANOMALIES, FIGURE = "report.json", "duplicates.csv", "anomalies.csv", "words.png"
WRITES = (REPORT, DUPLICATES, ANOMALIES, FIGURE)   # what --out gets, each written atomically (never through a link)
EPILOG = f"""examples:
  east-cache check --data data/receipts --out check/
  east-cache check --data data/receipts --data data/external --split train0 --split val0

Duplicates: the same bytes (exact), or a 64-bit DCT perceptual hash within --distance bits (near; default
{NEAR_DISTANCE}: resized, re-encoded, slightly cropped or brightened copies). A pair with one image in train{{X}}
and the other in val{{X}} (train/val, train0/val0, ...) is a LEAK: validation scores on it overstate the model. A
root without train{{X}}.json (pseudo-labels, an external set) trains on fold X with every image of its train.json.
Anomalies: {", ".join(KINDS)}.
Exit status: 0 when nothing was found, 1 when duplicates or anomalies were, 2 for a user mistake."""


@dataclass
class ImageFile:
    """One image file and every (root, split, name) that lists it."""
    root: str
    name: str
    path: str
    splits: list[str] = field(default_factory=list)
    entries: dict = field(default_factory=dict)   # annotation fingerprint -> (entry, frame, [splits])
    trains: set[str] = field(default_factory=set)   # folds train{X} it trains in from a root without that file


def register(sub) -> None:
    c = sub.add_parser("check", help="find duplicate images (and train/val leaks) and annotation anomalies in "
                                     "dataset roots; exit 1 when something is found",
                       description="Check UFO dataset roots before training: duplicate and near-duplicate images\n"
                                   "within and across roots and splits, annotation anomalies, word sizes and angles.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--data", action="append", required=True, metavar="ROOT",
                   help="dataset root holding ufo/{split}.json and images/ (a local folder); repeatable")
    c.add_argument("--split", action="append", metavar="S",
                   help="a split to check, repeatable (default: every ufo/*.json of each root)")
    c.add_argument("--out", type=Path, metavar="REPORT_DIR",
                   help=f"folder for {REPORT}, {DUPLICATES}, {ANOMALIES} and {FIGURE} (the histograms); not in a "
                        f"root's ufo/, and none of them an input or a link to one (default: none, the summary is "
                        f"printed only)")
    c.add_argument("--distance", type=flag_number(Bound(least=0, most=HASH_BITS - 1)), default=NEAR_DISTANCE,
                   metavar="BITS",
                   help=f"largest Hamming distance (bits of {HASH_BITS}) of a near-duplicate pair "
                        f"(default {NEAR_DISTANCE})")
    c.add_argument("--quiet", action="store_true", help="no progress bar (default: off)")
    c.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    roots = [Path(r) for r in a.data]
    check_flags(roots, a.out)
    files = gather(roots, a.split)
    words = sum(len(entry.get("words") or {}) for f in files for entry, frame, _ in f.entries.values() if frame)
    hashed = HashStore().hashes([f.path for f in files], a.quiet, "hashing images")
    duplicates = find_duplicates(files, hashed, a.distance)
    anomalies, shapes = find_anomalies(files, hashed)
    hist = histograms(shapes.heights, shapes.angles)
    report = {"roots": [str(r) for r in roots], "images": len(files), "words": words, "distance": a.distance,
              "duplicates": duplicates, "anomalies": anomalies, "anomaly_kinds": KINDS, "histograms": hist}
    if a.out is not None:
        write_report(a.out, report, f"{len(files)} images, {words} words: {', '.join(map(str, roots))}")
    print(summary(report, a.out))
    return EXIT_FOUND if duplicates or anomalies else 0


def check_flags(roots: list[Path], out: Path | None) -> None:
    """Refuse, before any work, what cannot be checked or written: a URL, a folder that is no root, an --out whose
    files would be an input or a link to one (inputs.refuse_overwrite), an --out in a root's ufo/ (its .json files
    are read as splits: report.json would be one)."""
    for r in roots:
        if is_url(str(r)):
            raise UsageError(f"--data {r}: check reads local folders; copy the set to a folder first")
        if not (r / "ufo").is_dir():
            raise UsageError(f"--data {r}: no ufo/ folder there; pass a dataset root that holds ufo/SPLIT.json")
    if out is None:
        return
    where = out.resolve()
    for r in roots:
        ufo = (r / "ufo").resolve()
        if where == ufo or ufo in where.parents:
            raise UsageError(f"--out {out}: inside {r / 'ufo'}, whose .json files are read as splits; pass a folder "
                             f"outside it")
    check_output(out, "--out", folder=True)
    refuse_overwrite("--out", out, [i for r in roots for i in dataset_inputs(r, "--data")], WRITES)


def gather(roots: list[Path], splits: list[str] | None) -> list[ImageFile]:
    """The image files of every root's splits, each file once with the splits listing it; an entry ingest refuses
    as an ImageFile without a path, its reason in place of the entry."""
    cfg, by_path = BuildConfig(), {}
    wanted = list(dict.fromkeys(splits)) if splits else None
    folds = {s for r in roots for s in split_names(r) if s != TRAIN and validation_split(s)}
    for split in wanted or []:
        if not any((r / "ufo" / f"{split}.json").is_file() for r in roots):
            find_split(roots[0], split)   # raises, naming the splits there
    for root in roots:
        names = [s for s in wanted if (root / "ufo" / f"{s}.json").is_file()] if wanted else split_names(root)
        for split in names:
            json_path, image_dir = find_split(root, split)
            records, ingest = load_ufo(json_path, image_dir, cfg, skip_bad=True)
            kept = {r.name: r for r in records}
            for name, entry in read_images(json_path):
                rec = kept.get(name)
                if rec is None:
                    continue
                f = by_path.setdefault(os.path.realpath(rec.path), ImageFile(str(root), name, rec.path))
                f.splits.append(split)
                if split == TRAIN:   # a root without a fold's train{X}.json gives a run on that fold all its images
                    f.trains |= {t for t in folds if not (root / "ufo" / f"{t}.json").is_file()}
                f.entries.setdefault(rec.fingerprint, (entry, (rec.width, rec.height), []))[2].append(split)
            for name, why in ingest.bad:
                bad = ImageFile(str(root), name, "", [split])
                bad.entries["bad"] = (why, None, [split])
                by_path[f"{root}\0{split}\0{name}"] = bad
    return list(by_path.values())


def find_duplicates(files: list[ImageFile], hashed: list, limit: int) -> list[dict]:
    """Pairs of files of the same bytes or look, and files listed on both sides of a train/val fold; leaks first."""
    ok = [(f, h) for f, h in zip(files, hashed) if isinstance(h, ImageHash)]
    pairs = [pair("same file", 0, f, f) for f, _ in ok if leak(training(f), training(f))]
    for i, j, d in near_pairs([h.pixels for _, h in ok], limit):
        (a, ha), (b, hb) = ok[i], ok[j]
        pairs.append(pair("exact" if ha.content == hb.content else "near", d, a, b))
    return sorted(pairs, key=lambda p: (not p["leak"], p["kind"] != "exact", p["distance"], p["a"]["name"]))


def pair(kind: str, d: int, a: ImageFile, b: ImageFile) -> dict:
    side = lambda f: {"root": f.root, "name": f.name, "path": f.path, "splits": sorted(set(f.splits))}  # noqa: E731
    return {"kind": kind, "distance": d, "leak": leak(training(a), training(b)), "a": side(a), "b": side(b)}


def training(f: ImageFile) -> list[str]:
    """The splits a file is listed in, and the folds it trains in from a root without their own training split (a
    pseudo-label or external root: a run's --split train{X} takes all of its images)."""
    return [*f.splits, *sorted(f.trains)]


def split_names(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "ufo").glob("*.json"))


LEAK_JOIN = ", "   # between the folds of one pair that leaks in several


def leak(splits_a, splits_b) -> str:
    """Every fold the pair leaks in, "train{X}/val{X}" each (LEAK_JOIN between them, in order): one side listed in
    a training split and the other in its validation split; "" when there is none."""
    folds = {f"{train}/{val}" for s in set(splits_a) for t in set(splits_b) for train, val in ((s, t), (t, s))
             if validation_split(train) == val}
    return LEAK_JOIN.join(sorted(folds))


def find_anomalies(files: list[ImageFile], hashed: list) -> tuple[list[dict], WordShapes]:
    cfg, shapes, rows = BuildConfig(), WordShapes([], []), []
    for f, h in zip(files, hashed):
        for entry, frame, splits in f.entries.values():
            if frame is None:   # an entry ingest refused: entry is the reason
                found = [Found("unreadable", "", entry)]
            elif not isinstance(h, ImageHash):
                found = [Found("unreadable", "", str(h))]
            else:
                problem = frame_problem(entry, h.stored, h.size)
                found = ([problem] if problem else []) + entry_anomalies(entry, frame, cfg, shapes)
            rows += [{"kind": x.kind, "root": f.root, "image": f.name, "path": f.path, "word": x.word,
                      "detail": x.detail, "splits": sorted(set(splits))} for x in found]
    order = list(KINDS)
    return sorted(rows, key=lambda r: (order.index(r["kind"]), r["root"], r["image"])), shapes


def write_report(out: Path, report: dict, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / REPORT, json.dumps(report, indent=1) + "\n")
    rows = [["kind", "distance", "leak", "root_a", "image_a", "splits_a", "root_b", "image_b", "splits_b"]]
    for p in report["duplicates"]:
        sides = [v for s in (p["a"], p["b"]) for v in (s["root"], s["name"], " ".join(s["splits"]))]
        rows.append([p["kind"], p["distance"], p["leak"], *sides])
    write_atomic(out / DUPLICATES, csv_text(rows))
    rows = [["kind", "root", "image", "word", "detail", "splits"]]
    rows += [[r["kind"], r["root"], r["image"], r["word"], r["detail"], " ".join(r["splits"])]
             for r in report["anomalies"]]
    write_atomic(out / ANOMALIES, csv_text(rows))
    draw_histograms(report["histograms"], out / FIGURE, title)


def csv_text(rows: list[list]) -> str:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def summary(report: dict, out: Path | None) -> str:
    """What was found, readable: counts, then the first SHOWN of each list."""
    dup, bad = report["duplicates"], report["anomalies"]
    kinds = Counter(p["kind"] for p in dup)
    leaks = sum(1 for p in dup if p["leak"])
    folds = Counter(fold for p in dup if p["leak"] for fold in p["leak"].split(LEAK_JOIN))
    lines = [f"checked {report['images']} image(s), {report['words']} word(s) in {len(report['roots'])} root(s)"]
    lines.append(f"duplicates: {len(dup)} pair(s)" + (f" ({', '.join(f'{k} {n}' for k, n in kinds.items())}; near: "
                                                      f"distance <= {report['distance']} of {HASH_BITS} bits)"
                                                      if dup else ""))
    if leaks:
        lines[-1] += (f"; {leaks} LEAK(S) across a train/val split ("
                      f"{', '.join(f'{fold}: {n}' for fold, n in sorted(folds.items()))})")
    for p in dup[:SHOWN]:
        a, b = p["a"], p["b"]
        tag = f"LEAK {p['leak']} " if p["leak"] else ""
        other = "" if p["kind"] == "same file" else f" ~ {b['path']} [{' '.join(b['splits'])}]"
        lines.append(f"  {tag}{p['kind']} ({p['distance']}): {a['path']} [{' '.join(a['splits'])}]{other}")
    lines += more(len(dup), out, DUPLICATES)
    per_kind = Counter(r["kind"] for r in bad)
    lines.append(f"anomalies: {len(bad)}" + (f" ({', '.join(f'{k} {n}' for k, n in per_kind.items())})" if bad else ""))
    for r in bad[:SHOWN]:
        word = f" word {r['word']}" if r["word"] else ""
        where = r.get("path") or f"{r['image']} of {r['root']}"   # an entry ingest refused has no file
        lines.append(f"  {r['kind']}: {where}{word}: {r['detail']} [{' '.join(r['splits'])}]")
    lines += more(len(bad), out, ANOMALIES)
    lines.append(shape_line(report["histograms"]))
    if out is not None:
        lines.append(f"report: {out / REPORT}, {DUPLICATES}, {ANOMALIES}, {FIGURE}")
    return "\n".join(lines)


def more(n: int, out: Path | None, name: str) -> list[str]:
    if n <= SHOWN:
        return []
    return [f"  ... and {n - SHOWN} more " + (f"in {out / name}" if out is not None else "(--out DIR lists all)")]


def shape_line(hist: dict) -> str:
    counts = np.array(hist["height_px"]["counts"])
    if not counts.sum():
        return "words: none kept"
    edges = hist["height_px"]["edges"]
    median_bin = int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))
    top = edges[median_bin + 1] if median_bin + 1 < len(edges) - 1 else float("inf")
    angles = np.array(hist["angle_deg"]["counts"])
    return (f"words: {counts.sum()} kept; median height {edges[median_bin]:g}-{top:g} px; "
            f"{angles.max() / max(1, angles.sum()):.0%} in the most common angle bin")
