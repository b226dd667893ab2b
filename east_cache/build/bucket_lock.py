"""One build at a time per cache URL: a lock object, created only where none exists (a conditional put,
If-None-Match: *), deleted when the build ends.

A store has no lock that dies with its holder, so a killed build leaves its lock object behind. The object says
who holds it (host, pid, start time): the next build is refused with that, and whether the holder still runs
where that can be known (the same host), and `break_lock` deletes a dead holder's lock before taking it. A build
deletes the lock only while it is still its own (its token), so one that was broken is not deleted twice.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from east_cache.errors import BuildError
from east_cache.location import Location, filesystem
from east_cache.retry import DEFAULT_RETRY, RetryPolicy, retrying

LOCK_OBJECT = ".lock"
ADVICE = "Check the URL, the credentials in the environment and the network, then build again"


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started: float    # time.time() when the lock was taken, seconds
    token: str        # this build's own, so that it deletes only its own lock

    @classmethod
    def me(cls) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), time.time(), uuid.uuid4().hex)

    def describe(self) -> str:
        age = time.time() - self.started
        ago = f"{age / 3600:.1f} h" if age >= 3600 else f"{age / 60:.0f} min" if age >= 60 else f"{age:.0f} s"
        alive = ""
        if self.host == socket.gethostname():
            alive = ", still running" if _running(self.pid) else ", no longer running on this host"
        return f"host {self.host}, pid {self.pid}{alive}, started {ago} ago"


class BucketLock:
    def __init__(self, dest: Location, policy: RetryPolicy = DEFAULT_RETRY):
        self.where, self.policy = dest.join(LOCK_OBJECT), policy
        self.dest = dest
        self.mine: Holder | None = None

    def acquire(self, break_lock: bool = False) -> None:
        """Take the lock, or BuildError naming its holder; break_lock: delete a held lock first (its holder must
        be dead: a live one would go on writing beside this build)."""
        me = Holder.me()
        if not self._create(me):
            holder = self.holder()
            if not break_lock:
                who = holder.describe() if holder else "its lock object cannot be read"
                raise BuildError(f"{self.dest}: another build ({who}) is writing this cache. Wait for it to "
                                 f"finish; if it died, build again with --break-lock")
            retrying(lambda: filesystem(self.where).rm_file(self.where.url), str(self.where), self.policy, ADVICE)
            if not self._create(me):
                raise BuildError(f"{self.dest}: another build took the lock just after it was broken; wait for it "
                                 f"to finish")
        self.mine = me

    def release(self) -> None:
        """Delete the lock object if it is still this build's."""
        if self.mine is None:
            return
        holder = self.holder()
        if holder is not None and holder.token == self.mine.token:
            retrying(lambda: filesystem(self.where).rm_file(self.where.url), str(self.where), self.policy, ADVICE)
        self.mine = None

    def holder(self) -> Holder | None:
        """Who holds the lock, or None where there is no lock object or it cannot be read."""
        try:
            data = retrying(lambda: filesystem(self.where).cat_file(self.where.url), str(self.where), self.policy,
                            ADVICE)
            return Holder(**json.loads(data))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def _create(self, me: Holder) -> bool:
        """Whether the lock object was created for `me` (False: one exists). A put whose answer was lost and
        that is tried again finds its own lock: that counts as taken."""
        body = json.dumps(asdict(me)).encode()

        def put() -> None:
            with filesystem(self.where).open(self.where.url, "xb") as f:
                f.write(body)
        try:
            retrying(put, str(self.where), self.policy, ADVICE)
            return True
        except FileExistsError:
            holder = self.holder()
            return holder is not None and holder.token == me.token


@contextmanager
def bucket_lock(dest: Location, break_lock: bool = False, policy: RetryPolicy = DEFAULT_RETRY):
    """The lock held for the block; released at its end, an error's included (a killed process leaves it)."""
    lock = BucketLock(dest, policy)
    lock.acquire(break_lock)
    try:
        yield lock
    finally:
        lock.release()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True
