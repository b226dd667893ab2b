"""Several predictions files scored against one ground truth, side by side: `east-cache evaluate --pred A --pred B
...`, so that choosing among folds, an ensemble and test-time scales is one command.

One row per file: DetEval precision, recall and hmean over all images (scoring.score, the same figures a single
--pred prints), and per image which file scores the highest image hmean: `best` counts the images where a file's
is the highest (ties counted for each tied file; an image without cared-for words and detections scores 1 for
every file), `alone` those where it is higher than every other file's.
"""
from __future__ import annotations

import numpy as np


def compare(results: list[dict]) -> list[dict]:
    """scoring.score()'s results of several predictions over one ground truth, per_image left out, each with
    "best" and "alone" (the module docstring)."""
    names = sorted(results[0]["per_image"])
    per_image = np.array([[r["per_image"][name].hmean for name in names] for r in results]).reshape(len(results), -1)
    best = per_image == per_image.max(axis=0, initial=0.0)
    alone = best & (best.sum(axis=0) == 1)
    return [{**{k: v for k, v in r.items() if k != "per_image"}, "best": int(b.sum()), "alone": int(o.sum())}
            for r, b, o in zip(results, best, alone)]


def table(rows: list[dict], paths: list) -> str:
    """The markdown table `evaluate` prints for several --pred files."""
    first = rows[0]
    lines = [f"{first['metric']} DetEval over {first['images']} images, {first['gt_care']} cared-for words; best: "
             f"images where the file's hmean is the highest (ties count for each), alone: higher than every other's",
             "", "| predictions | precision | recall | hmean | detections | best | alone |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {path} | {r['precision']:.4f} | {r['recall']:.4f} | {r['hmean']:.4f} | {r['detections']} | "
              f"{r['best']} | {r['alone']} |" for path, r in zip(paths, rows)]
    return "\n".join(lines)
