"""`python predict.py` / `east-predict`: a checkpoint's predictions on a split or a folder of images, written as
a UFO JSON submission file. Errors print as one `error: ...` line."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from east_cache.location import flag_location
from east_cache.model.decode import NMS_THRESH, SCORE_THRESH
from east_cache.model.predict import (
    PredictConfig,
    pages_from_folder,
    pages_from_split,
    predict,
    write_predictions,
)
from east_cache.cli import invoked_as
from east_cache.errors import BuildError, CacheError, DataError, UsageError

SHOW_SKIPPED = 5   # skipped images named in the summary line
SCRIPT = "predict.py"   # how usage names the command unless it was started otherwise (east-predict)


def get_parser(prog: str = SCRIPT) -> argparse.ArgumentParser:
    d = PredictConfig(image_size=1024, map_scale=0.5)
    p = argparse.ArgumentParser(prog=prog, description="Predict words on full images with a trained "
                                "checkpoint; write them as a UFO JSON submission file.")
    p.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint train.py wrote, e.g. runs/east/latest.pt")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=flag_location, metavar="ROOT",
                     help="dataset root, a folder or a URL (s3://bucket/set): predicts the images of ROOT/ufo/{split}.json")
    src.add_argument("--images", type=Path, metavar="DIR", help="a plain folder: predicts every image file in it")
    p.add_argument("--split", default="test", help="with --data: which ufo/{split}.json names the images (default: test)")
    p.add_argument("--out", type=Path, default=Path("predictions.json"),
                   help="UFO JSON to write, atomically (default: predictions.json)")
    p.add_argument("--image-size", type=int,
                   help="px, long side each image is resized to (default: the image_size of the cache the checkpoint "
                        "was trained on)")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help=f"images per forward pass; images are batched with others of the same padded shape "
                        f"(default {d.batch_size})")
    p.add_argument("--device", help="cuda, cuda:1, cpu (default: cuda when available)")
    p.add_argument("--score-thresh", type=float, default=SCORE_THRESH,
                   help=f"a map pixel is a word candidate when its score is above this (default {SCORE_THRESH})")
    p.add_argument("--nms-thresh", type=float, default=NMS_THRESH,
                   help=f"IoU above which two candidate quads are one word (default {NMS_THRESH})")
    p.add_argument("--skip-bad", action="store_true",
                   help="name and skip a missing or undecodable image instead of stopping (it gets no entry)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    return p


def run(argv: list[str] | None = None) -> None:
    a = get_parser(invoked_as(sys.argv[0], "python -m east_cache.model.predict_cli", "predict_cli.py") if argv is None
                   else SCRIPT).parse_args(argv)
    # the images first: a missing one is named before the model is loaded
    pages, skipped = (pages_from_split(a.data, a.split, a.skip_bad) if a.data is not None
                      else pages_from_folder(a.images, a.skip_bad))
    from east_cache.model.checkpoint import (  # torch model code: after the flags and the images are checked
        inference_model,
        load_checkpoint,
    )
    from east_cache.model.runtime import setup_device
    ck = load_checkpoint(a.checkpoint)
    try:
        cfg = PredictConfig(image_size=a.image_size or ck["config"]["image_size"], map_scale=ck["config"]["map_scale"],
                            batch_size=a.batch_size, score_thresh=a.score_thresh, nms_thresh=a.nms_thresh,
                            skip_bad=a.skip_bad)
    except ValueError as e:
        raise UsageError(f"{e}; see --help") from None
    device = setup_device(a.device).device
    model = inference_model(ck, a.checkpoint, device)
    t0 = time.perf_counter()
    results, bad = predict(model, pages, cfg, device, progress=not a.quiet)
    took = time.perf_counter() - t0
    write_predictions(a.out, results)
    skipped += bad
    if not a.quiet:
        words = sum(len(q) for q, _ in results.values())
        print(f"{a.out}: {len(results)} images, {words} words [{took:.1f} s, {len(results) / max(took, 1e-9):.2f} "
              f"images/s at --image-size {cfg.image_size} on {device}]", file=sys.stderr)
    if skipped:
        shown = "; ".join(f"{name}: {why}" for name, why in skipped[:SHOW_SKIPPED])
        more = f"; and {len(skipped) - SHOW_SKIPPED} more" if len(skipped) > SHOW_SKIPPED else ""
        print(f"--skip-bad: skipped {len(skipped)} image(s): {shown}{more}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    try:
        run(argv)
    except (DataError, UsageError, CacheError, BuildError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:   # --out not writable, a full disk: the previous file, if any, is unchanged
        print(f"error: {e}; the previous --out file, if any, is unchanged", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
