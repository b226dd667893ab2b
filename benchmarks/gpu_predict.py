"""bench_gpu.py's prediction arm: full-image prediction at steady state (the model loaded and warmed up, the first
batch apart), s/image through east_cache.predict.predict.predict, and where the time goes per image: decode, resize,
the model (fp16 autocast on CUDA, copies included), map decoding and NMS, the last two with this project's decode
and with the decode it replaced (tests/reference_decode.py), on the same maps.

The benchmark's model is untrained, and an untrained model's maps hold no word: its map decoding would cost
nothing. So the model runs as it is, and its output is replaced by the pages' ground-truth maps (make_targets at
the input's scale), what a trained model outputs: map decoding then costs what it will in use.
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np
import reference_decode
import torch
from common import median_time

from east_cache.config import BuildConfig
from east_cache.ingest.imageio import decode_image
from east_cache.ingest.ufo import CARE, load_splits
from east_cache.model import decode
from east_cache.model.model import EAST
from east_cache.predict.pages import Page, input_geometry, load_input, plan_batches
from east_cache.predict.predict import PredictConfig, forward, predict
from east_cache.sample.targets import make_targets

WARMUP_BATCHES = 1   # batches run before any timing: cuDNN's choice, the allocator, the loader threads


def pages_of(root) -> tuple[list[Page], list]:
    records, _ = load_splits([root], "train", BuildConfig())
    return [Page(r.name, r.path, r.width, r.height) for r in records], records


def truth_maps(rec, cfg: PredictConfig) -> tuple[np.ndarray, np.ndarray]:
    """score (h, w) float32 and geo (5, h, w) of a page's words at the padded input's map size: the maps a
    perfect model outputs."""
    scale, _, (ph, pw) = input_geometry(Page(rec.name, rec.path, rec.width, rec.height), cfg.image_size)
    side = max(ph, pw)
    score, geo, _ = make_targets(rec.points * scale, rec.offsets, (rec.reason == CARE).astype(np.uint8), side,
                                 cfg.map_scale)
    mh, mw = round(ph * cfg.map_scale), round(pw * cfg.map_scale)
    return score[:mh, :mw].astype(np.float32), geo[:, :mh, :mw]


class TruthOut(torch.nn.Module):
    """The model run on every batch, its output replaced by the next batch's ground-truth maps (device-resident,
    so that copying them to the host waits for the model's work, as copying its own output would)."""

    def __init__(self, model, maps: list[tuple[torch.Tensor, torch.Tensor]]):
        super().__init__()
        self.model, self.maps, self.k = model, maps, 0

    def forward(self, x):
        self.model(x)
        out = self.maps[self.k % len(self.maps)]
        self.k += 1
        return out


def batch_maps(pages, records, cfg: PredictConfig, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    by_name = {r.name: r for r in records}
    out = []
    for batch in plan_batches(pages, cfg.image_size, cfg.batch_size):
        maps = [truth_maps(by_name[p.name], cfg) for p in batch]
        out.append((torch.from_numpy(np.stack([s for s, _ in maps]))[:, None].to(device),
                    torch.from_numpy(np.stack([g for _, g in maps])).to(device)))
    return out


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prediction(root, image_size: int, batch_size: int, device: torch.device, repeat: int) -> dict:
    """{"per_image": s/image of predict() at steady state, "stages": {stage: s/image}, "pages", "candidates"}."""
    pages, records = pages_of(root)
    cfg = PredictConfig(image_size=image_size, map_scale=0.5, batch_size=batch_size)
    torch.manual_seed(0)
    net = EAST(cfg.map_scale).to(device, memory_format=torch.channels_last).eval()
    model = TruthOut(net, batch_maps(pages, records, cfg, device))
    first = [p for b in plan_batches(pages, image_size, batch_size)[:WARMUP_BATCHES] for p in b]
    predict(model, first, cfg, device, progress=False)
    sync(device)
    model.k = 0
    t0 = time.perf_counter()
    predict(model, pages, cfg, device, progress=False)
    sync(device)
    per_image = (time.perf_counter() - t0) / len(pages)
    return {"per_image": per_image, "pages": len(pages), **stage_times(net, pages, records, cfg, device, repeat)}


def stage_times(net, pages, records, cfg: PredictConfig, device, repeat: int) -> dict:
    """Median s/image of each stage, one after the other on this thread (predict overlaps the loading with the
    model on LOADER_THREADS threads; these are the costs it overlaps)."""
    def decode_only(p: Page):
        decode_image(p.path, p.width, p.height, input_geometry(p, cfg.image_size)[0])
    stages = {"decode (EXIF-aware, DCT-reduced)": statistics.median(median_time(lambda p=p: decode_only(p), repeat)
                                                                    for p in pages)}
    load = statistics.median(median_time(lambda p=p: load_input(p, cfg.image_size), repeat) for p in pages)
    stages["resize (one warp) and padding"] = max(0.0, load - stages["decode (EXIF-aware, DCT-reduced)"])
    batches = plan_batches(pages, cfg.image_size, cfg.batch_size)
    inputs = [np.stack([load_input(p, cfg.image_size) for p in b]) for b in batches]
    forward(net, inputs[0], device)   # warm-up: the first batch's shape
    sync(device)

    def model_all() -> None:
        for x in inputs:
            forward(net, x, device)   # copies to the device and back included; the copy back syncs
    stages["model (forward, fp16 autocast on CUDA; copies in and out)"] = median_time(model_all, repeat) / len(pages)
    maps = [truth_maps(r, cfg) for r in records]
    candidates = [np.nonzero(s > cfg.score_thresh) for s, _ in maps]
    merged = []
    for name, impl in (("", decode), (" (before)", reference_decode)):
        def restore_merge(impl=impl) -> None:
            merged.clear()
            for (s, g), (ys, xs) in zip(maps, candidates):
                q = decode.restore_quads(xs, ys, g[:, ys, xs], cfg.map_scale)
                args = (decode.stretch_starts(xs, ys),) if impl is decode else ()
                merged.append(impl.merge_runs(q, s[ys, xs].astype(np.float64), cfg.nms_thresh, *args))

        def nms_all(impl=impl) -> None:
            for q, sums, _ in merged:
                impl.nms(q, sums, cfg.nms_thresh)
        stages[f"map decoding: quads, locality-aware merge{name}"] = median_time(restore_merge, repeat) / len(pages)
        stages[f"NMS{name}"] = median_time(nms_all, repeat) / len(pages)
    return {"stages": stages, "candidates": int(np.mean([len(ys) for ys, _ in candidates])),
            "merged": int(np.mean([len(m[0]) for m in merged]))}   # m: (quads, sums, ...)


def prediction_rows(r: dict) -> tuple[list, list]:
    """(summary row, stage rows [stage, ms per image, share of the stages' sum (this project's decode)])."""
    now = {k: v for k, v in r["stages"].items() if not k.endswith("(before)")}
    total = sum(now.values())
    rows = [[k, f"{1e3 * v:.1f}", f"{100 * v / total:.0f}%" if k in now else "", ] for k, v in r["stages"].items()]
    before = sum(v for k, v in r["stages"].items() if k.endswith("(before)"))
    after = sum(v for k, v in now.items() if k.startswith(("map decoding", "NMS")))
    rows.append(["map decoding + NMS, before / now", f"{1e3 * before:.1f} / {1e3 * after:.1f}",
                 f"{before / after:.1f}x faster" if after > 0 and math.isfinite(before / after) else ""])
    return [str(r["pages"]), f"{r['per_image']:.3f}", f"{total:.3f}", str(r["candidates"]), str(r["merged"])], rows
