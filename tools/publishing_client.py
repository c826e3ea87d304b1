"""The HTTP client of a publishing service (the contract of :mod:`tools.publishing_service`), which
tells the effect gate what happened to each request through the exceptions of
:mod:`workflow.external`. Any answer at all means the request arrived, so only what the client can
prove is "not sent":

- :class:`~workflow.external.NotSent`: no connection was made (refused, the connect timed out, the
  address did not resolve), or the client never finished writing the request (a write that failed,
  a header httpx will not write, a URL it cannot send to);
- everything else is an answer, or may have been one, and goes by :data:`ANSWERS`: a publication
  (``200``/``201``), :class:`~workflow.external.Conflict` (``409``), or
  :class:`~workflow.external.MayHaveActed` (any other status, an answer over :data:`MAX_ANSWER_BYTES`
  or not a publication, a timeout after the request was sent, the connection closed before the
  answer), which says whether another try in the same command can help (``retry``). A deduplicating
  provider is then asked again with the same key; with one that cannot deduplicate the call is in
  doubt (docs/external-effects.md, "What an answer means").

One request per call and no retries (the gate retries). Messages are one line naming the URL and
the status, never the token or the service's own words.
"""

from __future__ import annotations

import json
import os
import threading
from http import HTTPStatus
from typing import Any, NoReturn, Optional

import httpx

from workflow.external import Conflict, MayHaveActed, NotDeduplicating, NotSent

PATH = "/v1/publications"
#: The largest answer read, in bytes: a larger one is given up and counts as "may have acted".
MAX_ANSWER_BYTES = 1024 * 1024

#: What an answer's status means, the one table (docs/external-effects.md shows it): ``(meaning,
#: retry)`` with ``meaning`` ``"outcome"`` (the publication is in the body), ``"conflict"`` (the key
#: is held for other content) or ``"may_have_acted"``, and ``retry`` whether another try of the same
#: command can help (for a deduplicating provider, which never acts twice on one key). A status not
#: listed is read by its class: :data:`BY_CLASS`.
ANSWERS: dict[int, tuple[str, bool]] = {
    200: ("outcome", False), 201: ("outcome", False),
    409: ("conflict", False),
    408: ("may_have_acted", True), 425: ("may_have_acted", True), 429: ("may_have_acted", True),
    400: ("may_have_acted", False), 401: ("may_have_acted", False), 403: ("may_have_acted", False),
    404: ("may_have_acted", False), 413: ("may_have_acted", False), 422: ("may_have_acted", False),
}
#: The meaning of a status :data:`ANSWERS` does not list, by its hundreds: a redirect is not
#: followed, a 4xx gets the same answer again, a 5xx may pass.
BY_CLASS: dict[int, tuple[str, bool]] = {1: ("may_have_acted", False), 2: ("may_have_acted", False),
                                         3: ("may_have_acted", False), 4: ("may_have_acted", False),
                                         5: ("may_have_acted", True)}


