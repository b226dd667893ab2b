"""Every network call ends: a store that accepts and never answers ends in one `error:` line that states how long
it waited, a refused connection or missing credentials in one line at once, without a round of retries.

No S3 server is needed: a listener on 127.0.0.1 that accepts and never answers, a port nothing listens on. The
timeouts are shortened for the test (retry.READ_TIMEOUT_S, CONNECT_TIMEOUT_S, read when a client is made)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from east_cache import retry
from east_cache.retry import RetryPolicy, retrying, transient

pytest.importorskip("s3fs")

READ_S = 0.5    # the read timeout under test
BOUND_S = 20    # what the test waits at most before it calls the command hung


@pytest.fixture
def env(monkeypatch, tmp_path):
    for k, v in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(retry, "READ_TIMEOUT_S", READ_S)
    monkeypatch.setattr(retry, "CONNECT_TIMEOUT_S", READ_S)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return monkeypatch


@pytest.fixture
def silent():
    """A listener that accepts every connection and never sends a byte: its address."""
    server = socket.create_server(("127.0.0.1", 0))
    held, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    for c in held:
        c.close()


def refused_endpoint() -> str:
    with socket.socket() as s:   # bound, never listening: a connection to it is refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def info_within_bound(capsys) -> tuple[int, str, float]:
    """`info s3://bucket/c` in a thread that the test waits for at most BOUND_S: (status, stderr, seconds)."""
    from east_cache.cli import main
    done: dict = {}

    def body():
        done["status"] = main(["info", "s3://bucket/c"])
    t0 = time.monotonic()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), f"info still waiting after {BOUND_S} s"
    return done["status"], capsys.readouterr().err, time.monotonic() - t0


@pytest.mark.slow
def test_a_store_that_never_answers_ends_in_one_line_that_says_how_long_it_waited(env, silent, capsys):
    env.setenv("AWS_ENDPOINT_URL", silent)
    status, err, took = info_within_bound(capsys)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert status == 2 and len(lines) == 1, err
    assert f"no answer within the {READ_S:g} s read timeout" in lines[0] and "s3://bucket/c" in lines[0], lines[0]
    # each request waits its timeout, tried timeout_attempts times; a few requests at most before the first fails
    assert took < 4 * READ_S * retry.DEFAULT_RETRY.timeout_attempts + 5, took


def test_a_refused_connection_fails_at_once_without_retries(env, capsys):
    env.setenv("AWS_ENDPOINT_URL", refused_endpoint())
    status, err, took = info_within_bound(capsys)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert status == 2 and len(lines) == 1 and "cannot connect" in lines[0] and "AWS_ENDPOINT_URL" in lines[0], err
    assert "not worth another try" in lines[0], lines[0]
    assert took < 3, took   # was 41-53 s of retries in four layers


def test_what_a_retry_cannot_fix_is_not_retried():
    class EndpointConnectionError(Exception):   # botocore's name, as retry.py recognises it
        pass
    calls = []

    def refused():
        calls.append(1)
        raise EndpointConnectionError('Could not connect to the endpoint URL: "http://127.0.0.1:1/b"')
    with pytest.raises(Exception, match="cannot connect"):
        retrying(refused, "s3://b/c", RetryPolicy(first_wait_s=0), "advice")
    assert len(calls) == 1
    assert not transient(ConnectionRefusedError()) and not transient(socket.gaierror("no such host"))
    assert transient(ConnectionResetError()) and transient(TimeoutError())


def test_timeouts_are_tried_a_bounded_number_of_times():
    calls = []

    def silent():
        calls.append(1)
        raise TimeoutError("read timed out")
    with pytest.raises(Exception, match="no answer within"):
        retrying(silent, "s3://b/c", RetryPolicy(first_wait_s=0), "advice")
    assert len(calls) == RetryPolicy().timeout_attempts
