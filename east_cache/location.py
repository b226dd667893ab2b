"""Where a cache or a data set lies: a local path, or an fsspec URL (s3://bucket/prefix; file:// and memory://).

A URL is read through a storage client (fsspec; s3fs for S3, the `remote` extra). Credentials and the endpoint
come from the environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, a profile...) or from storage options given in
code; never from the URL, so that no manifest, log line or error message can hold them. Storage options are
kept out of every printed form of a Location.

`listing` lists what lies below a location, for the caches' and the data sets' code alike.

Clients are made per process: an s3fs client used before a fork fails in the child (its event loop and
connections belong to the parent), so a forked loader worker or rank makes its own on first use.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from east_cache import retry
from east_cache.errors import UsageError, redact
from east_cache.retry import DEFAULT_RETRY, retrying

SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
# what starts like a URL ("s3:/b/c", "s3:b/c", "S3://"): a scheme of two or more characters and a colon, where the
# scheme is a storage's (known_protocols) or a slash follows ("cache-T14:00" stays a folder's name)
SCHEME_LIKE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+):(/*)(.*)$")
# the schemes taken for a storage's where fsspec, which knows them all, is not installed
COMMON_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "file", "memory", "http", "https")
S3_PROTOCOLS = ("s3", "s3a")
# an S3 bucket's name: 3-63 lower-case letters, digits, dots and hyphens, a letter or digit at each end
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
REMOTE_EXTRA = 'pip install "east-cache[remote]"'
LIST_ADVICE = "Check the URL, the credentials in the environment and the network, then run the command again"


def flag_location(text: str) -> str | Path:
    """A location flag's value (argparse type): a URL as given, checked (no credentials in it), else a Path."""
    import argparse
    try:
        if SCHEME.match(text) is None:
            refuse_url_like(text)
            return Path(text)
        Location.parse(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def refuse_url_like(text: str) -> None:
    """UsageError for a text that starts like a URL but is not one ("s3:/bucket/c", "s3:bucket/c"), saying what to
    write: taken as a path it would make a local folder named "s3:". A local folder of such a name is still
    reachable as ./s3:..."""
    m = SCHEME_LIKE.match(str(text))
    if m is not None and (m.group(2) or m.group(1).lower() in (known_protocols() or COMMON_PROTOCOLS)):
        raise UsageError(f"{text}: not a URL (a URL is {m.group(1).lower()}://bucket/prefix): write "
                         f"{m.group(1).lower()}://{m.group(3)}, or ./{text} for a local folder of that name")


def is_remote(text) -> bool:
    """Whether a location flag's value is a URL (read through a storage client and a local cache folder)."""
    return isinstance(text, Location) and text.remote or isinstance(text, str) and SCHEME.match(text) is not None


@dataclass(frozen=True)
class Location:
    """A local folder (protocol "local", path absolute) or a URL (protocol and the path the client takes:
    bucket/prefix for S3). `options`: storage options passed to the client; never printed."""
    protocol: str
    path: str
    options: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    @classmethod
    def parse(cls, text: str | os.PathLike, options: dict | None = None) -> "Location":
        """A location from a flag's text: a URL where it has a scheme, else a local path (made absolute)."""
        if isinstance(text, Location):
            return text
        m = SCHEME.match(str(text))
        if m is None:
            if isinstance(text, str):   # a Path is a path whatever its name; a text may be a mistyped URL
                refuse_url_like(text)
            return cls("local", str(Path(text).expanduser().absolute()), dict(options or {}))
        protocol, rest = m.group(1), m.group(2)
        if protocol != protocol.lower():
            raise UsageError(f"{redact(text)}: write the scheme in lower case: {protocol.lower()}://{redact(rest)}")
        known = known_protocols()
        if known is not None and protocol not in known:
            raise UsageError(f"{redact(text)}: {protocol}:// is no storage this tool can read; write s3://bucket/"
                             f"prefix (or file:///path), or a local folder")
        if "@" in rest.split("/", 1)[0] or "?" in rest:
            raise UsageError(f"{redact(text)}: give credentials and options through the environment (AWS_PROFILE, "
                             f"AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL...) or storage options, not inside the URL")
        path = rest.rstrip("/")
        if protocol == "file":
            path = str(Path("/" + path.lstrip("/")))
        if not path.strip("/"):
            raise UsageError(f"{text}: name a bucket or folder after {protocol}://")
        bucket = path.split("/", 1)[0]
        if protocol in S3_PROTOCOLS and BUCKET_NAME.match(bucket) is None:
            raise UsageError(f"{redact(text)}: {bucket!r} is not a bucket name (3-63 lower-case letters, digits, dots "
                             f"and hyphens): write {protocol}://bucket/prefix")
        return cls(protocol, path, dict(options or {}))

    @property
    def remote(self) -> bool:
        """Read through a storage client and a local cache folder (every URL, file:// included)."""
        return self.protocol != "local"

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.path}" if self.remote else self.path

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    def join(self, *parts: str) -> "Location":
        """A location below this one; parts are relative names (no "..", no leading "/")."""
        for p in parts:
            if not p or p.startswith("/") or ".." in PurePosixPath(p).parts:
                raise ValueError(f"{p!r} is not a relative name below {self}")
        return Location(self.protocol, str(PurePosixPath(self.path, *parts)), self.options)

    def local_path(self) -> Path:
        if self.remote:
            raise ValueError(f"{self} is not a local path")
        return Path(self.path)

    def key(self) -> str:
        """A short hash of what identifies the stored bytes: the URL and the endpoint (never printed, so a
        credential in an option cannot leak through it; options other than the endpoint are left out)."""
        endpoint = (self.options.get("client_kwargs") or {}).get("endpoint_url") or self.options.get("endpoint_url") \
            or os.environ.get("AWS_ENDPOINT_URL", "")
        return hashlib.blake2b(json.dumps([self.url, endpoint]).encode(), digest_size=8).hexdigest()

    def __str__(self) -> str:
        return redact(self.url)


