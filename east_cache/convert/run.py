"""convert(): read a source set with its format's reader, apply the shared rules, write ROOT, summarise."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

from east_cache.convert import FORMATS
from east_cache.convert.rules import SHOW_BAD, Page, Problems, Source, Summary, frame_size, orient
from east_cache.convert.writer import IMAGES_DIR, check_output, check_prefix, ufo_path, write_root
from east_cache.errors import DataError, UsageError
from east_cache.inputs import Input, refuse_overwrite

# The files of a source folder that a reader reads: those at its top (annotations, and images beside them), and
# cord's json/ and image/. A root converted into the folder (--out SRC, SRC/conv) is none of them.
SOURCE_READS = ("*", "json/*", "image/*")


def convert(fmt: str, src, out, split: str = "train", copy: bool = False, prefix: str = "",
            skip_bad: bool = False, force: bool = False, images=None, subset: str | None = None) -> Summary:
    """Convert SRC in format `fmt` into ROOT=out: out/images/ and out/ufo/{split}.json."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    src, out = Path(src), Path(out)
    if not src.exists():
        raise UsageError(f"{src}: no such file or folder; give the {fmt} annotations as SRC")
    if images is not None and not Path(images).is_dir():
        raise UsageError(f"--images {images}: not a folder")
    check_output(out, split, force)
    # images already where the root wants them (--images ROOT/images): they stay as they are, only ufo/ is written
    in_place = images is not None and (out / IMAGES_DIR).is_dir() and os.path.samefile(images, out / IMAGES_DIR)
    refuse_overwrite("--out", out, [Input("the source SRC", src, tree=src.is_dir(), reads=SOURCE_READS),
                                    Input("the images --images", images, tree=True)],
                     (ufo_path(".", split).as_posix(), *(() if in_place else (IMAGES_DIR,))))
    check_prefix(prefix)
    module, reader, trusted, _ = FORMATS[fmt]
    read = getattr(importlib.import_module(f"east_cache.convert.{module}"), reader)
    summary = Summary()
    problems = Problems(summary, skip_bad)
    entries, sources = {}, {}
    # A multi-set source (COCO-Text) keeps the set named like the output split unless --subset says otherwise.
    for page in read(Source(src, Path(images) if images else None, subset or split), problems):
        name = prefix + page.image.name
        if name in sources:
            problems.bad(page.where, f"a second image named {name} ({page.image}; the first is {sources[name]}); "
                                     f"image names must be unique within a split", image=True)
            continue
        try:
            entries[name] = _entry(page, trusted, summary)
        except DataError as e:
            if not skip_bad:
                raise
            summary.bad_images.append((page.where, str(e)))
            continue
        sources[name] = page.image
    if in_place:
        moved = next((n for n, path in sources.items() if not _same(path, out / IMAGES_DIR / n)), None)
        if moved is not None:
            raise UsageError(f"--images {images} is {out / IMAGES_DIR}, which stays as it is: each image must lie there "
                             f"under the name the UFO file gives it, and {sources[moved]} would be {moved} (a --prefix "
                             f"or a subfolder); nothing was written. Give --images the folder the images lie in "
                             f"elsewhere, or leave out --prefix")
    write_root(out, split, entries, sources, copy, force)
    summary.images, summary.in_place = len(entries), in_place
    return summary


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:   # b missing, or a dangling link
        return False


def _entry(page: Page, trusted: bool, summary: Summary) -> dict:
    """The UFO image entry of a page; counts its words only once the page is certain to be written."""
    w, h = frame_size(page.image, page.size, page.where, summary)
    words, fixed = {}, 0
    for i, word in enumerate(page.words, 1):
        points, ccw = orient(word.points, trusted)
        fixed += ccw
        words[str(i)] = {"points": [[_number(x), _number(y)] for x, y in points], "transcription": word.text,
                         "illegibility": word.illegible, "tags": []}
    summary.words += len(words)
    summary.illegible += sum(w.illegible for w in page.words)
    summary.polygons += sum(len(w.points) > 4 for w in page.words)
    summary.fixed += fixed
    return {"img_w": w, "img_h": h, "words": words}


def _number(v: float):
    """Whole coordinates as integers, as the sources mostly write them."""
    return int(v) if float(v).is_integer() else v


def describe(fmt: str, src, out, split: str, copy: bool, s: Summary) -> str:
    """The end-of-run summary printed by the CLI."""
    lines = [(f"converted {fmt} {src} -> {ufo_path(out, split)}: {s.images} images, {s.words} words "
              f"({s.words - s.illegible} legible, {s.illegible} illegible), {s.fixed} counter-clockwise words "
              f"written clockwise, {s.polygons} polygons with more than 4 points"),
             f"images already in {Path(out) / IMAGES_DIR}, left as they are" if s.in_place else
             f"images {'copied' if copy else 'linked'} into {Path(out) / IMAGES_DIR}"]
    if s.stored_layout:
        lines.append(f"{s.stored_layout} image(s) annotated on their stored layout (EXIF orientation not applied); "
                     f"the build does the same")
    for what, bad in (("line(s)", s.bad_lines), ("image(s)", s.bad_images)):
        if bad:
            shown = "; ".join(f"{where}: {why}" for where, why in bad[:SHOW_BAD])
            more = f"; and {len(bad) - SHOW_BAD} more" if len(bad) > SHOW_BAD else ""
            lines.append(f"--skip-bad: skipped {len(bad)} {what} ({shown}{more})")
    return "\n".join(lines)
