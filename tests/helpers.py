"""Helpers shared by the tests (test modules never import each other): a small build config, cache contents as
bytes, edits of a UFO file; tiny caches and training runs on the CPU; the ground-truth maps of whole
pages, and a model double that returns them; a reference's maps checked against the reader (assert_reads_as), and
the statistics of a draw (ks_uniform)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from east_cache.train import train
from east_cache.model.decode import decode_maps
from east_cache.config import BuildConfig
from east_cache.ingest.ufo import CARE, ImageRecord
from east_cache.reader.collate import collate
from east_cache.reader.expand import expand_batch
from east_cache.sample.geometry import min_rect_angles
from east_cache.sample.targets import make_targets, owner_map, roi_map
from east_cache.build.run import build_cache
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_record import TILE_PX, Page, Tiled, map_tile, pack_maps
from east_cache.store.sidecar import quads_path

REPO = Path(__file__).resolve().parents[1]
# pages this small still leave words in both kinds of 64 px crop
TINY = dict(image_size=96, input_size=64, variants=1, crop_tries=20)
# flags of a quiet, offline CPU run: no download of ImageNet weights, a log record every step
QUIET_RUN = ["--workers", "0", "--batch-size", "2", "--log-every", "1", "--backbone-weights", "random"]
# two variants of pages stored warped (--geometry build); a page warped at read time has one
SMALL = dict(image_size=192, input_size=96, map_scale=0.5, variants=2, crop_tries=50, geometry="build")


def ctrl_c(*_args, **_kwargs) -> None:
    """Ctrl-C, as the signal raises it, in place of any call."""
    raise KeyboardInterrupt


def ctrl_c_then_cleanup_fails(*_args, **_kwargs) -> None:
    """Ctrl-C, then a cleanup it left half done failing in its turn: np.savez, stopped inside zipfile's open, raises
    ValueError as it closes the archive. Every command takes it for the interrupt."""
    try:
        raise KeyboardInterrupt
    finally:
        raise ValueError("Can't close the ZIP file while there is an open writing handle on it.")


INTERRUPTS = pytest.mark.parametrize("interrupt", [ctrl_c, ctrl_c_then_cleanup_fails], ids=["plain", "cleanup-fails"])


def small_config(**over) -> BuildConfig:
    return BuildConfig(**{**SMALL, **over})


def cache_bytes(out: Path) -> dict[str, bytes]:
    """Every data file and sidecar the manifest names, by name: two caches are equal when these are."""
    files = {}
    for f in Manifest.load(out).files:
        p = data_path(out, f.name)
        files[p.name], files[quads_path(p).name] = p.read_bytes(), quads_path(p).read_bytes()
    return files


def record_bytes(ds) -> dict:
    """Every sample's stored bytes by (image index, variant), read through the Dataset."""
    return {(i, v): ds.record(i, v).tobytes() for i in range(len(ds)) for v in range(ds.config.variants)}


def edit_ufo(data: Path, change) -> None:
    path = data / "ufo" / "train.json"
    ufo = json.loads(path.read_text())
    change(ufo["images"])
    path.write_text(json.dumps(ufo))


def first_image(images: dict) -> str:
    return sorted(images)[0]


def nudge_first_word(images) -> None:
    words = images[first_image(images)]["words"]
    word = words[sorted(words)[0]]
    word["points"] = [[x + 2, y] for x, y in word["points"]]


def cli_run(capsys, *args, prog: str = "python -m preprocess") -> tuple[int, str, str]:
    """The east-cache command in this process, as `prog` would run it (usage and hints name prog): (exit status,
    stdout, stderr). A test whose point is the process itself (its start, a signal, a pipe) runs it as one."""
    from east_cache.cli import main
    try:
        status = main([str(a) for a in args], prog=prog)
    except SystemExit as e:   # argparse's --help and usage errors
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


def make_tiny_cache(data: Path, out: Path, **over) -> Path:
    build_cache(BuildConfig(**{**TINY, "map_scale": 0.5, **over}), [data], out, jobs=1, quiet=True)
    return out


