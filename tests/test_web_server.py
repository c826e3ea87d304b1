"""The inbox server's own limits (``workflow.review.web.server_config``): a connection that never finishes
its request (head or body) is closed after ``HITL_INBOX_REQUEST_TIMEOUT``, and no more than
``HITL_INBOX_MAX_CONNECTIONS`` are open at once. A real uvicorn server on a loopback port, in a
thread of this process; bounded numbers of sockets, each with a timeout."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from state.store import FileStore
from agent.application import APP
from workflow.review.web import create_app, listen, server_config

TOKEN = "t" * 43
PARTIAL = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"  # a request head never finished


@contextmanager
def _server(state_dir: Path) -> Iterator[tuple[int, object]]:
    """A running inbox server on 127.0.0.1 (port, uvicorn.Server), stopped at the end."""
    import uvicorn

    sock, authority = listen("127.0.0.1", 0, False)
    port = sock.getsockname()[1]
    app = create_app(FileStore(state_dir), APP, reviewer="ann", token=TOKEN, hosts={authority},
                     cookie=f"hitl_inbox_{port}")
    server = uvicorn.Server(server_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield port, server
    finally:
        server.should_exit = server.force_exit = True  # do not wait for connections left open
        thread.join(10)
        sock.close()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    return s


def _closed_by_server(s: socket.socket, within: float) -> tuple[bool, bytes]:
    """(True if the server closed ``s`` within ``within`` seconds, what it sent before)."""
    s.settimeout(within)
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except (ConnectionResetError, BrokenPipeError):
        return True, got
    except socket.timeout:
        return False, got


def _normal_request(port: int) -> bytes:
    """The token URL over a fresh connection: the server's answer (a 303 to the inbox)."""
    with _connect(port) as s:
        s.sendall(f"GET /?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  "Connection: close\r\n\r\n".encode())
        closed, got = _closed_by_server(s, 5)
    assert closed, got
    return got


def _open_connections(server: object) -> int:
    return len(server.server_state.connections)  # type: ignore[attr-defined]


def test_half_open_connections_are_closed_after_the_request_timeout(state_dir, monkeypatch):
    """50 loopback connections that never finish their request head are all closed by the server
    once the (shortened) request timeout has passed; a normal request works throughout."""
    monkeypatch.setenv("HITL_INBOX_REQUEST_TIMEOUT", "0.5")
    monkeypatch.setenv("HITL_INBOX_MAX_CONNECTIONS", "100")
    with _server(state_dir) as (port, server):
        slow = [_connect(port) for _ in range(50)]
        try:
            for s in slow[::2]:
                s.sendall(PARTIAL)  # half a request head; the other half sends nothing at all
            assert _normal_request(port).startswith(b"HTTP/1.1 303 ")
            deadline = time.monotonic() + 5  # one bound for all 50 (0.5 s is the timeout)
            results = [_closed_by_server(s, max(0.01, deadline - time.monotonic())) for s in slow]
            assert all(closed for closed, _ in results), \
                f"{sum(not c for c, _ in results)} of 50 half-open connections still open after 5 s"
            assert all(got == b"" for _, got in results)  # closed unanswered: no page code ran
            deadline = time.monotonic() + 5
            while _open_connections(server) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _open_connections(server) == 0
        finally:
            for s in slow:
                s.close()
        assert _normal_request(port).startswith(b"HTTP/1.1 303 ")


def test_a_keep_alive_connection_must_send_its_next_head_in_time_too(state_dir, monkeypatch):
    """After one full request and response, half a second request head is closed on time (uvicorn's
    keep-alive timer alone stops at the first byte received)."""
    monkeypatch.setenv("HITL_INBOX_REQUEST_TIMEOUT", "0.5")
    with _server(state_dir) as (port, _server_):
        with _connect(port) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            assert head.startswith(b"HTTP/1.1 403 ")  # answered (no session), connection kept
            s.sendall(PARTIAL)
            closed, _ = _closed_by_server(s, 4)
            assert closed


def test_connections_beyond_the_cap_get_503_and_are_closed_at_once(state_dir, monkeypatch):
    """With the cap at 5 and 5 connections held open, each further one is answered 503 and closed
    at once (no file descriptor kept for it); with one slot free a normal request works."""
    monkeypatch.setenv("HITL_INBOX_REQUEST_TIMEOUT", "30")  # the cap alone is under test here
    monkeypatch.setenv("HITL_INBOX_MAX_CONNECTIONS", "5")
    with _server(state_dir) as (port, server):
        held = [_connect(port) for _ in range(4)]
        try:
            for s in held:
                s.sendall(PARTIAL)
            assert _normal_request(port).startswith(b"HTTP/1.1 303 ")  # the fifth slot
            held.append(_connect(port))
            held[-1].sendall(PARTIAL)
            for _ in range(10):
                with _connect(port) as extra:
                    closed, got = _closed_by_server(extra, 3)
                    assert closed and got.startswith(b"HTTP/1.1 503 "), got
                    assert b"too many open connections" in got
            assert _open_connections(server) == 5
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 5
        while _open_connections(server) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _normal_request(port).startswith(b"HTTP/1.1 303 ")


def test_a_body_trickled_after_a_refusal_is_closed_on_time(state_dir, monkeypatch):
    """A POST refused by the gate (403, its announced body unread) whose client then sends the body
    a byte at a time: closed once the request timeout has passed, not kept as long as bytes come."""
    monkeypatch.setenv("HITL_INBOX_REQUEST_TIMEOUT", "0.5")
    with _server(state_dir) as (port, server):
        with _connect(port) as s:
            s.sendall(f"POST /task/x/decide HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                      f"Origin: http://127.0.0.1:{port}\r\nContent-Length: 100000\r\n\r\nab".encode())
            got, closed = b"", False
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not closed:
                try:
                    s.sendall(b"x")
                except OSError:
                    closed = True
                    break
                shut, more = _closed_by_server(s, 0.2)
                got += more
                closed = shut
            assert got.startswith(b"HTTP/1.1 403 ") and closed, got


@pytest.mark.parametrize("name, value", [("HITL_INBOX_REQUEST_TIMEOUT", "1e308"),
                                         ("HITL_INBOX_MAX_CONNECTIONS", "0")])
def test_the_limits_come_from_the_settings(monkeypatch, name, value):
    from state.errors import Refused

    monkeypatch.setenv(name, value)
    with pytest.raises(Refused, match=f"^{name}="):
        server_config(create_app(FileStore(Path("unused")), APP, reviewer="ann", token=TOKEN,
                                 hosts={"127.0.0.1:1"}, cookie="c"))
