"""Source images in a bucket, fingerprinted from one listing: size and ETag per object, no byte read.

The form matches fingerprint.file_fingerprint's "st:SIZE:MTIME" for local files: an image whose object changed
(a new ETag or size) is made again by the next build, any other is reused. Where a store gives no ETag (a local
or in-memory store behind a URL), the modification time stands in for it.
"""
from __future__ import annotations

from east_cache.store.remote.location import Location
from east_cache.store.remote.transfer import listing


def object_fingerprint(info: dict) -> str:
    """"obj:SIZE:ETAG" of one listed object (the ETag without its quotes), else "obj:SIZE:m<modification time>"."""
    tag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    if not tag:
        tag = "m" + str(info.get("LastModified") or info.get("mtime") or info.get("created") or "")
    return f"obj:{info['size']}:{tag}"


def source_fingerprints(loc: Location) -> dict[str, str]:
    """Every object below loc (a data set: ufo/*.json, images/...) by its path relative to loc: its fingerprint."""
    return {rel: object_fingerprint(info) for rel, info in listing(loc).items() if info.get("type", "file") == "file"}