def train_run(cache_dir: Path, out: Path, *flags: str) -> list[dict]:
    """The training command in this process (errors raised) with run_args; returns the log."""
    train.run(run_args(cache_dir, out, *flags))
    return read_log(out)


def run_args(cache_dir: Path, out: Path, *flags: str) -> list[str]:
    """A training run's arguments: --cache, --out, QUIET_RUN, then `flags`, each in place of QUIET_RUN's flag of the
    same name (a flag given twice is refused)."""
    return with_flags(["--cache", str(cache_dir), "--out", str(out), *QUIET_RUN], flags)


def with_flags(args, extra) -> list[str]:
    """args with each flag of extra (a flag and its value, or a flag alone) in place of the same flag and its value
    in args, or appended where args lacks it."""
    args, extra, i = list(args), list(extra), 0
    while i < len(extra):
        valued = i + 1 < len(extra) and not str(extra[i + 1]).startswith("--")
        flag, value = extra[i], extra[i + 1:i + 2] if valued else []
        if flag in args:
            at = args.index(flag) + 1
            args[at:at + len(value)] = value
        else:
            args += [flag, *value]
        i += 1 + len(value)
    return args


def read_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def epochs_of(log: list[dict]) -> list[dict]:
    return [r for r in log if r["event"] == "epoch"]


STRIDE = 32   # the backbone's stride: inputs are padded to a multiple of it


