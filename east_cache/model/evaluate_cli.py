"""The flags of `east-cache evaluate` (`python -m preprocess evaluate`) and the command itself: UFO predictions
scored against UFO ground truth. The flags load nothing; the scorer is imported when the command runs."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from east_cache.location import flag_location
from east_cache.config import DEFAULT_IGNORE_TAGS, BuildConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = BuildConfig()
    p.add_argument("--gt", type=flag_location, required=True,
                   help="ground truth: a UFO file such as ROOT/ufo/val.json (a path or a URL)")
    p.add_argument("--pred", type=flag_location, required=True,
                   help='predictions: UFO JSON {"images": {name: {"words": {"1": {"points": [[x, y], ...]}}}}}; '
                        "a gt image missing from it has no detections")
    p.add_argument("--metric", choices=("rect", "poly"), default="rect",
                   help="rect: DetEval on enclosing axis-aligned rectangles, as the UFO competition scores; "
                        "poly: DetEval on polygon areas (default: rect)")
    p.add_argument("--per-image", type=Path, metavar="CSV",
                   help="also write one CSV row of counts and scores per image (default: none)")
    p.add_argument("--json", action="store_true", help="print the totals as one JSON object")
    # which words are don't-care: the build's rules and defaults (use the flags the cache was built with)
    p.add_argument("--ignore-tags", default=",".join(DEFAULT_IGNORE_TAGS),
                   help="comma-separated word tags that make a don't-care word (default: %(default)s)")
    p.add_argument("--min-area", type=float, default=d.min_area,
                   help="px^2; smaller words are don't-care (default: %(default)s)")
    p.add_argument("--drop-area", type=float, default=d.drop_area,
                   help="px^2; smaller words are dropped (default: %(default)s)")
    p.add_argument("--fit-polygons", action="store_true",
                   help="fit words with 5+ points to a min-area quad instead of making them don't-care")


def run(a: argparse.Namespace) -> int:
    from east_cache.model.scoring import (
        load_ground_truth,
        load_predictions,
        report,
        score,
        write_per_image,
    )
    rules = BuildConfig(ignore_tags=tuple(t.strip() for t in a.ignore_tags.split(",") if t.strip()),
                        min_area=a.min_area, drop_area=a.drop_area, fit_polygons=a.fit_polygons)
    gt = load_ground_truth(a.gt, rules)
    result = score(gt, load_predictions(a.pred, gt), a.metric)
    if a.per_image:
        write_per_image(a.per_image, result)
    print(json.dumps({k: v for k, v in result.items() if k != "per_image"}) if a.json else report(result))
    return 0
