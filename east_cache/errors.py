"""The errors a user can meet, each printed by the CLI as one `error:` line without a traceback.

Every message names the file, the image and the word where there is one, and says what to do.
"""
from __future__ import annotations

import re


class DataError(ValueError):
    """A problem with the input data (annotations, images)."""


class CacheError(ValueError):
    """A cache that cannot be read as it is; the message says what to run."""


class RemoteError(CacheError):
    """A transfer to or from storage (a bucket) that failed for good: the message names the URL, without
    credentials, and says what to do; nothing half-transferred is left under a final name."""


class BuildError(RuntimeError):
    """The build cannot go on (lock held, disk full); the existing cache is untouched."""


class UsageError(ValueError):
    """Flags that do not fit together, or a path that cannot be what the flag needs."""


# userinfo (user:secret@) and query strings (a presigned URL's signature) of any URL inside a text
URL_SECRETS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@|(\?[^\s'\"]*)")


def redact(text: str) -> str:
    """text with the userinfo and query string of every URL in it replaced: safe to print or log."""
    return URL_SECRETS.sub(lambda m: m.group(1) + "***@" if m.group(1) else "?***", str(text))


# The advice a bad-image error gives a build run without --skip-bad ("..., or pass --skip-bad to leave it out").
_SKIP_ADVICE = re.compile(r",? or pass --skip-bad\b[^;]*")


def skipped_reason(why: str) -> str:
    """A bad image's error as the summary of a --skip-bad build shows it: without the advice to pass --skip-bad."""
    return _SKIP_ADVICE.sub("", why)


class BuildInterrupted(KeyboardInterrupt):
    """Ctrl-C during a build after the new cache was committed: what is left undone is only cleanup."""