def meaning(status: int) -> tuple[str, bool]:
    """``(meaning, retry)`` of an answer with ``status`` (:data:`ANSWERS`, else :data:`BY_CLASS`;
    anything outside 100-599: ``("may_have_acted", False)``)."""
    return ANSWERS.get(status) or BY_CLASS.get(status // 100, ("may_have_acted", False))


class _TooLarge(Exception):
    """An answer over :data:`MAX_ANSWER_BYTES` (its status code in ``args[0]``)."""


class _Answer:
    """A whole answer, read within the bounds: ``status_code``, ``content`` (bytes), ``request``."""

    def __init__(self, status_code: int, content: bytes, request: httpx.Request) -> None:
        self.status_code, self.content, self.request = status_code, content, request

    def json(self) -> Any:
        return json.loads(self.content)

#: One ``httpx.Client`` per (process, timeout): building one costs 60-150 ms here (its TLS
#: context), about half of a task's time through the service (benchmarks/external_effect.py).
#: Keyed by the process ID too, so a forked child never shares its parent's pooled connections.
_CLIENTS: dict[tuple[int, float], httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _bounded(timeout_s: float, request: Any) -> "_Answer":
    """``request()``, but given up (``TimeoutError``) after ``timeout_s`` seconds in all: httpx's
    timeouts bound each read, so a service that drips its answer a byte at a time would otherwise
    hold the command (and the task's lock) for as long as it likes. The request runs in a daemon
    thread, left to finish or fail on its own: a request given up may still have acted, which is
    what the caller is told."""
    done = threading.Event()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["response"] = request()
        except BaseException as exc:  # handed to the caller as it was
            out["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="publishing-request", daemon=True).start()
    if not done.wait(timeout_s):
        raise TimeoutError(f"no whole answer within {timeout_s:g} s")
    if "error" in out:
        raise out["error"]
    return out["response"]


def _http(timeout_s: float) -> httpx.Client:
    """The shared ``httpx.Client`` of this process for ``timeout_s`` (made on first use)."""
    key = (os.getpid(), timeout_s)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = httpx.Client(timeout=timeout_s)
        return client


class PublishingClient:
    """A publishing service at ``url`` (``http(s)://host[:port][/path]``, no trailing slash
    needed), sending ``Authorization: Bearer <token>`` when ``token`` is set, each request allowed
    ``timeout_s`` seconds (connect, send, answer)."""

    def __init__(self, url: str, token: Optional[str], *, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"PublishingClient({self.url!r}, timeout_s={self.timeout_s})"

    def _headers(self, key: Optional[str] = None) -> dict[str, bytes]:
        headers = {}
        if self._token:
            headers["Authorization"] = b"Bearer " + self._token.encode("utf-8")
        if key is not None:
            headers["Idempotency-Key"] = key.encode("utf-8")
        return headers

    def _request(self, method: str, params: Optional[dict[str, str]] = None, *,
                 key: Optional[str] = None, json: Any = None) -> "_Answer":
        where = f"{method} {self.url}{PATH}"

        def whole() -> _Answer:  # the answer read to its end, never more than MAX_ANSWER_BYTES
            with _http(self.timeout_s).stream(method, self.url + PATH, params=params, json=json,
                                              headers=self._headers(key)) as response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
                    raise _TooLarge(response.status_code)
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise _TooLarge(response.status_code)
                return _Answer(response.status_code, bytes(body), response.request)

        try:
            return _bounded(self.timeout_s, whole)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise NotSent(f"{where}: nothing reached the service ({type(exc).__name__})") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise NotSent(f"{where}: not a URL this client can send to ({type(exc).__name__})",
                          retry=False) from None
        except httpx.LocalProtocolError as exc:  # e.g. a header value httpx will not send: nothing sent
            raise NotSent(f"{where}: the request could not be written ({type(exc).__name__})", retry=False) from None
        except (httpx.WriteError, httpx.WriteTimeout) as exc:  # the request was never written whole
            raise NotSent(f"{where}: the request was not written to its end ({type(exc).__name__})") from None
        except _TooLarge as exc:
            raise MayHaveActed(f"{where}: {exc.args[0]}, with an answer over {MAX_ANSWER_BYTES} bytes (not read); "
                               "the request arrived and the service may have acted", retry=False) from None
        except TimeoutError:
            raise MayHaveActed(f"{where}: no whole answer within {self.timeout_s:g} s; the service may have "
                               "acted") from None
        except httpx.TransportError as exc:  # ReadTimeout, RemoteProtocolError, ReadError…
            raise MayHaveActed(f"{where}: sent, but no answer came ({type(exc).__name__}); the service may "
                               "have acted") from None

    def publish(self, request_key: str, title: str, body: str, channel: str) -> dict[str, Any]:
        """Send one publication with ``request_key`` as its ``Idempotency-Key``; return the
        service's publication (a dict with a string ``"id"``), created (201) or replayed (200).
        Raises :class:`NotSent`, :class:`Conflict` or :class:`MayHaveActed` (module docstring)."""
        response = self._request("POST", key=request_key, json={"title": title, "body": body, "channel": channel})
        if meaning(response.status_code)[0] != "outcome":
            _fail(response)
        data = _json(response)
        if not (isinstance(data, dict) and isinstance(data.get("id"), str)):
            raise MayHaveActed(f"POST {response.request.url}: {response.status_code} without a publication "
                               "in its body; the service may have acted")
        return data

    def find(self, request_key: str) -> Optional[dict[str, Any]]:
        """The publication the service holds under ``request_key`` (the first one whose
        ``idempotency_key`` is exactly ``request_key``: a service that ignores the filter and lists
        every publication never lends this key another's), or None when it holds none. Only a
        deduplicating service can answer: a ``404`` (no lookup by key) raises
        :class:`NotDeduplicating` (``HITL_PUBLISH_IDEMPOTENCY=key`` for a service that ignores the
        key); the failures of :meth:`publish` raise as there; :class:`NotSent` when nothing reached it."""
        response = self._request("GET", {"idempotency_key": request_key})
        if response.status_code == 404:
            raise NotDeduplicating(f"GET {response.request.url}: 404, the service has no lookup by idempotency key")
        if response.status_code != 200:
            _fail(response)
        data = _json(response)
        found = data.get("data") if isinstance(data, dict) else None
        if not (isinstance(found, list) and all(isinstance(p, dict) for p in found)):
            raise MayHaveActed(f"GET {response.request.url}: 200 without a list of publications")
        return next((p for p in found if p.get("idempotency_key") == request_key), None)


def _json(response: "_Answer") -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _fail(response: "_Answer") -> NoReturn:
    """Raise the exception an answer other than the outcome means (:data:`ANSWERS`): every answer
    means the request arrived, so nothing here is :class:`NotSent`."""
    status = response.status_code
    # the status's standard phrase, never the service's own words: a service may echo the token
    try:
        reason = f" {HTTPStatus(status).phrase}"
    except ValueError:
        reason = ""
    where = f"{response.request.method} {response.request.url}: {status}{reason}"
    kind, retry = meaning(status)
    if kind == "conflict":
        raise Conflict(f"{where} (the idempotency key is held for other content)")
    raise MayHaveActed(f"{where} (the request arrived; the service may have acted)", retry=retry)


def from_settings() -> Optional[tuple[PublishingClient, bool]]:
    """The client ``HITL_PUBLISH_URL`` names (with ``HITL_PUBLISH_TOKEN`` and
    ``HITL_PUBLISH_TIMEOUT``) and whether the service deduplicates (``HITL_PUBLISH_IDEMPOTENCY`` is
    ``key``); None when ``HITL_PUBLISH_URL`` is unset. Raises :class:`state.errors.Refused` for a
    bad variable (:func:`state.settings.settings`)."""
    from state.settings import settings

    found = settings()
    if found.publish_url is None:
        return None
    client = PublishingClient(found.publish_url, found.publish_token, timeout_s=found.publish_timeout)
    return client, found.publish_idempotency == "key"
