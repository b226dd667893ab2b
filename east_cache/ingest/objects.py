"""A data set at a URL (`--data s3://bucket/set`): its files are objects, reached through this process's storage
client (east_cache/location.py), and ingest meets them as ObjectPaths where a local data set gives it Paths.

A data set is listed once when a build (or a staleness check) starts reading it (`listed`): whether an image
exists, and its fingerprint, come from that listing (size and ETag, no byte read), so that a set of 100k images
costs one listing, not 100k requests. An object's bytes are read whole, each read retried on throttling and
dropped connections; the build's workers read them in their own processes, each with its own client.
"""
from __future__ import annotations

import io
import os
import threading
from pathlib import Path, PurePosixPath

from east_cache.location import SCHEME, Location, filesystem, listing
from east_cache.retry import DEFAULT_RETRY, retrying

ADVICE = "Check the URL, the credentials in the environment and the network, then run the command again"

KEPT = ("size", "ETag", "etag", "LastModified", "mtime", "created")   # what a fingerprint reads of a listed object
_listings: dict[str, dict[str, dict]] = {}   # a listed data set's URL -> its objects by relative path
_listings_lock = threading.Lock()


def is_url(text) -> bool:
    return isinstance(text, ObjectPath) or (isinstance(text, str) and SCHEME.match(text) is not None)


class ObjectPath:
    """A file or folder of a data set at a URL, answering what ingest asks of a Path: `/`, name, is_dir, read_bytes,
    and info (the listed details, or FileNotFoundError)."""

    def __init__(self, loc: Location):
        self.loc = loc

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(self.loc.join(*PurePosixPath(name).parts))

    @property
    def name(self) -> str:
        return self.loc.name

    def __str__(self) -> str:
        return str(self.loc)

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectPath) and other.loc.url == self.loc.url

    def __hash__(self) -> int:
        return hash(self.loc.url)

    def info(self) -> dict:
        """The object's details (size, ETag): from the listing of the data set that holds it, else asked for."""
        found = _listed_under(self.loc.url)
        if found is not None:
            root, objects = found
            info = objects.get(self.loc.url[len(root) + 1:])
            if info is None:
                raise FileNotFoundError(str(self))
            return info
        info = retrying(lambda: filesystem(self.loc).info(self.loc.url), str(self), DEFAULT_RETRY, ADVICE)
        if info.get("type", "file") != "file":
            raise IsADirectoryError(str(self))
        return info

    def is_dir(self) -> bool:
        found = _listed_under(self.loc.url)
        if found is not None:
            root, objects = found
            prefix = self.loc.url[len(root) + 1:] + "/" if self.loc.url != root else ""
            return any(k.startswith(prefix) for k in objects)
        return bool(retrying(lambda: filesystem(self.loc).isdir(self.loc.url), str(self), DEFAULT_RETRY, ADVICE))

    def read_bytes(self) -> bytes:
        return retrying(lambda: filesystem(self.loc).cat_file(self.loc.url), str(self), DEFAULT_RETRY, ADVICE)

    def open(self) -> io.BytesIO:
        """The object's bytes, read whole, as a file."""
        return io.BytesIO(self.read_bytes())


def source_path(text) -> Path | ObjectPath:
    """A data set's file or folder as given: an ObjectPath for a URL, else a Path."""
    if isinstance(text, (Path, ObjectPath)):
        return text
    return ObjectPath(Location.parse(text)) if is_url(str(text)) else Path(text)


def source_root(text) -> str:
    """How the manifest records a data set root: its URL, or its local path made absolute."""
    path = source_path(text)
    return path.loc.url if isinstance(path, ObjectPath) else str(Path(path).resolve())


def listed(root: Path | ObjectPath) -> Path | ObjectPath:
    """root, a data set at a URL listed now (once per build or check: what changed since is seen next time)."""
    if isinstance(root, ObjectPath):
        objects = {rel: {k: info[k] for k in KEPT if k in info} for rel, info in listing(root.loc).items()
                   if info.get("type", "file") == "file"}
        with _listings_lock:
            _listings[root.loc.url] = objects
    return root


def listed_names(folder: ObjectPath) -> list[str]:
    """The names of the objects right in a folder of a listed data set (listed), sorted."""
    found = _listed_under(folder.loc.url)
    if found is None:
        return []
    root, objects = found
    prefix = folder.loc.url[len(root) + 1:] + "/" if folder.loc.url != root else ""
    return sorted(k[len(prefix):] for k in objects if k.startswith(prefix) and "/" not in k[len(prefix):])


def _listed_under(url: str) -> tuple[str, dict[str, dict]] | None:
    """(root, objects) of the listed data set that holds url, or None."""
    with _listings_lock:
        for root, objects in _listings.items():
            if url == root or url.startswith(root + "/"):
                return root, objects
    return None


def object_fingerprint(info: dict) -> str:
    """"obj:SIZE:ETAG" of one listed object (the ETag without its quotes), else "obj:SIZE:m<modification time>"
    where a store gives no ETag (a local or in-memory store behind a URL): like a local file's "st:SIZE:MTIME",
    a changed object (new ETag or size) is made again by the next build."""
    tag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    if not tag:
        tag = "m" + str(info.get("LastModified") or info.get("mtime") or info.get("created") or "")
    return f"obj:{info['size']}:{tag}"


def _reset_after_fork() -> None:   # a thread of the parent may have held the lock at the fork
    global _listings_lock
    _listings_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)
