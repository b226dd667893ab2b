"""`python -m preprocess info CACHE`: what a cache holds and how it was made."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from preprocess.errors import skipped_reason
from preprocess.store.manifest import Manifest, data_path
from preprocess.store.sidecar import quads_path


def summary(cache_dir) -> dict:
    m = Manifest.load(cache_dir)
    cfg = m.config
    paths = [data_path(Path(cache_dir), f.name) for f in m.files]
    data_bytes = sum(q.stat().st_size for p in paths if p.exists() for q in m.format.stored_files(p))
    quad_bytes = sum(quads_path(p).stat().st_size for p in paths if quads_path(p).exists())
    return {
        "cache": str(cache_dir), "strategy": cfg.strategy, "strategy_reason": m.strategy_reason,
        "file_format": m.file_format,
        "images": len(m.images), "variants": cfg.variants, "samples": sum(f.rows for f in m.files),
        "files": len(m.files), "record_bytes": m.spec.dtype.itemsize,
        "data_bytes": data_bytes, "quads_bytes": quad_bytes, "build": asdict(m.build), "source": asdict(m.source),
        "config": cfg.to_dict(), "ingest": m.ingest, "notes": m.notes,
    }


def describe(cache_dir, as_json: bool = False) -> str:
    s = summary(cache_dir)
    if as_json:
        return json.dumps(s, indent=1, sort_keys=True)
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    ingest = {k: v for k, v in s["ingest"].items() if not isinstance(v, list)}
    lines = [
        f"cache      {s['cache']}",
        f"strategy   {s['strategy']} ({s['strategy_reason']})",
        f"samples    {s['samples']} = {s['images']} images x {s['variants']} variants, in {s['files']} "
        f"{s['file_format']} data files",
        f"on disk    {mib(s['data_bytes'])} data + {mib(s['quads_bytes'])} word quads; {mib(s['record_bytes'])} per sample",
        f"built      {s['build']['finished_at']} in {s['build']['seconds']:.1f} s "
        f"(computed {s['build']['computed']}, copied {s['build']['copied']}, files kept {s['build']['files_reused']})",
        f"source     {', '.join(s['source']['data_dirs'])} (split {s['source']['split']})",
        "config     " + ", ".join(f"{k}={v}" for k, v in sorted(s["config"].items())),
        "ingest     " + ", ".join(f"{k}={v}" for k, v in ingest.items()),
    ]
    for name, reason in s["ingest"].get("bad", []):
        lines.append(f"skipped    {name}: {skipped_reason(reason)}")
    for name, note in sorted(s["notes"].items()):
        lines.append(f"note       {name}: {skipped_reason(note)}")
    return "\n".join(lines)
