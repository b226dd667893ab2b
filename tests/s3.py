"""A real S3 endpoint on loopback for the tests that ask for one: moto's server, started once per session, a fresh
bucket per test, fake credentials and AWS_ENDPOINT_URL in the environment (forked children inherit them). And a
proxy in front of it that cuts or stalls connections after a number of bytes, to inject a dropped connection
mid-transfer. Tests that need S3 skip where moto or s3fs is not installed (the dev extra installs both)."""
from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass

import pytest

FAKE_KEYS = {"AWS_ACCESS_KEY_ID": "testing-key-id", "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
             "AWS_SESSION_TOKEN": "testing-session-token", "AWS_DEFAULT_REGION": "us-east-1"}
UNSET = ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3_server():
    """moto's S3 server on a loopback port the system picks as it binds (a port looked up first could be taken by
    another program before the server binds it, and its start would then wait forever), started: (the server, its
    URL). Needs `moto[server]`."""
    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # no request log lines in the output
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    return moto, f"http://{host}:{port}"


@pytest.fixture(scope="session")
def s3_endpoint():
    """The session's S3 server: its URL."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    moto, endpoint = start_s3_server()
    yield endpoint
    moto.stop()


_ADMIN: dict[tuple[int, str], object] = {}   # (pid, endpoint) -> the tests' own client


@dataclass
class Bucket:
    name: str
    endpoint: str

    def url(self, *parts: str) -> str:
        return "/".join([f"s3://{self.name}", *parts])

    def fs(self):
        """The tests' own client, apart from the code's: made once per process (making one costs about as much as
        a test's requests), with no listing cache and the server's address given, so that it sees every change at
        once and a test's faulty proxy never touches it."""
        import s3fs
        key = (os.getpid(), self.endpoint)
        if key not in _ADMIN:
            _ADMIN[key] = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                                            client_kwargs={"endpoint_url": self.endpoint})
        return _ADMIN[key]

    def put_cache(self, local, prefix: str = "c") -> str:
        """A local cache copied object by object below prefix (no code under test involved); its URL."""
        fs = self.fs()
        for p in sorted(local.rglob("*")):
            if p.is_file() and p.name != ".lock" and p.relative_to(local).parts[0] in ("data", "manifest.json"):
                fs.pipe_file(self.url(prefix, p.relative_to(local).as_posix()), p.read_bytes())
        return self.url(prefix)


@pytest.fixture
def s3(s3_endpoint, monkeypatch) -> Bucket:
    """A fresh, empty bucket on the session's S3 server; the environment points storage clients at it."""
    for k, v in FAKE_KEYS.items():
        monkeypatch.setenv(k, v)
    for k in UNSET:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    bucket = Bucket(f"test-{uuid.uuid4().hex[:12]}", s3_endpoint)
    bucket.fs().mkdir(bucket.name)
    return bucket


class FaultyProxy:
    """A TCP proxy to `target` (host, port) that forwards bytes both ways until told to break: cut(n, "down")
    closes the connection that carries the n-th byte from the server from now on ("up": from the client), and
    again n bytes later, `times` times in all; stall(n, "up") stops forwarding client bytes after n of them (and
    sets `stalled`) until the proxy is closed."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.plan: dict | None = None
        self.cuts = 0
        self.stalled = threading.Event()
        self.closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self, after: int, direction: str = "down", times: int = 1) -> None:
        with self.lock:
            self.plan = {"after": after, "left": after, "dir": direction, "times": times, "mode": "cut"}
            self.cuts = 0

    def stall(self, after: int, direction: str = "up") -> None:
        with self.lock:
            self.plan = {"after": after, "left": after, "dir": direction, "times": 1, "mode": "stall"}

    def heal(self) -> None:
        with self.lock:
            self.plan = None

    def close(self) -> None:
        self.closing.set()
        self.server.close()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for src, dst, direction in ((client, upstream, "up"), (upstream, client, "down")):
                threading.Thread(target=self._pump, args=(src, dst, direction, (client, upstream)),
                                 daemon=True).start()

    def _pump(self, src, dst, direction: str, pair) -> None:
        try:
            while data := src.recv(65536):
                keep, action = self._budget(direction, len(data))
                if keep:
                    dst.sendall(data[:keep])
                if action == "stall":
                    self.stalled.set()
                    self.closing.wait()
                if action:
                    break
        except OSError:
            pass
        for s in pair:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _budget(self, direction: str, n: int) -> tuple[int, str | None]:
        """How many of n bytes to forward, and whether to cut or stall after them."""
        with self.lock:
            p = self.plan
            if p is None or p["dir"] != direction:
                return n, None
            if p["left"] >= n:
                p["left"] -= n
                return n, None
            keep, p["left"] = p["left"], p["after"]   # the next cut comes as many bytes later
            self.cuts += 1
            p["times"] -= 1
            self.plan = None if p["times"] <= 0 else p
            return keep, p["mode"]


@pytest.fixture
def faulty(s3, monkeypatch) -> FaultyProxy:
    """The test bucket reached through a FaultyProxy (AWS_ENDPOINT_URL points at the proxy)."""
    host, port = s3.endpoint.removeprefix("http://").split(":")
    proxy = FaultyProxy((host, int(port)))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    yield proxy
    proxy.close()


@pytest.fixture
def no_client_retries(monkeypatch) -> None:
    """Storage clients made from now on try each request once (s3fs's and botocore's own retries off), so that what
    a test sees of a fault is the code's own retrying, and fast."""
    monkeypatch.setattr("s3fs.S3FileSystem.retries", 1)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
