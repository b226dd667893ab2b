"""Full-image prediction, and the command that runs it: `east-predict` (`python predict.py`).

Each image is loaded as pages.py says (decoded as the build decodes it, resized so that its long side is image_size,
padded to a multiple of the backbone's stride), batched with images of the same padded shape, run through the model
(fp16 autocast on CUDA), decoded to quads (east_cache.model.decode) and mapped back to the image's own pixel
frame, clipped to it: the frame the UFO annotations use, so that the quads score against them directly. The
file written is UFO JSON marked as predictions (east_cache.evaluate.predictions.to_ufo).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from east_cache.bounds import COUNT, MAX_IMAGE_SIDE, THREADS, Bound, check_number, flag_number
from east_cache.location import flag_location
from east_cache.reader.images import prepare_images
from east_cache.model.decode import NMS_THRESH, SCORE_THRESH, decode_maps
from east_cache.predict.pages import (LOADER_THREADS, STRIDE, Page, input_geometry, loaded, pages_from_folder,
                                     pages_from_split, plan_batches)
from east_cache.predict.fusion import FUSE, FUSE_DEFAULT, load_models, runs
from east_cache.predict.maps import MapStats, map_warning
from east_cache.predict.device import setup_device, setup_threads
from east_cache.evaluate.ensemble import fuse
from east_cache.evaluate.predictions import write_predictions
from east_cache.errors import CommandParser, UsageError, run_command, stderr_line
from east_cache.inputs import Input, check_output, refuse_overwrite
from east_cache.ingest.ufo import dataset_inputs
from east_cache.progress import Progress

SHOW_SKIPPED = 5              # skipped images named in the summary line
SCRIPT = "predict.py"         # how usage names the command unless it was started otherwise (east-predict)
IMAGE_SIZE = Bound(least=STRIDE, most=MAX_IMAGE_SIDE, note="px")   # --image-size, --scales: a stride at least
THRESHOLD = Bound(integer=False, above=0, below=1)           # --score-thresh, --nms-thresh


@dataclass(frozen=True)
class PredictConfig:
    image_size: int                     # px, long side of every image after resizing (the training cache's)
    map_scale: float                    # the model's output resolution / input resolution
    batch_size: int = 4                 # images per forward pass, all of one padded shape
    score_thresh: float = SCORE_THRESH  # a map pixel is a word candidate when its score is above this
    nms_thresh: float = NMS_THRESH      # IoU above which two candidate quads are one word
    skip_bad: bool = False              # name and skip an undecodable image instead of stopping

    def __post_init__(self) -> None:
        for name, bound in (("image_size", IMAGE_SIZE), ("batch_size", COUNT), ("score_thresh", THRESHOLD),
                            ("nms_thresh", THRESHOLD)):
            check_number(name, getattr(self, name), bound)


@torch.no_grad()
def forward(model, images: np.ndarray, device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """score (B, h, w) and geo (B, 5, h, w) float32 of uint8 images (B, H, W, 3); fp16 autocast on CUDA."""
    x = prepare_images(torch.from_numpy(images).to(device, non_blocking=True).permute(0, 3, 1, 2), 0.0)
    with torch.autocast(device.type, dtype=torch.float16, enabled=device.type == "cuda"):
        score, geo = model(x)
    return score.float()[:, 0].cpu().numpy(), geo.float().cpu().numpy()


def page_quads(score: np.ndarray, geo: np.ndarray, page: Page, cfg: PredictConfig,
               stats: MapStats | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(quads (K, 4, 2) float64 in the page's frame px, clipped to the page, scores (K,)) of one image's maps;
    the padding's map pixels are left out. stats: where the maps' figures are added."""
    scale, (h, w), _ = input_geometry(page, cfg.image_size)
    mh, mw = math.ceil(h * cfg.map_scale), math.ceil(w * cfg.map_scale)
    t = time.perf_counter()
    quads, scores = decode_maps(score[:mh, :mw], geo[:, :mh, :mw], cfg.map_scale, cfg.score_thresh, cfg.nms_thresh)
    if stats is not None:
        stats.add(score[:mh, :mw], cfg.score_thresh, time.perf_counter() - t)
    quads = quads.astype(np.float64) / scale
    np.clip(quads, 0, (page.width, page.height), out=quads)   # a word at the edge reaches past it
    return quads, scores


def predict(model, pages: list[Page], cfg: PredictConfig, device: torch.device, progress: bool = True,
            desc: str = "predict", stats: MapStats | None = None
            ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], list[tuple[str, str]]]:
    """({name: (quads in frame px, scores)}, skipped [(name, why)]) for pages, with a model in eval mode that
    maps normalised images (B, 3, H, W) to score (B, 1, h, w) and geo (B, 5, h, w); the maps' figures added to
    stats where given."""
    results, skipped = predict_passes([(model, cfg.map_scale)], pages, cfg, [cfg.image_size], device, progress, desc,
                                      stats)
    return results[0], skipped


