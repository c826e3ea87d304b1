"""A reference publishing service: the provider ``publish_draft`` sends to when ``HITL_PUBLISH_URL``
is set. It is for the tests and the demo, not a production server: one process, one SQLite file,
loopback only by default, the standard library only.

The contract (HTTP + JSON; every request needs ``Authorization: Bearer <HITL_PUBLISH_TOKEN>``, else
``401``):

- ``POST /v1/publications`` with an ``Idempotency-Key`` header and the body ``{"title", "body",
  "channel"}`` (three strings, nothing else; at most 64 KiB, else ``413``) → ``201`` and the
  publication ``{"id", "idempotency_key", "title", "body", "channel", "created_at"}`` (``id``:
  ``pub_`` and 16 hex digits; ``created_at``: ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, UTC). The same key
  and the same body again → ``200``, the same publication, header ``Idempotent-Replayed: true``;
  the same key with another body → ``409 {"error": …}``; no key, or a body that is not that JSON
  object → ``400``. Concurrent requests with one key create one publication (a UNIQUE column), and
  the row is committed (``synchronous=FULL``) before the answer is sent.
- ``GET /v1/publications?idempotency_key=<key>`` → ``200 {"data": [publication]}`` (``[]`` if none);
  ``GET /v1/publications`` → every publication, oldest first.
- ``--no-dedup``: a provider that ignores ``Idempotency-Key`` (every POST creates a publication,
  with ``"idempotency_key": null``) and has no lookup (``GET ?idempotency_key=`` → ``404``); the
  plain list still answers, for the tests to count.
- ``GET /v1/_stats`` → ``200 {"posts": N}``: how many POSTs to ``/v1/publications`` this process
  has received (any answer, or none), a test aid to prove a command sent nothing.

Fault switches, for the tests (counted over the process's life, POST only):

- ``--fail-503 N``: the first N POSTs that pass the checks above answer ``503`` and store nothing;
- ``--lose-answer N``: the first N POSTs that commit (created or replayed) close the connection
  without any answer: the publication is stored, the client cannot know;
- ``--slow SECONDS``: every POST waits that long after committing, before answering;
- ``--act-after SECONDS``: every POST waits that long before committing (a client that gives up
  sooner leaves a request that still acts);
- ``--answer-status CODE`` (with ``--answer-status-times N``, default every time): a POST that
  committed answers ``CODE`` with an error body instead of its publication (it acted, and says
  otherwise: the client must not take any answer for "nothing happened");
- ``--ignore-filter``: ``GET ?idempotency_key=`` ignores the key and lists every publication (as many
  APIs do with an unknown query parameter), in either mode;
- ``--answer-bytes N``: every answer to a POST is padded to at least N bytes (a ``"padding"`` field),
  written in pieces (an answer too large to read whole).

The token comes from ``HITL_PUBLISH_TOKEN`` only (a flag would show in process lists); without it
the service refuses to start and creates nothing. It is compared in constant time and never
written, printed or logged. :func:`main` is the command (``publishing-service``);
:func:`start_in_thread` runs the same server in a thread, for tests.
"""

from __future__ import annotations

import argparse
import hmac
import json
import math
import secrets
import socket
import sqlite3
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit

#: The largest request body accepted, in bytes (a larger one is answered 413, unread).
MAX_BODY = 64 * 1024
#: The longest ``Idempotency-Key`` accepted, in characters.
MAX_KEY = 255
DB_NAME = "publications.sqlite3"
FIELDS = ("title", "body", "channel")
PATH = "/v1/publications"
STATS_PATH = "/v1/_stats"

_SCHEMA = """CREATE TABLE IF NOT EXISTS publications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    idempotency_key TEXT UNIQUE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    channel TEXT NOT NULL,
    created_at TEXT NOT NULL)"""
_COLUMNS = "id, idempotency_key, title, body, channel, created_at"


