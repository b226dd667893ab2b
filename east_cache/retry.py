"""Bounded retries with backoff for storage calls: throttling and dropped connections pass, the rest is reported.

A transfer that keeps failing ends in one RemoteError naming the URL (credentials never in it) and what to do,
after `attempts` tries; errors that another try cannot fix (a missing object, a refused permission, a full local
disk, a refused connection, an unknown host, no credentials) end it at once. Every request has a connect and a
read timeout (CONNECT_TIMEOUT_S, READ_TIMEOUT_S: location.filesystem gives them to the client, whose own retries
are off, so that this is the one retry loop); a store that accepts and never answers is tried `timeout_attempts`
times and the error says how long it waited.
"""
from __future__ import annotations

import errno
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from east_cache.errors import RemoteError, redact

T = TypeVar("T")

# errors another try cannot fix: the object is not there, access is refused, the local disk is full or read-only
FINAL_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
FINAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# what a client raises when no retry can help: no credentials at all; a connection refused or a host name with no
# address (botocore's EndpointConnectionError says either)
NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError")
NO_CONNECTION = ("EndpointConnectionError", "ClientConnectorDNSError", "InvalidEndpointError", "InvalidURL")
# what a client raises when the store took longer than a timeout (connecting, or between two reads)
TIMEOUTS = ("ReadTimeoutError", "ConnectTimeoutError", "ServerTimeoutError", "ConnectionTimeoutError",
            "ReadTimeout", "ConnectTimeout", "TimeoutError", "timeout")
CONNECT_TIMEOUT_S = 5.0   # to open a connection to the store
READ_TIMEOUT_S = 15.0     # between a request's bytes: a store that accepted and stays silent this long has failed
# libraries whose exceptions are network trouble (a reset, a payload cut short, a timeout)
NETWORK_MODULES = ("aiohttp", "botocore", "aiobotocore", "urllib3", "http", "requests", "ssl", "socket")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5               # tries in all, the first included
    timeout_attempts: int = 2       # tries in all while the store times out (each waits a timeout)
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
    if type(e).__name__ in NO_CREDENTIALS or no_connection(e):
        return False
    if isinstance(e, (OSError, TimeoutError, ConnectionError)):
        return True
    return type(e).__module__.split(".")[0] in NETWORK_MODULES


def no_connection(e: BaseException) -> bool:
    """Whether e says the store cannot be reached at all: the connection refused, no address for its host name."""
    return (type(e).__name__ in NO_CONNECTION or isinstance(e, (ConnectionRefusedError, socket.gaierror))
            or any(no_connection(c) for c in (e.__cause__, e.__context__) if c is not None and c is not e))


def timed_out(e: BaseException) -> bool:
    """Whether e is a connect or read timeout (the store accepted, or was reached, and stayed silent)."""
    return isinstance(e, (TimeoutError, socket.timeout)) or type(e).__name__ in TIMEOUTS


def retrying(action: Callable[[], T], what: str, policy: RetryPolicy, advice: str) -> T:
    """action(), tried again after transient errors; RemoteError "{what}: {why} ({tries}). {advice}" when it
    fails for good. what: the URL or file, already redacted. FileNotFoundError and FileExistsError pass unchanged:
    what a missing object (a wrong URL, a cache rebuilt meanwhile) or a refused create means is the caller's to say."""
    failures, timeouts, start = 0, 0, time.monotonic()
    while True:
        try:
            return action()
        except (RemoteError, FileNotFoundError, FileExistsError):
            raise
        except Exception as e:   # noqa: BLE001  storage clients raise many kinds; transient() sorts them
            failures += 1
            timeouts += timed_out(e)
            if not transient(e) or failures >= policy.attempts or timeouts >= policy.timeout_attempts:
                raise RemoteError(f"{what}: {why_failed(e, failures, time.monotonic() - start)}. {advice}") from None
            time.sleep(policy.wait_s(failures))


def why_failed(e: BaseException, failures: int, seconds: float) -> str:
    """The last error in a few words, with how often and how long it was tried."""
    tries = f"after {failures} tries, {seconds:.0f} s" if failures > 1 else "not worth another try"
    if timed_out(e):
        return (f"no answer within the {READ_TIMEOUT_S:g} s read timeout ({CONNECT_TIMEOUT_S:g} s to connect), "
                f"{failures} tries, {seconds:.0f} s in all ({describe(e)})")
    if no_connection(e):
        return f"cannot connect to the store ({describe(e)}; {tries}); check AWS_ENDPOINT_URL or the URL's host"
    return f"{describe(e)} ({tries})"


def describe(e: BaseException) -> str:
    """An exception in a few words, URLs redacted: its kind and the first line of its message."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}" + (f": {redact(text)[:200]}" if text else "")
