"""Bounded retries with backoff for storage calls: throttling and dropped connections pass, the rest is reported.

A transfer that keeps failing ends in one RemoteError naming the URL (credentials never in it) and what to do,
after `attempts` tries; errors that another try cannot fix (a missing object, a refused permission, a full local
disk) end it at once.
"""
from __future__ import annotations

import errno
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from east_cache.errors import RemoteError, redact

T = TypeVar("T")

# errors another try cannot fix: the object is not there, access is refused, the local disk is full or read-only
FINAL_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
FINAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# what a client raises when it has no credentials at all: no retry brings them
NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError")
# libraries whose exceptions are network trouble (a reset, a payload cut short, a timeout)
NETWORK_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "http", "requests", "ssl", "socket")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5               # tries in all, the first included
    first_wait_s: float = 0.5       # the wait before the second try; each later one doubles it
    max_wait_s: float = 20.0        # the longest single wait

    def wait_s(self, failures: int) -> float:
        """Seconds to wait after `failures` failed tries: a random share of the doubled wait ("full jitter"), so
        that the workers a throttled bucket refused do not all come back at once."""
        return random.uniform(0, min(self.max_wait_s, self.first_wait_s * 2 ** (failures - 1)))


DEFAULT_RETRY = RetryPolicy()


class Incomplete(OSError):
    """A transfer that ended early or delivered other bytes than expected (worth another try)."""


def transient(e: BaseException) -> bool:
    """Whether another try may succeed: network trouble, throttling (the storage client's OSError), a short read."""
    if isinstance(e, FINAL_ERRORS) or (isinstance(e, OSError) and e.errno in FINAL_ERRNOS):
        return False
    if type(e).__name__ in NO_CREDENTIALS:
        return False
    if isinstance(e, (OSError, TimeoutError, ConnectionError)):
        return True
    return type(e).__module__.split(".")[0] in NETWORK_MODULES


def retrying(action: Callable[[], T], what: str, policy: RetryPolicy, advice: str) -> T:
    """action(), tried again after transient errors; RemoteError "{what}: {why} ({tries}). {advice}" when it
    fails for good. what: the URL or file, already redacted. FileNotFoundError and FileExistsError pass unchanged:
    what a missing object (a wrong URL, a cache rebuilt meanwhile) or a refused create means is the caller's to say."""
    failures = 0
    while True:
        try:
            return action()
        except (RemoteError, FileNotFoundError, FileExistsError):
            raise
        except Exception as e:   # noqa: BLE001  storage clients raise many kinds; transient() sorts them
            failures += 1
            if not transient(e) or failures >= policy.attempts:
                tries = f"after {failures} tries" if failures > 1 else "not worth another try"
                raise RemoteError(f"{what}: {describe(e)} ({tries}). {advice}") from None
            time.sleep(policy.wait_s(failures))


def describe(e: BaseException) -> str:
    """An exception in a few words, URLs redacted: its kind and the first line of its message."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}" + (f": {redact(text)[:200]}" if text else "")