def page_maps(points, offsets, care, width: int, height: int, long_side: int, map_scale: float):
    """(score (m, m), geo (5, m, m), scale): the EAST targets of a whole page resized so that its long side is
    long_side px, on a square map covering the page padded to a multiple of STRIDE: what a perfect model
    would output for the page."""
    scale = long_side / max(width, height)
    side = -(-round(max(width, height) * scale) // STRIDE) * STRIDE
    score, geo, _ = make_targets(np.asarray(points, np.float32) * scale, offsets, np.asarray(care, np.uint8), side,
                                 map_scale)
    return score, geo, scale


def decode_page(score, geo, scale: float, map_scale: float, shift: int = 0) -> np.ndarray:
    """(K, 4, 2) quads in the page's frame from page_maps' output; shift > 0 rolls the maps that many map
    pixels right and down first (a deliberately displaced output)."""
    if shift:
        score, geo = np.roll(score, (shift, shift), axis=(0, 1)), np.roll(geo, (shift, shift), axis=(1, 2))
    quads, _ = decode_maps(score, geo, map_scale)
    return quads.astype(np.float64) / scale


def input_key(images_uint8: np.ndarray) -> bytes:
    """What identifies one prepared input image (H, W, 3) uint8."""
    return hashlib.blake2b(np.ascontiguousarray(images_uint8).tobytes(), digest_size=16).digest()


class GroundTruthModel:
    """A test double for EAST at inference: for an input it has seen prepared (east_cache.predict.pages.load_input) it returns
    the page's ground-truth score and geometry maps, so predictions are as good as decoding allows; any other
    input gets empty maps. It recognises an input by un-normalising it back to the uint8 image."""

    def __init__(self, pages, words: dict, image_size: int, map_scale: float):
        from east_cache.predict.pages import input_geometry, load_input
        self.map_scale, self.maps = map_scale, {}
        for page in pages:
            w = words[page.name]
            scale, _, (ph, pw) = input_geometry(page, image_size)
            score, geo, _ = make_targets(np.asarray(w.points, np.float32) * scale, w.offsets,
                                         np.asarray(w.care, np.uint8), max(ph, pw), map_scale)
            mh, mw = round(ph * map_scale), round(pw * map_scale)
            self.maps[input_key(load_input(page, image_size))] = (score[:mh, :mw], geo[:, :mh, :mw])

    def __call__(self, x):
        """score (B, 1, h, w) and geo (B, 5, h, w) tensors for normalised images x (B, 3, H, W)."""
        import torch

        from east_cache.reader.images import IMAGENET_MEAN, IMAGENET_STD
        mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        images = ((x.float().cpu() * std + mean) * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
        h, w = round(x.shape[2] * self.map_scale), round(x.shape[3] * self.map_scale)
        score, geo = torch.zeros(len(x), 1, h, w), torch.zeros(len(x), 5, h, w)
        for k, image in enumerate(images.numpy()):
            if (maps := self.maps.get(input_key(image))) is not None:
                score[k, 0], geo[k] = torch.from_numpy(maps[0].astype(np.float32)), torch.from_numpy(maps[1])
        return score, geo


def page_record(tmp_path, words, size=(240, 180), fmt="png", reason=None, scale=1, name="page") -> ImageRecord:
    """A page of white quads on black, saved at `scale` times the annotation frame `size` (width, height)."""
    w, h = size
    img = np.zeros((h * scale, w * scale, 3), np.uint8)
    for q in words:
        cv2.fillPoly(img, [np.around(np.array(q, np.float64) * scale).astype(np.int32)], (255, 255, 255))
    path = tmp_path / f"{name}.{fmt}"
    Image.fromarray(img).save(path, quality=95) if fmt == "jpg" else Image.fromarray(img).save(path)
    counts = [len(q) for q in words]
    points = np.concatenate([np.asarray(q, np.float32).reshape(-1, 2) for q in words]) if counts else np.zeros((0, 2), np.float32)
    return ImageRecord(name=path.name, path=str(path), source="train.json", width=w, height=h, points=points,
                       offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                       reason=np.full(len(words), CARE, np.uint8) if reason is None else np.asarray(reason, np.uint8),
                       fingerprint="f")


def random_page(seed: int, size=(400, 300), n_words: int = 30, map_scale: float = 0.5) -> Page:
    """A page of random words (quads of any angle, some overlapping, some out of the canvas; don't-care polygons)."""
    rng = np.random.default_rng(seed)
    words, care = [], []
    for _ in range(n_words):
        c, w, h, t = rng.uniform(-20, np.add(size, 20)), rng.uniform(4, 120), rng.uniform(4, 40), rng.uniform(-np.pi, np.pi)
        box = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2 + rng.normal(0, 1, (4, 2))
        quad = box @ np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]]) + c
        legible = rng.random() > 0.2
        words.append(quad if legible else quad[: rng.integers(3, 5)])
        care.append(int(legible))
    offsets = np.concatenate([[0], np.cumsum([len(q) for q in words])]).astype(np.int64)
    points, care = np.concatenate(words).astype(np.float32), np.array(care, np.uint8)
    shape = (round(size[1] * map_scale), round(size[0] * map_scale))
    quads = points.astype(np.float64)[np.repeat(care > 0, np.diff(offsets))].reshape(-1, 4, 2)
    image = rng.integers(0, 256, (3, size[1], size[0]), np.uint8)
    maps = pack_maps(owner_map(quads, map_scale, shape), roi_map(points, offsets, care, map_scale, shape))
    return Page(Tiled.from_array(image, TILE_PX), Tiled.from_array(maps, map_tile(map_scale)), points, offsets,
                care, min_rect_angles(quads), np.full(len(quads), 1 / max(1, len(quads))))