def predict_passes(passes: list[tuple], pages: list[Page], cfg: PredictConfig, sizes: list[int],
                   device: torch.device, progress: bool = True, desc: str = "predict", stats: MapStats | None = None):
    """([{name: (quads in frame px, scores)}, one per pass (model, map scale) of passes at each input size of sizes,
    a pass's sizes in a row], skipped [(name, why)]). Loading apart from inference: each batch of pages is loaded
    once (pages.loaded: decoded once, resized once per size), a few batches ahead, and every pass reads it. Every
    pass's maps' figures are added to stats where given."""
    results, skipped = [{} for _ in range(len(passes) * len(sizes))], []
    batches = plan_batches(pages, sizes, cfg.batch_size)
    with ThreadPoolExecutor(LOADER_THREADS) as pool, \
            Progress(len(pages), "img", quiet=not progress, desc=desc, leave=False) as bar:
        for batch, inputs, bad in loaded(batches, sizes, pool, cfg.skip_bad):
            skipped += bad
            for k, (model, map_scale) in enumerate(passes if batch else []):
                for j, size in enumerate(sizes):
                    at = replace(cfg, image_size=size, map_scale=map_scale)
                    score, geo = forward(model, inputs[size], device)
                    for i, page in enumerate(batch):
                        results[k * len(sizes) + j][page.name] = page_quads(score[i], geo[i], page, at, stats)
            bar.update(len(batch) + len(bad))
    return [dict(sorted(r.items())) for r in results], skipped


