"""`python -m preprocess info CACHE`: what a cache holds and how it was made."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from east_cache.augment import Augment
from east_cache.config import BuildConfig
from east_cache.errors import skipped_reason
from east_cache.ingest.pseudolabels import pseudo_line
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_jpeg import JPEG_TILE_PX, jpeg_settings_words
from east_cache.store.selection import Selection, given_repeat
from east_cache.store.sidecar import quads_path
from east_cache.tools.coverage import TRAIN_EPOCHS, cache_coverage

BLOCK = 512   # bytes per st_blocks unit (POSIX)
REPORTED_EPOCHS = (1, 5, 20)   # coverage is printed after these epochs and after --epochs
CROP_WORDS = {"read": "read: pages cached, a new crop drawn every epoch around a legible word (--crop read)",
              "build": "build: one frozen crop per variant, epoch e reads variant (e + offset) mod K (--crop build)"}


def coverage_line(c: dict) -> str:
    seen = ", ".join(f"{s:.1%} after {e}" for e, s in zip(c["epochs"], c["seen"]))
    of = f" (estimated on {c['images_replayed']} images)" if c["images_replayed"] < c.get("images", 0) else ""
    return (f"legible words seen whole in a training crop: {seen} epochs (of {c['words']}{of}); text-free crops "
            f"{c['text_free']:.1%} (images without legible words {c['blank_pages']:.1%})")


def codec_line(s: dict) -> str:
    """How the cache stores its images, and why."""
    c = s["config"]
    what = (f"jpeg: JPEG tiles of {JPEG_TILE_PX} px at {jpeg_settings_words(BuildConfig.from_dict(c))}, a crop "
            f"decodes those it covers; maps drawn from the words" if s["image_codec"] == "jpeg"
            else "raw: pixels as they are, nothing to decode")
    what = f"{what} ({s['codec_reason']})" if s["codec_reason"] else what
    if s.get("half_level") is None:   # pages stored warped, or crops: no level to read
        return what
    return what + ("; each page's half level stored beside it (--levels), which crops drawn at scale < 0.71 read"
                   if s["half_level"] else "; no half level stored: crops drawn at scale < 0.71 read the page at 1/2 "
                                           "(a build with --levels stores it, and reads them faster)")


def source_lines(s: dict) -> list[str]:
    """Per source, its images and the splits recorded (what east-train --split can name); with a selection (--split,
    --repeat) instead what a run that chose it takes of each source."""
    if s["selection"] is not None:
        return ([f"run        {line}" for line in s["selection"]["lines"]]
                + [f"warning    {note}" for note in s["selection"]["notes"]])
    if not s["sources"]:
        return ["sources    not recorded (an earlier build): `build --out CACHE` records them, computing nothing"]
    return [f"{'sources' if k == 0 else '':11}{x['name']}: {x['images']} images ({x['root']}), splits "
            f"{', '.join(x['splits']) or '-'}" + (f"; unreadable: {', '.join(x['unread'])}" if x["unread"] else "")
            for k, x in enumerate(s["sources"])]


def disk_bytes(path: Path) -> int:
    """Bytes a file takes on disk: its blocks (a file's holes take none), else its size."""
    st = path.stat()
    return st.st_blocks * BLOCK if hasattr(st, "st_blocks") else st.st_size


def summary(cache_dir, epochs: int = TRAIN_EPOCHS, stored: dict | None = None, augment: dict | None = None,
            split: str | None = None, repeat: list[dict] | dict | None = None) -> dict:
    """stored: of a cache at a URL ({"cache": URL, "data_bytes", "quads_bytes"} as listed), whose files are not read;
    augment, split, repeat: as describe's."""
    m = Manifest.load(cache_dir)
    chosen = Selection(m, split, given_repeat(repeat) if isinstance(repeat, list) else repeat, str(cache_dir))
    cfg = m.config
    aug = Augment.of_cache(cfg, **(augment or {}))
    paths = [data_path(Path(cache_dir), f.name) for f in m.files]
    data_bytes = sum(disk_bytes(q) for p in paths if p.exists() for q in m.format.stored_files(p))
    quad_bytes = sum(quads_path(p).stat().st_size for p in paths if quads_path(p).exists())
    reported = [e for e in REPORTED_EPOCHS if e < epochs] + [epochs]
    cov, replayed = (None, 0) if stored else cache_coverage(cache_dir, reported, aug=aug)
    return {
        "cache": str(cache_dir), "strategy": cfg.strategy, "strategy_reason": m.strategy_reason,
        "file_format": m.file_format, "image_codec": cfg.image_codec, "codec_reason": m.codec_reason,
        "half_level": m.spec.kind.half_level if cfg.warps_at_read else None,
        "images": len(m.images), "variants": cfg.variants, "samples": sum(f.rows for f in m.files),
        "files": len(m.files), "record_bytes": m.spec.dtype.itemsize,
        "data_bytes": data_bytes, "quads_bytes": quad_bytes, "build": asdict(m.build), "source": asdict(m.source),
        "config": cfg.to_dict(), "ingest": m.ingest, "notes": m.notes,
        "coverage": {**asdict(cov), "images_replayed": replayed, "images": len(m.images)} if cov else None,
        "augment": aug.to_dict(), "augment_text": aug.describe() if cfg.warps_at_read else None,
        "sources": [{"name": s.name, "root": s.root, "images": sum(x.source == s.name for x in m.members.values()),
                     "splits": s.splits, "unread": s.unread} for s in m.sources or []],
        "selection": {**chosen.to_dict(), "lines": chosen.lines(), "notes": chosen.notes}
        if split is not None or repeat else None,
        **(stored or {}),
    }


def describe(cache_dir, as_json: bool = False, epochs: int = TRAIN_EPOCHS, stored: dict | None = None,
             augment: dict | None = None, split: str | None = None, repeat: list[dict] | dict | None = None) -> str:
    """augment: Augment fields to change of the cache's build values (east-train's flags of the same names): the
    coverage of crops drawn by them. split, repeat (east-train's --split and --repeat): the images per source of a run
    that chose them, in place of the sources' list."""
    s = summary(cache_dir, epochs, stored, augment, split, repeat)
    if as_json:
        return json.dumps(s, indent=1, sort_keys=True)
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    ingest = {k: v for k, v in s["ingest"].items() if not isinstance(v, list)}
    pseudo = pseudo_line(s["ingest"].get("pseudo", []), s["images"])
    lines = [
        f"cache      {s['cache']}",
        f"strategy   {s['strategy']} ({s['strategy_reason']})",
        f"samples    {s['samples']} = {s['images']} images x {s['variants']} variants, in {s['files']} "
        f"{s['file_format']} data files",
        f"crops      {CROP_WORDS[s['config']['crop']]}",
        *([f"augment    each crop: {s['augment_text']} (east-train's defaults here; its flags change them)"]
          if s.get("augment_text") else []),
        f"images     {codec_line(s)}",
        f"on disk    {mib(s['data_bytes'])} data + {mib(s['quads_bytes'])} word quads; "
        f"{mib(s['data_bytes'] / max(1, s['samples']))} per sample",
        f"coverage   {coverage_line(s['coverage']) if s['coverage'] else 'not estimated for a cache at a URL'}",
        f"built      {s['build']['finished_at']} in {s['build']['seconds']:.1f} s "
        f"(computed {s['build']['computed']}, copied {s['build']['copied']}, files kept {s['build']['files_reused']})",
        f"source     {', '.join(s['source']['data_dirs'])} (split {s['source']['split']})",
        *source_lines(s),
        *([f"pseudo     {pseudo}"] if pseudo else []),
        "config     " + ", ".join(f"{k}={v}" for k, v in sorted(s["config"].items())),
        "ingest     " + ", ".join(f"{k}={v}" for k, v in ingest.items()),
    ]
    for name, reason in s["ingest"].get("bad", []):
        lines.append(f"skipped    {name}: {skipped_reason(reason)}")
    for name, note in sorted(s["notes"].items()):
        lines.append(f"note       {name}: {skipped_reason(note)}")
    return "\n".join(lines)