def known_protocols() -> set[str] | None:
    """The URL schemes fsspec has a client for (installed or not); None where fsspec itself is missing (then any
    URL is refused when its client is made, with the package to install)."""
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return None
    return set(known_implementations)


def s3_config() -> dict:
    """botocore's config for every S3 request: it ends (a connect and a read timeout, retry.py's), and is tried
    once (botocore's retries off: retry.retrying retries what a retry can fix, within its bounds, and says how long
    it waited)."""
    return {"connect_timeout": retry.CONNECT_TIMEOUT_S, "read_timeout": retry.READ_TIMEOUT_S,
            "retries": {"total_max_attempts": 1, "mode": "standard"}}


_clients: dict[tuple, tuple[int, object]] = {}
_clients_lock = threading.Lock()


def _reset_after_fork() -> None:   # a thread of the parent may have held the lock at the fork
    global _clients_lock
    _clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def filesystem(loc: Location):
    """This process's storage client for loc's protocol, options and endpoint: made on first use in each process
    (after a fork the parent's is never reused), shared by the process's threads."""
    if not loc.remote:
        raise ValueError(f"{loc} is a local path: read it directly")
    key = (loc.protocol, json.dumps(loc.options, sort_keys=True, default=str), os.environ.get("AWS_ENDPOINT_URL"))
    pid = os.getpid()
    with _clients_lock:
        made = _clients.get(key)
        if made is not None and made[0] == pid:
            return made[1]
        try:
            import fsspec
            # no listings cache: a cache at a URL is rebuilt under running readers, and a stale listing would hide it;
            # folders made as files are written into them, as a store's keys need none
            defaults = {"use_listings_cache": False, **({"auto_mkdir": True} if loc.protocol == "file" else {})}
            options = {**defaults, **loc.options}
            if loc.protocol in S3_PROTOCOLS:
                options["config_kwargs"] = {**s3_config(), **options.get("config_kwargs", {})}
            client = fsspec.filesystem(loc.protocol, skip_instance_cache=True, **options)
            if loc.protocol in S3_PROTOCOLS:
                client.retries = 1   # s3fs's own retry loop off: retry.retrying is the one (its bounds, its line)
        except ImportError as e:
            raise UsageError(f"{loc}: reading {loc.protocol}:// needs {e.name or 'its storage client'}; "
                             f"install it with {REMOTE_EXTRA if loc.protocol in S3_PROTOCOLS else 'pip'}") from None
        _clients[key] = (pid, client)
        return client


def listing(loc: Location) -> dict[str, dict]:
    """Every object below loc by its path relative to loc ("data/x.npy"), with the store's details (size,
    ETag where the store has one). Nothing (an empty dict) where loc holds nothing."""
    fs = filesystem(loc)
    import fsspec.core   # there, since filesystem() made a client
    root = fsspec.core.strip_protocol(loc.url).rstrip("/") + "/"
    try:
        found = retrying(lambda: fs.find(loc.url, detail=True), str(loc), DEFAULT_RETRY, LIST_ADVICE)
    except FileNotFoundError:
        return {}
    return {p[len(root):]: info for p, info in found.items() if p.startswith(root)}
