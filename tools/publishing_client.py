"""The HTTP client of a publishing service (the contract of :mod:`tools.publishing_service`), which
tells the effect gate what happened to each request through the exceptions of
:mod:`workflow.external`:

- :class:`~workflow.external.NotSent`: nothing reached the service (the connection was refused or
  timed out, the address did not resolve), or it refused before acting (``401``/``403``: a wrong
  token, and ``400``/``413``/``422``: a request it will never take, both with ``retry=False``;
  ``408``/``429``: try again);
- :class:`~workflow.external.Conflict`: ``409``, the key is held for other content;
- :class:`~workflow.external.MayHaveActed`: everything else: a ``5xx``, a timeout after the request
  was sent, the connection closed before the answer, an answer that is not a publication, a status
  this client does not know.

One request per call and no retries (the gate retries). Messages are one line naming the URL and
the status, never the token.
"""

from __future__ import annotations

import os
import threading
from http import HTTPStatus
from typing import Any, NoReturn, Optional

import httpx

from workflow.external import Conflict, MayHaveActed, NotSent

PATH = "/v1/publications"

#: One ``httpx.Client`` per (process, timeout): building one costs 60-150 ms here (its TLS
#: context), about half of a task's time through the service (benchmarks/external_effect.py).
#: Keyed by the process ID too, so a forked child never shares its parent's pooled connections.
_CLIENTS: dict[tuple[int, float], httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _bounded(timeout_s: float, request: Any) -> httpx.Response:
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
                 key: Optional[str] = None, json: Any = None) -> httpx.Response:
        where = f"{method} {self.url}{PATH}"
        try:
            return _bounded(self.timeout_s, lambda: _http(self.timeout_s).request(
                method, self.url + PATH, params=params, json=json, headers=self._headers(key)))
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise NotSent(f"{where}: nothing reached the service ({type(exc).__name__})") from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise NotSent(f"{where}: not a URL this client can send to ({type(exc).__name__})",
                          retry=False) from None
        except httpx.LocalProtocolError as exc:  # e.g. a header value httpx will not send: nothing sent
            raise NotSent(f"{where}: the request could not be written ({type(exc).__name__})", retry=False) from None
        except TimeoutError:
            raise MayHaveActed(f"{where}: no whole answer within {self.timeout_s:g} s; the service may have "
                               "acted") from None
        except httpx.TransportError as exc:  # ReadTimeout, WriteTimeout, RemoteProtocolError, ReadError…
            raise MayHaveActed(f"{where}: sent, but no answer came ({type(exc).__name__}); the service may "
                               "have acted") from None

    def publish(self, request_key: str, title: str, body: str, channel: str) -> dict[str, Any]:
        """Send one publication with ``request_key`` as its ``Idempotency-Key``; return the
        service's publication (a dict with a string ``"id"``), created (201) or replayed (200).
        Raises :class:`NotSent`, :class:`Conflict` or :class:`MayHaveActed` (module docstring)."""
        response = self._request("POST", key=request_key, json={"title": title, "body": body, "channel": channel})
        if response.status_code not in (200, 201):
            _fail(response)
        data = _json(response)
        if not (isinstance(data, dict) and isinstance(data.get("id"), str)):
            raise MayHaveActed(f"POST {response.request.url}: {response.status_code} without a publication "
                               "in its body; the service may have acted")
        return data

    def find(self, request_key: str) -> Optional[dict[str, Any]]:
        """The publication the service holds under ``request_key`` (the first one), or None when it
        holds none. Only a deduplicating service can answer: a ``404`` (no lookup) raises
        :class:`MayHaveActed`, as do the failures of :meth:`publish`; :class:`NotSent` when nothing
        reached it."""
        response = self._request("GET", {"idempotency_key": request_key})
        if response.status_code == 404:
            raise MayHaveActed(f"GET {response.request.url}: 404, the service has no lookup by idempotency key")
        if response.status_code != 200:
            _fail(response)
        data = _json(response)
        found = data.get("data") if isinstance(data, dict) else None
        if not (isinstance(found, list) and all(isinstance(p, dict) for p in found)):
            raise MayHaveActed(f"GET {response.request.url}: 200 without a list of publications")
        return found[0] if found else None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _fail(response: httpx.Response) -> NoReturn:
    """Raise the exception an answer other than success means (module docstring)."""
    status = response.status_code
    # the status's standard phrase, never the service's own words: a service may echo the token
    try:
        reason = f" {HTTPStatus(status).phrase}"
    except ValueError:
        reason = ""
    where = f"{response.request.method} {response.request.url}: {status}{reason}"
    if status in (401, 403):
        raise NotSent(f"{where} (the service refused the token)", retry=False)
    if status in (400, 413, 422):
        raise NotSent(f"{where} (the service refused the request before acting)", retry=False)
    if status in (408, 429):
        raise NotSent(f"{where} (the service did not take the request; try again)")
    if status == 409:
        raise Conflict(f"{where} (the idempotency key is held for other content)")
    raise MayHaveActed(f"{where} (the service may have acted)")


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