class _Faults:
    """The fault switches and their counters (thread-safe)."""

    def __init__(self, fail_503: int, lose_answer: int, slow: float, *, act_after: float = 0.0,
                 answer_status: Optional[int] = None, answer_status_times: int = 1 << 30,
                 ignore_filter: bool = False, answer_bytes: int = 0) -> None:
        self.fail_503, self.lose_answer, self.slow = fail_503, lose_answer, slow
        self.act_after, self.answer_status, self.answer_status_times = act_after, answer_status, answer_status_times
        self.ignore_filter, self.answer_bytes = ignore_filter, answer_bytes
        self.posts = 0  # POSTs to PATH received, whatever their answer (GET STATS_PATH)
        self._lock = threading.Lock()

    def count_post(self) -> None:
        """One more POST received."""
        with self._lock:
            self.posts += 1

    def take(self, name: str) -> bool:
        """True (and one fewer left) if the switch ``name`` still has a count left."""
        with self._lock:
            left = getattr(self, name)
            if left > 0:
                setattr(self, name, left - 1)
                return True
            return False


class _Database:
    """The SQLite file: one connection per request (safe across the server's threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.row_factory = sqlite3.Row
        return db

    def create(self, key: Optional[str], fields: dict[str, str]) -> tuple[dict[str, Any], bool]:
        """Store a publication under ``key`` (None: no deduplication) unless one is there; return
        ``(publication, created)``. Committed when it returns."""
        row = {"id": "pub_" + secrets.token_hex(8), "idempotency_key": key, **fields,
               "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        db = self._connect()
        try:
            cur = db.execute(f"INSERT INTO publications ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                             "ON CONFLICT(idempotency_key) DO NOTHING",
                             [row[c] for c in _COLUMNS.split(", ")])
            if cur.rowcount == 1 or key is None:
                return row, True
            return self._rows(db, key)[0], False
        finally:
            db.close()

    def find(self, key: Optional[str]) -> list[dict[str, Any]]:
        """The publications under ``key``, or all of them if None, oldest first."""
        db = self._connect()
        try:
            return self._rows(db, key)
        finally:
            db.close()

    @staticmethod
    def _rows(db: sqlite3.Connection, key: Optional[str]) -> list[dict[str, Any]]:
        where, args = ("WHERE idempotency_key = ?", [key]) if key is not None else ("", [])
        return [dict(r) for r in db.execute(f"SELECT {_COLUMNS} FROM publications {where} ORDER BY seq", args)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 resets a burst of connections)

    def __init__(self, address: tuple[str, int], *, store: _Database, token: str, dedup: bool,
                 faults: _Faults, verbose: bool) -> None:
        super().__init__(address, _Handler)
        self.store, self.dedup, self.faults, self.verbose = store, dedup, faults, verbose
        self.expected = ("Bearer " + token).encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "publishing-service"
    timeout = 30  # seconds a connection may take to send its request
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's name)
        if self.server.verbose:  # the request line and status only: headers (the token) never
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send(self, status: int, payload: dict[str, Any], headers: Optional[dict[str, str]] = None,
              pad_to: int = 0) -> None:
        data = json.dumps(payload).encode("utf-8")
        pad = max(0, pad_to - len(data) - len(b',"padding":""'))
        if pad:  # {..., "padding": "xxxx…"}, written in pieces (never held whole)
            data = data[:-1] + b',"padding":"'
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) + (pad + 2 if pad else 0)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            if pad:
                piece = b"x" * 65536
                for start in range(0, pad, len(piece)):
                    self.wfile.write(piece[:min(len(piece), pad - start)])
                self.wfile.write(b'"}')
        except OSError:  # the client gave up waiting or reading (its choice): what was done stands
            self.close_connection = True

    def _drain(self, length: int) -> None:
        """Read and drop up to ``length`` bytes (at most 1 MiB) of a body refused unread."""
        left = min(length, 1 << 20)
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message})

    def _authorised(self) -> bool:
        got = self.headers.get("Authorization", "")
        if hmac.compare_digest(got.encode("latin-1", "replace"), self.server.expected):
            return True
        self._error(401, "missing or wrong bearer token")
        return False

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        parts = urlsplit(self.path)
        if parts.path.rstrip("/") not in (PATH, STATS_PATH):
            return self._error(404, "not found")
        if not self._authorised():
            return
        if parts.path.rstrip("/") == STATS_PATH:
            return self._send(200, {"posts": self.server.faults.posts})
        query = parse_qs(parts.query, keep_blank_values=True)
        key = query.get("idempotency_key", [None])[-1]
        if self.server.faults.ignore_filter:
            key = None  # an unknown query parameter, ignored: every publication is listed
        if key is not None and not self.server.dedup:
            return self._error(404, "this service does not look publications up by idempotency key")
        self._send(200, {"data": self.server.store.find(key)})

    def do_POST(self) -> None:  # noqa: N802
        if urlsplit(self.path).path.rstrip("/") == PATH:
            self.server.faults.count_post()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = 0
        if length > MAX_BODY:
            self.close_connection = True
            self._drain(length)
            return self._error(413, f"the body is larger than {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length > 0 else b""  # read first: a socket closed unread resets
        if urlsplit(self.path).path.rstrip("/") != PATH:
            return self._error(404, "not found")
        if not self._authorised():
            return
        key = self.headers.get("Idempotency-Key") if self.server.dedup else None
        if self.server.dedup and (not key or len(key) > MAX_KEY or not key.isprintable()):
            return self._error(400, f"an Idempotency-Key header (1-{MAX_KEY} printable characters) is required")
        fields = _fields(raw)
        if fields is None:
            return self._error(400, 'the body must be a JSON object {"title", "body", "channel"} of strings')
        faults = self.server.faults
        if faults.take("fail_503"):
            return self._error(503, "unavailable (a fault switch): nothing was stored")
        if faults.act_after:
            time.sleep(faults.act_after)
        try:
            publication, created = self.server.store.create(key, fields)
        except sqlite3.Error as exc:  # it may or may not have been stored: the client must ask again
            return self._error(500, f"the store failed: {type(exc).__name__}")
        if faults.slow:
            time.sleep(faults.slow)
        if faults.take("lose_answer"):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if faults.answer_status is not None and faults.take("answer_status_times"):
            return self._send(faults.answer_status, {"error": "an answer chosen by a fault switch (it acted)"},
                              pad_to=faults.answer_bytes)
        if created:
            return self._send(201, publication, pad_to=faults.answer_bytes)
        if all(publication[f] == fields[f] for f in FIELDS):
            return self._send(200, publication, {"Idempotent-Replayed": "true"}, pad_to=faults.answer_bytes)
        self._error(409, "this Idempotency-Key was used for another publication")


def _fields(raw: bytes) -> Optional[dict[str, str]]:
    """The body's ``{"title", "body", "channel"}`` (three strings, no other key), or None."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or set(data) != set(FIELDS) or not all(isinstance(data[f], str) for f in FIELDS):
        return None
    return {f: data[f] for f in FIELDS}


