"""`info URL` and `verify URL`: a cache at a URL described from its manifest and listing, and checked file by file
through the local cache folder (the one a training run on this machine reads through, so that what verify
downloads is not downloaded again). The only object verify writes at the URL is the list of bad files, which the
next `build --out URL` pulls and redoes.
"""
from __future__ import annotations

import json
import sys

from east_cache.location import Location
from east_cache.retry import DEFAULT_RETRY
from east_cache.build.plan import CORRUPT_MARKER
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings, StoredDamage
from east_cache.build.publish import ADVICE
from east_cache.store.remote.transfer import put_bytes
from east_cache.tools.coverage import TRAIN_EPOCHS
from east_cache.tools.info import describe
from east_cache.tools.verify import check_file

SIDECAR_SUFFIX = ".quads.npz"


def describe_at(loc: Location, as_json: bool = False, epochs: int = TRAIN_EPOCHS,
                settings: LocalCacheSettings = LocalCacheSettings()) -> str:
    """`info` of the cache at loc: its manifest, and the sizes of its objects as listed (no data file is read)."""
    cache = LocalCache(loc, settings)
    sizes = [(rel, size) for unit in cache.units.values() for rel, size in unit.objects.items()]
    stored = {"cache": str(loc), "data_bytes": sum(s for rel, s in sizes if not rel.endswith(SIDECAR_SUFFIX)),
              "quads_bytes": sum(s for rel, s in sizes if rel.endswith(SIDECAR_SUFFIX))}
    return describe(cache.local_dir, as_json, epochs, stored)


def verify_at(loc: Location, settings: LocalCacheSettings = LocalCacheSettings()) -> list[tuple[str, str]]:
    """[(file name, what is wrong)] over every file the manifest at loc names: each downloaded (within the folder's
    limit), checked against the manifest at the download, then its checksums recomputed. A bad file's local copy
    is deleted, and the list put at the URL for the next build to redo."""
    cache = LocalCache(loc, settings)
    bad = []
    for name, unit in cache.units.items():
        try:
            with cache.pinned([name]):
                why = check_file(cache.manifest, cache.local_dir, unit.entry)
        except StoredDamage as e:   # refused at the download: nothing of it is in the folder
            why = e.why
        if why:
            bad.append((name, why))
            cache.discard(name)
    if bad:
        put_bytes(json.dumps(sorted(name for name, _ in bad)).encode(), loc.join(CORRUPT_MARKER), DEFAULT_RETRY,
                  ADVICE)
    return bad


def verify_command(loc: Location, settings: LocalCacheSettings, prog: str) -> int:
    """`verify URL`: the bad files printed; exit status 0 (none) or 1."""
    bad = verify_at(loc, settings)
    for name, why in bad:
        print(f"{name}: {why}")
    if not bad:
        print(f"{loc}: all files match their checksums")
        return 0
    print(f"{len(bad)} bad file(s), listed at the URL; `{prog} build --out {loc}` rebuilds exactly those",
          file=sys.stderr)
    return 1