def photo(h: int = 232, w: int = 300, seed: int = 0) -> np.ndarray:
    """(h, w, 3) uint8 like a page warped from a camera photo: a photo at twice the size (uneven light over a
    textured table, a paper rectangle with lines of dark, slightly coloured text and a red stamp, lens blur, sensor
    noise) shrunk by half, as a phone's 12 MP photo is to a 2048 px page. Its JPEG takes more bytes than a page of
    real receipt photos at the same quality (harder to compress, so a fair test of the bound)."""
    rng = np.random.default_rng(seed)
    H, W = 2 * h, 2 * w
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    light = 0.8 + 0.2 * np.sin(xx / W * 3 + rng.uniform(0, 6)) * np.cos(yy / H * 2)
    grain = cv2.resize(rng.uniform(-15, 15, (H // 8, W // 40)).astype(np.float32), (W, H))
    img = np.array([120, 80, 50], np.float32) + grain[..., None]
    x0, y0 = W // 8, H // 10
    img[y0:H - y0, x0:W - x0] = rng.uniform(215, 240)
    img = img.astype(np.uint8)   # cv2 draws text on 8 bits
    for k, y in enumerate(range(y0 + 28, H - y0 - 8, 48)):
        text = "".join(chr(c) for c in rng.integers(97, 123, 12))
        ink = (170, 30, 40) if k == 3 else tuple(int(v) for v in rng.integers(0, 60) + rng.integers(0, 20, 3))
        cv2.putText(img, text, (x0 + 12, y), cv2.FONT_HERSHEY_SIMPLEX, 0.9, ink, 2, cv2.LINE_AA)
    img = cv2.GaussianBlur(img * light[..., None], (0, 0), 0.8) + rng.normal(0, 3, (H, W, 3))
    return cv2.resize(np.clip(img, 0, 255).astype(np.uint8), (w, h), interpolation=cv2.INTER_AREA)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


KS_CRITICAL = 1.36   # Kolmogorov-Smirnov at 5%: D < 1.36 / sqrt(n)


def ks_uniform(values, lo: float, hi: float) -> float:
    """The Kolmogorov-Smirnov statistic of values against U[lo, hi]."""
    x = np.sort((np.asarray(values) - lo) / (hi - lo))
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - x), np.max(x - np.arange(n) / n)))


def assert_reads_as(ds, compact, key, score: np.ndarray, geo: np.ndarray, roi: np.ndarray) -> dict:
    """A reference's maps against the reader, bit for bit: item `key` of the CacheDataset ds (score, roi, geo as its
    float16), and the same item of its compact twin through train.py's path (collated, score and geometry rebuilt
    where the batch goes: reader/expand.py), its image the item's too. Returns the item."""
    item = ds[key]
    np.testing.assert_array_equal(item["score"][0], score)
    np.testing.assert_array_equal(item["roi"][0], roi)
    np.testing.assert_array_equal(item["geo"], geo.astype(np.float16))
    batch = expand_batch(collate([compact[key]]))
    assert torch.equal(batch["score"][0, 0], torch.from_numpy(score))
    assert torch.equal(batch["roi"][0, 0], torch.from_numpy(roi))
    assert torch.equal(batch["geo"][0], torch.from_numpy(geo))
    assert torch.equal(batch["image"][0], torch.from_numpy(item["image"]))
    return item


def planted_predictions(gt_images: dict, plan: dict[str, tuple[int, list[float]]], seed: int = 0,
                        score: float | None = 0.9) -> dict:
    """A predictions file's "images" for a UFO file's images: every 4-point word predicted exactly (with
    `score`, None for none), except that plan[name] = (misses, false scores) drops the first `misses` legible
    words and adds one false box per score, where no word lies (None: a false box without a score)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, entry in gt_images.items():
        misses, false_scores = plan.get(name, (0, []))
        words = [w for w in entry["words"].values() if len(w["points"]) == 4]
        legible = [w for w in words if not w.get("illegibility")]
        dropped = {id(w) for w in legible[:misses]}
        boxes = [np.array(w["points"], float) for w in words]
        kept = [(b, score) for w, b in zip(words, boxes) if id(w) not in dropped]
        taken = [np.r_[b.min(0), b.max(0)] for b in boxes]
        for s in false_scores:
            for _ in range(1000):   # a 24 x 12 px box that touches no word and no other false box
                x, y = rng.uniform(0, entry["img_w"] - 25), rng.uniform(0, entry["img_h"] - 13)
                r = np.array([x - 2, y - 2, x + 26, y + 14])
                if all(r[2] < t[0] or t[2] < r[0] or r[3] < t[1] or t[3] < r[1] for t in taken):
                    break
            else:
                raise ValueError(f"{name}: no free spot for a false box")
            taken.append(r)
            kept.append((np.array([[x, y], [x + 24, y], [x + 24, y + 12], [x, y + 12]]), s))
        out[name] = {"words": {str(k + 1): {"points": b.round(2).tolist(), **({} if s is None else {"score": s})}
                               for k, (b, s) in enumerate(kept)}}
    return out