def _server(data_dir: Path, host: str, port: int, *, token: str, dedup: bool, faults: _Faults,
            verbose: bool) -> _Server:
    data_dir.mkdir(parents=True, exist_ok=True)
    return _Server((host, port), store=_Database(data_dir / DB_NAME), token=token, dedup=dedup,
                   faults=faults, verbose=verbose)


def start_in_thread(data_dir: Path, *, token: str, dedup: bool = True, fail_503: int = 0,
                    lose_answer: int = 0, slow: float = 0.0, act_after: float = 0.0,
                    answer_status: Optional[int] = None, answer_status_times: int = 1 << 30,
                    ignore_filter: bool = False, answer_bytes: int = 0,
                    port: int = 0) -> tuple[str, Callable[[], None]]:
    """Run the service in a background thread on ``127.0.0.1`` and a free port, storing in
    ``data_dir`` (created if missing), accepting ``token`` (non-empty), with the fault switches of
    the module docstring (``act_after``/``slow`` seconds, the others as the flags). Returns ``(url,
    stop)``: ``url`` is ``http://127.0.0.1:PORT`` (no trailing slash; ``port`` 0 picks a free one, a
    given one serves the same address again after a stop); ``stop()`` shuts the server down and
    closes its socket (call it once). For tests; :func:`main` is the command."""
    if not token:
        raise ValueError("the service needs a non-empty token")
    faults = _Faults(fail_503, lose_answer, slow, act_after=act_after, answer_status=answer_status,
                     answer_status_times=answer_status_times, ignore_filter=ignore_filter, answer_bytes=answer_bytes)
    server = _server(Path(data_dir), "127.0.0.1", port, token=token, dedup=dedup, faults=faults, verbose=False)
    thread = threading.Thread(target=server.serve_forever, name="publishing-service", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    return f"http://127.0.0.1:{server.server_address[1]}", stop


def publications(data_dir: Path) -> list[dict[str, Any]]:
    """Every publication the service stored in ``data_dir`` (its SQLite file, created if missing),
    oldest first: what the service saw, for the demo's and the tests' counts."""
    return _Database(Path(data_dir) / DB_NAME).find(None)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 <= value <= 3600):
        raise argparse.ArgumentTypeError("must be a number of seconds from 0 to 3600")
    return value


