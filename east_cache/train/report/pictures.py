"""The pictures a run reports: its first training batch's crops with their targets (as `east-cache show` draws a
crop: the score map in red, don't-care regions darkened and hatched), and at each evaluation on --val-data the
worst validation images by DetEval hmean with their matched, missed and false words (as `east-cache review`
draws them)."""
from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from east_cache.ingest.ufo import ImageRecord
from east_cache.evaluate import review
from east_cache.evaluate import review_draw as rd
from east_cache.evaluate.deteval import ImageCounts
from east_cache.evaluate.scoring import Words
from east_cache.reader.images import IMAGENET_MEAN, IMAGENET_STD
from east_cache.inspect.draw import GAP, crop_panel

BATCH_CROPS = 8          # crops of the first batch drawn, at most
BATCH_COLUMNS = 4        # of them in a row
WORST_PAGES = 4          # validation images drawn at each evaluation
PAGE_SIDE = 768          # px, long side of a validation picture


def batch_picture(image, score, roi) -> np.ndarray:
    """(H, W, 3) uint8: up to BATCH_CROPS crops of a training batch (a Loader's Batch: image normalised with the
    ImageNet mean and std and colour-jittered as the model sees it, score and roi maps), each with its targets,
    BATCH_COLUMNS to a row. One copy to the host."""
    n = min(BATCH_CROPS, len(image))
    mean, std = np.array(IMAGENET_MEAN).reshape(3, 1, 1), np.array(IMAGENET_STD).reshape(3, 1, 1)
    pixels = image[:n].detach().float().cpu().numpy() * std + mean
    crops = np.clip(np.rint(pixels * 255), 0, 255).astype(np.uint8)
    maps = [m[:n].detach().cpu().numpy().astype(np.uint8) for m in (score, roi)]
    no_words = np.zeros((0, 2), np.float32), np.zeros(1, np.int64), np.zeros(0, np.uint8)
    panels = [crop_panel(crops[i], maps[0][i], maps[1][i], *no_words) for i in range(n)]
    s = panels[0].shape[0]
    cols = min(n, BATCH_COLUMNS)
    rows = -(-n // cols)
    sheet = np.full((rows * (s + GAP) - GAP, cols * (s + GAP) - GAP, 3), 255, np.uint8)
    for i, p in enumerate(panels):
        y, x = (i // cols) * (s + GAP), (i % cols) * (s + GAP)
        sheet[y:y + s, x:x + s] = p
    return sheet


def batch_caption(n: int, step: int) -> str:
    return (f"the first training batch at step {step}: {min(n, BATCH_CROPS)} crops as the model sees them; red: "
            f"score (text), darkened and hatched: don't care")


class Seen(NamedTuple):
    hmean: float
    name: str
    record: ImageRecord
    found: Words
    scores: np.ndarray


class WorstPages:
    """Collects each validated image's predictions (validate.full_page_metrics calls it) and keeps the k worst by
    hmean (then recall, then name), to be drawn once the evaluation is done."""

    def __init__(self, k: int = WORST_PAGES):
        self.k, self.heap = k, []

    def __call__(self, rec: ImageRecord, found: Words, scores: np.ndarray, counts: ImageCounts) -> None:
        key = (-counts.hmean, -counts.recall, rec.name)   # heapq keeps the k largest keys: the worst
        item = (key, len(self.heap), Seen(counts.hmean, rec.name, rec, found, np.asarray(scores, np.float64)))
        if len(self.heap) < self.k:
            heapq.heappush(self.heap, item)
        elif key > self.heap[0][0]:
            heapq.heapreplace(self.heap, item)

    def pictures(self) -> list[tuple[str, np.ndarray]]:
        """(caption, (H, W, 3) uint8) of the kept images, worst first."""
        return [page_picture(item[2]) for item in sorted(self.heap, reverse=True)]


def page_picture(seen: Seen) -> tuple[str, np.ndarray]:
    gt = Words.from_record(seen.record)
    counts, gt_state, det_state = review.classify(gt, seen.found)
    pic = rd.Picture(gt.points, gt.offsets, gt_state, seen.found.points, seen.found.offsets, det_state, seen.scores)
    frame = (seen.record.width, seen.record.height)
    image, k, note = rd.page_pixels(seen.record.path, frame, PAGE_SIDE, skip_bad=True)
    drawn = rd.draw_words(image, pic, k, 2, scores=True)
    head = f"{seen.name}: {frame[0]}x{frame[1]} px, drawn at {k:.2f}x" + (f"; {note}" if note else "")
    line = f"DetEval (rect): precision {counts.precision:.3f}  recall {counts.recall:.3f}  hmean {counts.hmean:.3f}"
    figure = rd.with_legend(drawn, head, line, rd.counts_of(pic))
    return f"{head}; {line}", np.asarray(figure)