def get_parser(prog: str = SCRIPT) -> argparse.ArgumentParser:
    d = PredictConfig(image_size=1024, map_scale=0.5)
    p = CommandParser(prog=prog, description="Predict words on full images with a trained "
                                "checkpoint; write them as a UFO JSON submission file.")
    p.add_argument("--checkpoint", type=Path, required=True, action="append",
                   help="a checkpoint train.py wrote, e.g. runs/east/latest.pt; give it once per checkpoint to "
                        "predict with several (k folds' models): see --fuse")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=flag_location, metavar="ROOT",
                     help="dataset root, a folder or a URL (s3://bucket/set): predicts the images of "
                          "ROOT/ufo/{split}.json")
    src.add_argument("--images", type=Path, metavar="DIR", help="a plain folder: predicts every image file in it")
    p.add_argument("--split", default="test",
                   help="with --data: which ufo/{split}.json names the images (default: test)")
    p.add_argument("--out", type=Path, default=Path("predictions.json"),
                   help="UFO JSON to write, atomically (default: predictions.json)")
    p.add_argument("--image-size", type=flag_number(IMAGE_SIZE),
                   help="px, long side each image is resized to (default: the image_size of the cache the checkpoint "
                        "was trained on)")
    p.add_argument("--scales", type=scale_list, metavar="SIZES",
                   help="test-time scales: comma-separated --image-size values, e.g. 1536,2048; the image is predicted "
                        "at each and the words fused as `ensemble` fuses files (default: none, --image-size alone)")
    p.add_argument("--fuse", choices=FUSE, default=FUSE_DEFAULT,
                   help="several --checkpoint: maps averages their score and geometry maps before one decode (their "
                        "caches' map scales must agree); quads decodes each and fuses the words (default "
                        f"{FUSE_DEFAULT}: one decode; docs/performance.md compares them)")
    p.add_argument("--votes", type=flag_number(COUNT),
                   help="where words are fused (--scales, --fuse quads): passes that must have found a word for it "
                        "to be kept (default: a majority of the passes)")
    p.add_argument("--batch-size", type=flag_number(COUNT), default=d.batch_size,
                   help=f"images per forward pass; images are batched with others of the same padded shape "
                        f"(default {d.batch_size})")
    p.add_argument("--device", help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--threads", type=flag_number(THREADS), metavar="N",
                   help="torch's intra-op threads, for the model's work on a CPU (default: torch's, one per core)")
    p.add_argument("--score-thresh", type=flag_number(THRESHOLD), default=SCORE_THRESH,
                   help=f"a map pixel is a word candidate when its score is above this (default {SCORE_THRESH})")
    p.add_argument("--nms-thresh", type=flag_number(THRESHOLD), default=NMS_THRESH,
                   help=f"IoU above which two candidate quads are one word (default {NMS_THRESH})")
    p.add_argument("--skip-bad", action="store_true",
                   help="name and skip a missing or undecodable image instead of stopping (it gets no entry)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    return p


def scale_list(text: str) -> list[int]:
    """--scales: comma-separated input sizes (px, the long side), each at least one backbone stride and at most
    bounds.MAX_IMAGE_SIDE: sized before any image is."""
    return [flag_number(IMAGE_SIZE)(t.strip()) for t in text.split(",")]


def predict_fused(passes: list[tuple], pages: list[Page], cfg: PredictConfig, sizes: list[int],
                  device: torch.device, votes: int | None = None, progress: bool = True, stats: MapStats | None = None):
    """predict_passes' results, the words of all passes fused (east_cache.evaluate.ensemble.fuse, votes defaulting
    to a majority); one pass: its words as they are. Returns (results, skipped) as predict() does; every pass's
    maps' figures added to stats where given."""
    n = len(passes) * len(sizes)
    outs, skipped = predict_passes(passes, pages, cfg, sizes, device, progress,
                                   "predict" if n == 1 else f"predict ({len(passes)} x {len(sizes)} passes)", stats)
    return (outs[0] if n == 1 else fuse(outs, votes=votes)), skipped


def command_name() -> str:
    """How usage names this command: as `python -m` ran this module, else by the script that ran it."""
    started = Path(sys.argv[0])
    if started.name and started.resolve() == Path(__file__).resolve():
        return "python -m east_cache.predict.predict"
    return started.name or SCRIPT


def run(argv: list[str] | None = None) -> None:
    a = get_parser(command_name() if argv is None else SCRIPT).parse_args(argv)
    setup_threads(a.threads)
    check_output(a.out, "--out", folder=False)
    if a.scales and a.image_size:
        raise UsageError(f"--scales {','.join(map(str, a.scales))} and --image-size {a.image_size}: give one (--scales "
                         f"names every size the images are predicted at)")
    inputs = [*(Input("the checkpoint --checkpoint", c) for c in a.checkpoint),
              Input("the images --images", a.images, tree=True)]
    refuse_overwrite("--out", a.out, [*inputs, *dataset_inputs(a.data, "--data")])
    # the images first: a missing one is named before the model is loaded
    pages, skipped = (pages_from_split(a.data, a.split, a.skip_bad) if a.data is not None
                      else pages_from_folder(a.images, a.skip_bad))
    device = setup_device(a.device).device
    models, cks = load_models(a.checkpoint, device, a.fuse)
    ck = cks[0]
    sizes = a.scales or [a.image_size or ck["config"]["image_size"]]
    if any(IMAGE_SIZE.wrong_kind(s) or not IMAGE_SIZE.contains(s) for s in sizes):   # a checkpoint's own, before use
        raise UsageError(f"{a.checkpoint[0]}: records image_size {ck['config']['image_size']!r}, not "
                         f"{IMAGE_SIZE.accepted()}; pass --image-size")
    try:
        cfg = PredictConfig(image_size=sizes[0], map_scale=ck["config"]["map_scale"], batch_size=a.batch_size,
                            score_thresh=a.score_thresh, nms_thresh=a.nms_thresh, skip_bad=a.skip_bad)
    except ValueError as e:
        raise UsageError(f"{e}; see --help") from None
    passes = runs(models, cks, a.fuse)
    if a.votes is not None and a.votes > len(passes) * len(sizes):
        raise UsageError(f"--votes {a.votes}: more than the {len(passes) * len(sizes)} prediction passes "
                         f"(checkpoints x scales)")
    t0, stats = time.perf_counter(), MapStats()
    results, bad = predict_fused(passes, pages, cfg, sizes, device, a.votes, progress=not a.quiet, stats=stats)
    took = time.perf_counter() - t0
    source = {"checkpoint": str(a.checkpoint[0]), "epoch": ck["epoch"], "image_size": cfg.image_size,
              "score_thresh": cfg.score_thresh, "nms_thresh": cfg.nms_thresh}
    if len(a.checkpoint) > 1 or len(sizes) > 1:
        source.update(checkpoints=[str(c) for c in a.checkpoint], scales=sizes, fuse=a.fuse)
    write_predictions(a.out, results, source)
    skipped += bad
    words = sum(len(q) for q, _ in results.values())
    if not a.quiet:
        at = f"--image-size {cfg.image_size}" if len(sizes) == 1 else f"--scales {','.join(map(str, sizes))}"
        print(f"{a.out}: {len(results)} images, {words} words [{took:.1f} s, {len(results) / max(took, 1e-9):.2f} "
              f"images/s at {at} on {device}]", file=sys.stderr)
    warning = map_warning(stats, cfg.score_thresh, words, len(results), took,
                          f"{', '.join(map(str, a.checkpoint))}, epoch {ck['epoch']}")
    if warning:
        stderr_line(f"warning: {a.out}: {warning}")
    if skipped:
        shown = "; ".join(f"{name}: {why}" for name, why in skipped[:SHOW_SKIPPED])
        more = f"; and {len(skipped) - SHOW_SKIPPED} more" if len(skipped) > SHOW_SKIPPED else ""
        print(f"--skip-bad: skipped {len(skipped)} image(s): {shown}{more}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The command's exit status: 0, or 2 with one `error:` line (130 on Ctrl-C)."""
    return run_command(lambda: run(argv) or 0, argv, kept="the previous --out file, if any, is unchanged")


if __name__ == "__main__":
    sys.exit(main())