def _status(text: str) -> int:
    value = int(text)
    if not 200 <= value <= 599:
        raise argparse.ArgumentTypeError("must be an HTTP status from 200 to 599")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be from 0 to 65535 (0: a free one)")
    return value


def main(argv: list[str]) -> int:
    """The command: ``[--port P] [--data DIR] [--no-dedup] [--fail-503 N] [--lose-answer N]
    [--slow SECONDS] [--act-after SECONDS] [--answer-status CODE [--answer-status-times N]]
    [--ignore-filter] [--answer-bytes N] [--host H] [--verbose]``. Prints ``publishing service: http://HOST:PORT`` as
    its first stdout line, then serves until Ctrl-C or SIGTERM; returns 0. Returns 1 with one
    ``STOPPED:`` line on stderr, having created nothing, when ``HITL_PUBLISH_TOKEN`` is unset or
    empty or the address cannot be bound; a bad flag exits 2 (argparse)."""
    import signal

    from state.errors import Refused
    from state.settings import settings

    parser = argparse.ArgumentParser(prog="publishing-service", description="A reference publishing "
                                     "service for the tests and the demo (token: HITL_PUBLISH_TOKEN).")
    parser.add_argument("--port", type=_port, default=8765, help="0 picks a free port (default 8765)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--data", type=Path, default=Path("publishing-service"),
                        help="where the SQLite file lives (default ./publishing-service)")
    parser.add_argument("--no-dedup", action="store_true", help="ignore Idempotency-Key; no lookup")
    parser.add_argument("--fail-503", type=_count, default=0, metavar="N", help="the first N POSTs answer 503")
    parser.add_argument("--lose-answer", type=_count, default=0, metavar="N",
                        help="the first N POSTs commit, then close the connection unanswered")
    parser.add_argument("--slow", type=_seconds, default=0.0, metavar="SECONDS",
                        help="every POST waits this long after committing")
    parser.add_argument("--act-after", type=_seconds, default=0.0, metavar="SECONDS",
                        help="every POST waits this long before committing")
    parser.add_argument("--answer-status", type=_status, default=None, metavar="CODE",
                        help="a POST that committed answers CODE instead of its publication")
    parser.add_argument("--answer-status-times", type=_count, default=1 << 30, metavar="N",
                        help="only the first N POSTs that commit answer --answer-status (default: all)")
    parser.add_argument("--ignore-filter", action="store_true",
                        help="GET ?idempotency_key= ignores the key and lists every publication")
    parser.add_argument("--answer-bytes", type=_count, default=0, metavar="N",
                        help="pad every answer to a POST to at least N bytes")
    parser.add_argument("--verbose", action="store_true", help="one line per request on stderr")
    args = parser.parse_args(argv)
    try:
        token = settings().publish_token
    except Refused as exc:
        print(f"STOPPED: {exc}", file=sys.stderr)
        return 1
    if not token:
        print("STOPPED: HITL_PUBLISH_TOKEN is not set: the service accepts only requests that carry it",
              file=sys.stderr)
        return 1
    try:
        faults = _Faults(args.fail_503, args.lose_answer, args.slow, act_after=args.act_after,
                         answer_status=args.answer_status, answer_status_times=args.answer_status_times,
                         ignore_filter=args.ignore_filter, answer_bytes=args.answer_bytes)
        server = _server(args.data, args.host, args.port, token=token, dedup=not args.no_dedup, faults=faults,
                         verbose=args.verbose)
    except (OSError, sqlite3.Error) as exc:
        print(f"STOPPED: the service could not start on {args.host}:{args.port} with {args.data}: "
              f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 1

    def on_term(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    host, port = server.server_address[:2]
    print(f"publishing service: http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        server.server_close()
    return 0
