"""The approval inbox in the browser: ``python run.py serve`` (docs/inbox.md).

A small Starlette app, rendered on the server with Jinja2 (autoescaped), served by uvicorn; one
static script (``web_assets/static/inbox.js``) refreshes the open page every
:data:`POLL_SECONDS`. The SDK is imported once, when the server starts, so a decision costs what
the workflow costs, not a new process.

Pages: ``GET /`` the inbox (``?status=…&page=N``), ``GET /task/{id}`` one task (its pending calls
with a form each, each call's decision so far, budget, history; once decided, the receipt as
``show`` prints it), ``POST /task/{id}/decide`` a decision on one call, in two steps: the press of
Approve or Reject only shows what it will do and a confirming button (nothing is decided, and it
works without JavaScript); the confirming post (``confirm=yes``) decides. A decision goes through
:func:`decide_call`,
the one adapter to the engine (the public :class:`workflow.Engine`, the door the command line's
``resume --call`` goes through), so the task lock, the decision table and the revision check (the form's
``revision``, as ``expect_revision``) serialise page and command-line decisions.

Security (a local page can be attacked from other tabs, other sites and other users; every check
is in :class:`Gate`):

- ``Host`` must be the address served (DNS rebinding); a request carrying ``Origin`` must come
  from it, and a ``POST`` must carry it; a request the browser marks ``Sec-Fetch-Site:
  cross-site`` (a link or redirect from another site) is refused;
- the first URL's ``?token=`` (``secrets.token_urlsafe(32)``: 256 bits) is compared in constant
  time and traded for a session cookie (HttpOnly, SameSite=Strict, signed with a key that lives only
  in this process); no valid cookie or token: 403;
- every ``POST`` carries a CSRF token bound to that session (HMAC of the session's nonce);
- every response has a Content-Security-Policy without ``unsafe-inline`` (:data:`CSP`);
- the reviewer is the server's ``--reviewer``, never a form field.

Team mode (a reviewer is registered; docs/reviewers.md), :class:`TeamGate` instead: no URL token
(a ``?token=`` is refused); each reviewer signs in on ``GET/POST /signin`` with their own reviewer
token (a form post, never a URL; the form carries a CSRF token bound to a signed pre-session
cookie; failed sign-ins are limited; :func:`workflow.team.sign_in`, the CLI's authentication), and
gets a session of their own (:class:`Sessions`, in this process's memory; the cookie HttpOnly,
SameSite=Strict, Secure over TLS, with the expiry ``HITL_INBOX_SESSION_MAX_AGE``; a CSRF token per
session). At every request the session's reviewer is resolved again against the store's list
(:func:`workflow.team.signed_in`: still registered, with the token signed in with), and expired
sessions are refused (:func:`state.clock.now`). ``POST /signout`` (with CSRF) ends the session on the
server. A decision's ``by`` is the session's reviewer; the policy's checks are the command line's
(:func:`workflow.team.check_before` before the lock, :func:`workflow.team.count` under it), and the
same check decides which buttons a page shows.

What a page shows: Jinja2 escapes HTML, and every value printed goes through :func:`shown` first,
the terminal's rule (:func:`workflow.observe.views.one_line`): a control, bidi or zero-width character from
a model or a file (U+202E, ESC, a newline in a call ID) is shown escaped (``\u202e``), never raw.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from workflow.observe.budget_view import model_line, spent_line
from state import clock
from state.errors import Next, Refused, no_hint
from state.schema import MAX_REASON_CHARS, Checkpoint, check_text, valid_key
from workflow import Task, calls
from workflow.review import inbox_index
from workflow.review.inbox import WAITING
from workflow.review.inbox_index import FILTERS, InboxIndex, timing
from workflow.observe.views import one_line, task_view

ASSETS = Path(__file__).resolve().parent / "web_assets"
#: Every response's Content-Security-Policy: scripts and styles only from this origin (no inline
#: script or style at all), no frames, forms post only here.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # "no-referrer" would make Chromium send "Origin: null"
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
#: How often the open page asks for a fresh copy (seconds; the number is read by inbox.js).
POLL_SECONDS = 2
#: The largest POST body read (bytes): a reason is at most 1,000 characters.
MAX_FORM_BYTES = 16 * 1024


class FormValue(str):
    """A value a form must send back exactly as it came (a call ID, a reason typed on the
    confirming step): HTML-escaped by Jinja2 like every value, not rewritten by :func:`shown`."""


class Lines(str):
    """Text whose line breaks are its own (a draft's body, a reason, the receipt): each line is
    shown by :func:`shown`'s rule, the breaks are kept."""


def shown(value: Any) -> Any:
    """Every value a template prints, before Jinja2's HTML escaping (the environment's
    ``finalize``): :func:`workflow.observe.views.one_line` of its text, so control, bidi and zero-width
    characters appear escaped (``\x1b``, ``\u202e``, ``\n``); a :class:`Lines` value keeps its
    line breaks, a :class:`FormValue` is left as it is (it goes back in a form, never read as
    text); Jinja2's own output (a rendered block, already shown) passes through."""
    if isinstance(value, (Markup, FormValue)):
        return value
    if isinstance(value, Lines):
        return "\n".join(one_line(line) for line in value.split("\n"))
    return one_line(value if isinstance(value, str) else str(value))


def readable_time(value: Any) -> str:
    """An ISO-8601 timestamp as a person reads it, in UTC to the minute:
    ``2026-12-01T22:13:05.123456Z`` -> ``2026-12-01 22:13 UTC``. A value that is not a timestamp
    comes back as it is (:func:`shown` escapes it)."""
    try:
        at = clock.parse_iso(str(value))
    except ValueError:
        return str(value)
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _digest(key: bytes, purpose: str, nonce: str) -> str:
    return hmac.new(key, f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()



def _with_security_headers(send: Any) -> Any:
    """``send`` that adds :data:`SECURITY_HEADERS` to every response's start."""

    async def send_with_headers(message: Any) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
        await send(message)

    return send_with_headers

class Gate:
    """ASGI middleware: the checks of the module docstring, before any page code runs.

    ``token`` is the URL's secret, ``hosts`` the accepted ``Host`` values (``127.0.0.1:8765``),
    ``cookie`` the session cookie's name (it carries the port: browsers share cookies across the
    ports of one host). Refusals are a short HTML page with status 403 (no page code runs); ``hint``
    words the command that started the server (``Next("that_serve")``, e.g. ``cli.hints.hint``).
    """

    def __init__(self, app: Any, *, token: str, hosts: set[str], cookie: str,
                 hint: Callable[[Next], str] = no_hint) -> None:
        self.app = app
        self.printed = f"open the URL{hint(Next('that_serve'))} printed"
        self.token = token
        self.hosts = hosts
        self.origins = {f"http://{h}" for h in hosts}
        self.cookie = cookie
        self.key = secrets.token_bytes(32)  # signs sessions and CSRF tokens; dies with the process

    def _signed(self, value: str, purpose: str) -> Optional[str]:
        """The nonce of ``value`` (``nonce.signature``) if signed for ``purpose``, else None."""
        nonce, _, sig = value.partition(".")
        if nonce and hmac.compare_digest(sig.encode(), _digest(self.key, purpose, nonce).encode()):
            return nonce
        return None

    def _session(self, request: Request) -> Optional[str]:
        """The nonce of a validly signed session cookie, else None."""
        return self._signed(request.cookies.get(self.cookie, ""), "session")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send_with_headers = _with_security_headers(send)
        request = Request(scope)
        why = self._refusal(request)
        if why is not None:
            await _plain(403, why)(scope, receive, send_with_headers)
            return
        nonce = self._session(request)
        token = request.query_params.get("token")
        if token is not None:  # the first URL: trade the token for a session cookie
            if request.method != "GET" or not hmac.compare_digest(token.encode(), self.token.encode()):
                await _plain(403, f"this is not the token of this server: {self.printed}")(
                    scope, receive, send_with_headers)
                return
            nonce = secrets.token_urlsafe(16)
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            path = "/" + request.url.path.lstrip("/")  # never "//host": a redirect off this server
            response = RedirectResponse(path + (f"?{rest}" if rest else ""), 303)
            response.set_cookie(self.cookie, f"{nonce}.{_digest(self.key, 'session', nonce)}",
                                httponly=True, samesite="strict", path="/")
            await response(scope, receive, send_with_headers)
            return
        if nonce is None:
            await _plain(403, f"no valid session: {self.printed} (it carries the token)")(
                scope, receive, send_with_headers)
            return
        scope["csrf"] = _digest(self.key, "csrf", nonce)  # the session's CSRF token, for the pages
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Optional[str]:
        """Why the request is refused before any session check (Host, Origin), or None."""
        host = request.headers.get("host", "")
        if host not in self.hosts:
            return f"this server answers only to {' or '.join(sorted(self.hosts))}, not Host {host[:100]!r}"
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.origins:
            return f"requests from another origin ({origin[:100]!r}) are refused"
        if request.method not in ("GET", "HEAD") and origin is None:
            return "a POST must say where it comes from (no Origin header)"
        if request.headers.get("sec-fetch-site") == "cross-site":
            return "requests from another site are refused"
        return None


def _plain(status: int, message: str, *, signin: bool = False) -> HTMLResponse:
    """A refusal page: one sentence, escaped, no script, no style (``signin``: and a link to the
    sign-in form, team mode)."""
    from html import escape

    link = '<p><a href="/signin">Sign in</a></p>' if signin else ""
    return HTMLResponse(f"<!doctype html><title>{status}</title><p>STOPPED: {escape(message)}</p>{link}",
                        status_code=status)


@dataclass(frozen=True)
class Session:
    """One reviewer's sign-in (team mode): ``reviewer`` (their name), ``token_id`` and
    ``fingerprint`` (:func:`state.reviewers.fingerprint`) of the token they signed in with (never
    the token itself), ``expires`` (an aware datetime: the wall clock at sign-in plus
    ``HITL_INBOX_SESSION_MAX_AGE``)."""

    reviewer: str
    token_id: str
    fingerprint: str
    expires: datetime


#: The most sessions one server keeps (the oldest is ended past it), and the most failed sign-ins
#: it takes in :data:`SIGNIN_WINDOW_S` seconds (then every sign-in is refused until the window moves).
MAX_SESSIONS = 1000
#: The most sessions one reviewer holds at once: their next sign-in ends their own oldest, so no
#: reviewer can push everyone else's sessions out by signing in over and over.
MAX_SESSIONS_PER_REVIEWER = 8
MAX_FAILED_SIGNINS, SIGNIN_WINDOW_S = 10, 60.0


class Sessions:
    """Team mode's sessions, in this process's memory only: a server that stops (or restarts)
    forgets every one, as it forgets the key that signs their cookies. ``max_age``: seconds a
    session lasts. Thread-safe (pages run in worker threads)."""

    def __init__(self, max_age: int) -> None:
        self.max_age = max_age
        self._open: dict[str, Session] = {}
        self._failed: deque[float] = deque()
        self._lock = threading.Lock()

    def open(self, reviewer: Any) -> str:
        """A new session for ``reviewer`` (a :class:`state.reviewers.Reviewer`, just authenticated);
        returns its nonce (32 random bytes, URL-safe). Ends expired sessions, the reviewer's own
        oldest beyond :data:`MAX_SESSIONS_PER_REVIEWER`, and the oldest beyond :data:`MAX_SESSIONS`."""
        from state import reviewers as people

        nonce = secrets.token_urlsafe(32)
        session = Session(reviewer=reviewer.name, token_id=reviewer.token_id,
                          fingerprint=people.fingerprint(reviewer),
                          expires=clock.plus(clock.wall(), self.max_age))
        now = clock.now()
        with self._lock:
            for old in [n for n, s in self._open.items() if s.expires <= now]:
                del self._open[old]
            own = [n for n, s in self._open.items() if s.reviewer == session.reviewer]  # oldest first
            for old in own[:max(0, len(own) - MAX_SESSIONS_PER_REVIEWER + 1)]:
                del self._open[old]
            while len(self._open) >= MAX_SESSIONS:
                del self._open[next(iter(self._open))]
            self._open[nonce] = session
        return nonce

    def get(self, nonce: Optional[str]) -> Optional[Session]:
        """The session of ``nonce``, or None (never opened, ended, or forgotten with the process)."""
        with self._lock:
            return self._open.get(nonce) if nonce else None

    def end(self, nonce: Optional[str]) -> None:
        """Forget the session of ``nonce`` (sign-out; a session found expired or no longer valid)."""
        with self._lock:
            self._open.pop(nonce or "", None)

    def may_try(self) -> bool:
        """False while :data:`MAX_FAILED_SIGNINS` sign-ins failed in the last
        :data:`SIGNIN_WINDOW_S` seconds (then no token is even checked)."""
        with self._lock:
            cutoff = time.monotonic() - SIGNIN_WINDOW_S
            while self._failed and self._failed[0] < cutoff:
                self._failed.popleft()
            return len(self._failed) < MAX_FAILED_SIGNINS

    def failed(self) -> None:
        """Count one failed sign-in."""
        with self._lock:
            self._failed.append(time.monotonic())


class TeamGate(Gate):
    """:class:`Gate` in team mode (the module docstring): the same Host, Origin and Sec-Fetch-Site
    checks first, then, instead of the URL token, each reviewer's own sign-in.

    ``store`` holds the reviewer list; ``pages`` (an :class:`Inbox`) renders the sign-in form;
    ``sessions`` (:class:`Sessions`) keeps the sessions; ``cookie``: the session cookie's name (the
    sign-in form's pre-session cookie is ``cookie + "_signin"``). What a page gets: ``scope["csrf"]``
    (the session's CSRF token), ``scope["reviewer"]`` (the name, resolved again for this request)
    and ``scope["session"]`` (the :class:`Session`). Without a session a ``GET`` is sent to
    ``/signin`` (303), anything else is refused (403). A session that is unknown, expired, or whose
    reviewer was removed or rotated since is ended and refused (403, the cookie cleared)."""

    def __init__(self, app: Any, *, store: Any, pages: "Inbox", sessions: Sessions, hosts: set[str],
                 cookie: str, hint: Callable[[Next], str] = no_hint) -> None:
        super().__init__(app, token="", hosts=hosts, cookie=cookie, hint=hint)
        self.origins |= {f"https://{h}" for h in hosts}  # this address behind TLS (the cookie is then Secure)
        self.hint = hint
        self.store = store
        self.pages = pages
        self.sessions = sessions
        self.signin_cookie = f"{cookie}_signin"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send_with_headers = _with_security_headers(send)
        request = Request(scope, receive)
        response = await self._gate(request)
        if response is None:
            await self.app(scope, receive, send_with_headers)
        else:
            await response(scope, receive, send_with_headers)

    async def _gate(self, request: Request) -> Optional[Response]:
        """The answer of the gate itself (a refusal, the sign-in, the sign-out), or None: the page
        runs, with the session's reviewer in the scope."""
        why = self._refusal(request)
        if why is not None:
            return _plain(403, why)
        if "token" in request.query_params:  # never echoed: a URL lands in histories and logs
            return _plain(403, "team mode: a token in the URL is never accepted; sign in with your reviewer "
                          "token on the form at /signin", signin=True)
        path, method = request.url.path, request.method
        if path == "/signin":
            if method in ("GET", "HEAD"):
                return self.signin_page(request)
            return await self._sign_in(request) if method == "POST" else _plain(405, "GET or POST /signin")
        if (path.startswith("/static/") or path == "/favicon.ico") and method in ("GET", "HEAD"):
            return None  # the stylesheet and the script of every page, the sign-in form's too (public)
        nonce = self._signed(request.cookies.get(self.cookie, ""), "session")
        session = self.sessions.get(nonce)
        if session is None or nonce is None:
            if method in ("GET", "HEAD") and path != "/signout":
                return RedirectResponse("/signin", 303)
            return _plain(403, "no valid session: sign in at /signin", signin=True)
        try:
            by = await run_in_threadpool(self._still_valid, session)
        except Refused as exc:
            self.sessions.end(nonce)
            response = _plain(403, exc.render(self.hint), signin=True)
            response.delete_cookie(self.cookie, path="/")
            return response
        request.scope["csrf"] = _digest(self.key, "csrf", nonce)
        request.scope["reviewer"] = by
        request.scope["session"] = session
        if path == "/signout":
            return await self._sign_out(request, nonce) if method == "POST" else _plain(405, "POST /signout")
        return None

    def _still_valid(self, session: Session) -> str:
        """The session's reviewer for this request: not expired (:func:`state.clock.now`, which
        ``HITL_NOW`` only moves forward), still registered with the token signed in with
        (:func:`workflow.team.signed_in`). Raises :class:`Refused`."""
        from workflow import team

        if clock.now() >= session.expires:
            raise Refused("unauthenticated", f"your sign-in expired at {readable_time(clock.iso(session.expires))} "
                          f"(a session lasts {self.sessions.max_age} s, HITL_INBOX_SESSION_MAX_AGE): sign in again")
        return team.signed_in(self.store, session.reviewer, session.token_id, session.fingerprint)

    def signin_page(self, request: Request, *, error: Optional[str] = None, status: int = 200) -> Response:
        """The sign-in form, with the CSRF token bound to the browser's pre-session cookie (a new
        one unless it holds a valid one: the form of another tab, or the page's own refresh, stays
        valid). The token box is always empty: a token is never sent back."""
        pre = self._signed(request.cookies.get(self.signin_cookie, ""), "signin") or secrets.token_urlsafe(16)
        html = self.pages.env.get_template("signin.html").render(
            partial=False, reviewer=None, csrf=_digest(self.key, "signin-csrf", pre), error=error,
            poll_seconds=POLL_SECONDS, version="signin")
        response = HTMLResponse(html, status_code=status)
        response.set_cookie(self.signin_cookie, f"{pre}.{_digest(self.key, 'signin', pre)}", httponly=True,
                            samesite="strict", secure=request.url.scheme == "https", path="/signin")
        return response

    async def _sign_in(self, request: Request) -> Response:
        """``POST /signin``: the pre-session's CSRF token, the rate limit, then the token
        (:func:`workflow.team.sign_in`); a new session (a fresh nonce: an older session of this
        browser ends) and 303 to the inbox. A wrong token: the form again with one line, 403."""
        from workflow import team

        try:
            form = await _read_form(request)
        except ValueError as exc:
            return _plain(400, str(exc))
        pre = self._signed(request.cookies.get(self.signin_cookie, ""), "signin")
        if pre is None or not hmac.compare_digest(form.get("csrf", "").encode(),
                                                  _digest(self.key, "signin-csrf", pre).encode()):
            return self.signin_page(request, status=403,
                                    error="the sign-in form carries no valid CSRF token: sign in on this form")
        if not self.sessions.may_try():
            return self.signin_page(request, status=429, error=f"too many failed sign-ins in the last "
                                    f"{SIGNIN_WINDOW_S:.0f} seconds: wait a minute, then sign in again")
        try:
            reviewer = await run_in_threadpool(team.sign_in, self.store, form.get("token", "").strip())
        except Refused as exc:
            if exc.code != "unauthenticated":  # a list that does not verify: the store's own words
                return self.signin_page(request, status=500, error=exc.render(self.hint))
            self.sessions.failed()
            return self.signin_page(request, status=403, error="this is not the token of a registered reviewer "
                                    "(unknown, removed, rotated or mistyped); nobody is signed in")
        self.sessions.end(self._signed(request.cookies.get(self.cookie, ""), "session"))
        nonce = self.sessions.open(reviewer)
        response = RedirectResponse("/", 303)
        response.set_cookie(self.cookie, f"{nonce}.{_digest(self.key, 'session', nonce)}", httponly=True,
                            samesite="strict", secure=request.url.scheme == "https", path="/",
                            max_age=self.sessions.max_age)
        response.delete_cookie(self.signin_cookie, path="/signin")
        return response

    async def _sign_out(self, request: Request, nonce: str) -> Response:
        """``POST /signout`` (the session's CSRF token): the session ends on the server (its cookie
        no longer works anywhere), the cookie is cleared, 303 to ``/signin``."""
        try:
            form = await _read_form(request)
        except ValueError as exc:
            return _plain(400, str(exc))
        if not hmac.compare_digest(form.get("csrf", "").encode(), request.scope["csrf"].encode()):
            return _plain(403, "the form carries no valid CSRF token: reload the page and sign out again")
        self.sessions.end(nonce)
        response = RedirectResponse("/signin", 303)
        response.delete_cookie(self.cookie, path="/")
        return response


def decide_call(store: Any, application: Any, *, task_id: str, call_id: str, decision: str,
                reason: Optional[str], by: str, expect_revision: int,
                session: Optional[Session] = None) -> Task:
    """Apply one reviewer's decision on one pending call, from the page: the ONE place the page
    reaches the workflow, through the door the command line's ``resume`` and
    :func:`workflow.decide` use (the public :class:`workflow.Engine`, ``call_id`` as ``--call``),
    with ``application`` (a :class:`workflow.application.Application`).

    ``expect_revision`` is the revision the page was rendered from; it is checked before the lock
    (a quick answer for a stale page) and again under it (the check that counts). Returns the
    :class:`workflow.Task` after it (still ``waiting_for_approval`` while other calls of the task wait); raises
    :class:`Refused` for every refusal (nothing decided), e.g. a call that is not pending.

    Team mode (:func:`workflow.team.is_team`): ``by`` is not used; the decision is ``session``'s
    reviewer, resolved again (:func:`workflow.team.signed_in`: still registered with the token
    signed in with), and the policy is checked as ``run.py resume`` checks it. Without a session
    (a server started in single-user mode, and a reviewer registered since) it is refused
    (``unauthenticated``), nothing decided."""
    from workflow import Engine

    engine = Engine(store, application)  # the one door of the command line and the API too
    judged = engine.judge(task_id, decision, by=by, session=session, signs_in=True, call_id=call_id,
                          reason=reason, expect_revision=expect_revision)
    return asyncio.run(engine.decide(judged))


class Inbox:
    """The pages (module docstring) over ``store``, deciding as ``reviewer`` with ``application``
    (:class:`workflow.application.Application`); a refusal's next steps are worded by ``hint`` (the
    application's words for them, e.g. ``cli.hints.hint``; default none). ``team``: team mode
    (``reviewer`` None): each request's reviewer is the signed-in one :class:`TeamGate` put in the
    scope, and a team task's page shows each call's quorum and only the buttons the policy lets
    this reviewer press."""

    def __init__(self, store: Any, application: Any, *, reviewer: Optional[str],
                 hint: Callable[[Next], str] = no_hint, team: bool = False) -> None:
        self.store = store
        self.application = application
        self.reviewer = reviewer
        self.hint = hint
        self.team = team
        self.index = InboxIndex(store, hint)
        self.env = Environment(loader=FileSystemLoader(ASSETS / "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True),
                               finalize=shown)
        self.env.filters.update(lines=Lines, form_value=FormValue, when=readable_time, badge=effect_badge)

    def _render(self, request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
        """``name`` (or, for the page's refresh, ``?partial=1``, only its ``<main>``) as HTML."""
        partial = request.query_params.get("partial") == "1"
        html = self.env.get_template(name).render(
            partial=partial, reviewer=self._by(request), csrf=request.scope["csrf"], team=self.team,
            poll_seconds=POLL_SECONDS, **context)
        return HTMLResponse(html, status_code=code)

    def _by(self, request: Request) -> str:
        """Who decides on this request: the signed-in reviewer (team mode, set by :class:`TeamGate`
        for this request), else the server's ``--reviewer``. Never a form field."""
        return request.scope["reviewer"] if self.team else str(self.reviewer)

    def _who_may(self, cp: Checkpoint, by: str) -> dict[str, dict[str, Any]]:
        """For a team task (:func:`workflow.team.is_team`), each pending call's quorum and what
        ``by`` may do: ``{call_id: {"required", "approved_by", "missing", "not_counted",
        "needed_from", "requester", "approve", "reject"}}``; ``approve``/``reject``: None if
        :func:`workflow.team.check_before` (the check :func:`decide_call` makes) lets ``by`` do it,
        else why not (one line). ``needed_from``: the registered reviewers whose approval would
        still count. Empty for a single-user task (every button, as before)."""
        from workflow import team

        if not team.is_team(self.store, cp):
            return {}
        from state import reviewers as people

        listed = people.registered(self.store)
        registered = {r.name: r for r in listed}
        requester = cp.team.requested_by if cp.team is not None else None
        out: dict[str, dict[str, Any]] = {}
        for entry in team.progress(cp, registered):
            roles, excluded = entry["roles"], not entry["requester_may_approve"]
            why: dict[str, Optional[str]] = {}
            for word in ("approve", "reject"):
                try:
                    team.check_before(self.store, cp, entry["call_id"], word, by)
                    why[word] = None
                except Refused as exc:
                    why[word] = exc.render(self.hint).removesuffix("; nothing changed")
            out[entry["call_id"]] = {
                **entry, **why, "requester": requester,
                "needed_from": [n for n, has in sorted(registered.items()) if n not in entry["approved_by"]
                                and (roles is None or set(roles) & set(has.roles))
                                and not (excluded and n == requester)]}
        return out

    def inbox_page(self, request: Request) -> Response:
        """``GET /``: the inbox (sync: the index reads files, in a worker thread)."""
        started = time.perf_counter()
        status = request.query_params.get("status", WAITING)
        try:
            number = int(request.query_params.get("page", "1"))
            if number < 1:
                raise ValueError
        except ValueError:
            return self._error(request, 400, "page must be a whole number from 1")
        if status not in FILTERS:
            return self._error(request, 400, f"status must be one of {', '.join(FILTERS)}")
        try:
            rows, unverified = self.index.listing()  # what verifies, and a line about the rest
        except Refused as exc:
            return self._error(request, 500, exc.render(self.hint))
        shown = inbox_index.page(rows, status, number)
        now = clock.now()
        items = [(r, timing(r, now, self.hint)) for r in shown.rows]
        version = hashlib.sha256(repr([(r.task_id, r.revision, r.status, t["age"], t["left"])
                                       for r, t in items] + [shown.total, unverified]).encode()).hexdigest()[:16]
        response = self._render(request, "inbox.html", page=shown, items=items, status=status,
                                unverified=unverified,
                                filters=FILTERS, version=version,
                                link=lambda n: "/?" + urlencode({"status": status, "page": n}))
        response.headers["server-timing"] = f"render;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response

    def task_page(self, request: Request) -> Response:
        """``GET /task/{id}``: one task (sync, in a worker thread)."""
        task_id = request.path_params["task_id"]
        banner = "decided" if request.query_params.get("decided") == "1" else None
        return self._task(request, task_id, banner=banner)

    def _task(self, request: Request, task_id: str, *, error: Optional[str] = None,
              banner: Optional[str] = None, status: int = 200,
              confirm: Optional[dict[str, Any]] = None) -> Response:
        if not valid_key(task_id):
            return self._error(request, 404, f"no task {task_id[:100]!r}")
        try:
            cp = self.store.load(task_id)
            receipt = None if cp.status == WAITING else _receipt_text(self.store, task_id)
        except Refused as exc:
            return self._error(request, 404 if not self.store.exists(task_id) else 500, exc.render(self.hint),
                               prior=error)
        by = self._by(request)
        if confirm is not None:  # the confirming step: only for a call that is still pending
            try:
                from workflow import guards, team

                guards.check_revision(cp, confirm["revision"])
                calls.pick_call(cp, confirm["call_id"])
                team.check_before(self.store, cp, confirm["call_id"], confirm["decision"], by)  # decide_call's
            except Refused as exc:
                return self._task(request, task_id, error=exc.render(self.hint), status=_status(exc))
        now = clock.now()
        try:
            row = inbox_index.with_effects(self.store, inbox_index.row_of(cp))
        except Refused as exc:
            return self._error(request, 500, exc.render(self.hint), prior=error)
        t = timing(row, now, self.hint)
        decided, recorded = _decisions_so_far(self.store, cp)
        return self._render(request, "task.html", code=status, cp=cp, error=error, banner=banner,
                            shown_status=row.status, effects=_effects_shown(row, self.hint),
                            receipt=receipt, timing=t, model=model_line(cp.model),
                            budget=spent_line(cp.budget, cp.spend), version=f"{cp.revision}",
                            decided=decided, recorded=recorded, confirm=confirm, rules=self._who_may(cp, by),
                            last=decided[-1] if decided and cp.decision is None else None,
                            href=f"/task/{quote(task_id, safe='')}",
                            action=f"/task/{quote(task_id, safe='')}/decide")

    def _error(self, request: Request, status: int, message: str,
               prior: Optional[str] = None) -> HTMLResponse:
        return self._render(request, "error.html", code=status, message=message, prior=prior,
                            version="error")

    async def decide(self, request: Request) -> Response:
        """``POST /task/{id}/decide``: check the form; without ``confirm=yes`` show the task page
        with the confirming step for that call (status 200, nothing decided; a call no longer
        pending or a stale revision is refused there already); with it, decide through
        :func:`decide_call`, then 303 to the task page. A refusal shows the fresh task page with
        the ``STOPPED`` line."""
        task_id = request.path_params["task_id"]
        try:
            form = await _read_form(request)
        except ValueError as exc:
            return _plain(400, str(exc))
        expected = request.scope["csrf"]  # set by Gate, which admitted this session
        if not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode()):
            return _plain(403, "the form carries no valid CSRF token: reload the page and decide again")
        try:
            decision, call_id, revision, reason = _decision_fields(form)
        except ValueError as exc:
            return await run_in_threadpool(self._task, request, task_id, error=str(exc), status=400)
        if not valid_key(task_id):
            return self._error(request, 404, f"no task {task_id[:100]!r}")
        if form.get("confirm") != "yes":
            confirm = {"decision": decision, "call_id": call_id, "revision": revision,
                       "reason": reason or ""}
            return await run_in_threadpool(self._task, request, task_id, confirm=confirm)
        try:
            await run_in_threadpool(decide_call, self.store, self.application, task_id=task_id, call_id=call_id,
                                    decision=decision, reason=reason, by=self._by(request),
                                    expect_revision=revision, session=request.scope.get("session"))
        except Refused as exc:
            return await run_in_threadpool(self._task, request, task_id, error=exc.render(self.hint),
                                           status=_status(exc))
        except Exception as exc:  # never a traceback in a page; the server's stderr has the log
            what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return await run_in_threadpool(self._task, request, task_id,
                                           error=f"unexpected error ({what})", status=500)
        return RedirectResponse(f"/task/{quote(task_id, safe='')}?decided=1", 303)


def _status(exc: Refused) -> int:
    """The HTTP status of a refused decision: 403 for who decides (``unauthenticated``,
    ``not_allowed``, ``not_you``), else 409 (the task is not in a state to take it)."""
    return 403 if exc.code in ("unauthenticated", "not_allowed", "not_you") else 409


async def _read_form(request: Request) -> dict[str, str]:
    """The POST's url-encoded form as ``{name: value}`` (each name once). Raises ``ValueError``
    (one line) for another content type, a body over :data:`MAX_FORM_BYTES`, a repeated field."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise ValueError("a decision is a form post (application/x-www-form-urlencoded)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ValueError(f"the form is larger than {MAX_FORM_BYTES} bytes")
    from urllib.parse import parse_qsl

    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the form is not valid UTF-8 url-encoded data") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise ValueError(f"the form field {name[:40]!r} is given twice")
        form[name] = value
    return form


def _decision_fields(form: dict[str, str]) -> tuple[str, str, int, Optional[str]]:
    """``(decision, call_id, revision, reason)`` from the form; raises ``ValueError`` (one line)."""
    decision = form.get("decision")
    if decision not in ("approve", "reject"):
        raise ValueError("press Approve or Reject")
    call_id = form.get("call_id", "")
    if not call_id or len(call_id) > 200:
        raise ValueError("the form names no pending call: reload the page")
    try:
        revision = int(form.get("revision", ""))
    except ValueError:
        raise ValueError("the form carries no revision: reload the page") from None
    # Browsers send a textarea's line breaks as CRLF (the HTML form encoding); the reviewer typed LF.
    text = form.get("reason", "").replace("\r\n", "\n").strip()
    if decision == "reject" and not text:
        raise ValueError("a reject needs a reason: it is sent to the model")
    reason = check_text(text, what="reason", limit=MAX_REASON_CHARS, single_line=False) if text else None
    return decision, call_id, revision, reason


def _decisions_so_far(store: Any, cp: Checkpoint) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """``(decided, recorded)`` for the task page: ``decided`` is the latest decision of each call
    that is no longer pending, in the order made (the ``decisions`` entries of
    :func:`workflow.observe.views.task_view`: call_id, tool, channel, decision, by, at, reason, always,
    source); ``recorded`` maps a call still pending to the decision already on record for it (made
    before a crash or a failed run; the next resume carries it out)."""
    pending = {p.call_id for p in cp.pending}
    latest: dict[str, dict[str, Any]] = {}
    for d in task_view(store, cp)["decisions"]:
        latest.pop(d["call_id"], None)  # a call decided again: its latest decision, in its place
        latest[d["call_id"]] = d
    decided = [d for c, d in latest.items() if c not in pending]
    return decided, {c: d for c, d in latest.items() if c in pending}


def effect_badge(effect: dict[str, Any]) -> str:
    """The badge of one effect through a service (:func:`workflow.external.effect_status`):
    ``publishing``, ``in doubt``, or ``published as pub_…`` (``published`` when a human settled it
    without a publication id)."""
    if effect["state"] == "published":
        return f"published as {effect['publication_id']}" if effect.get("publication_id") else "published"
    return {"in_doubt": "in doubt", "not_published": "not published"}.get(effect["state"], "publishing")


def _effects_shown(row: Any, hint: Callable[[Next], str]) -> list[dict[str, Any]]:
    """The task page's effects: each of ``row.effects`` with ``command``, what a person runs next
    in ``hint``'s words (for ``in_doubt``, the settle command of the channel's last decided call;
    for ``publishing``, the resume that sends again with the same Idempotency-Key; else empty).
    The inbox never settles: only a person who looked at the service can."""
    out = []
    for e in row.effects:
        command = ""
        if e["state"] == "in_doubt":
            calls = [d.call_id for d in row.checkpoint.decisions
                     if d.decision == "approved" and d.channel in (e["channel"], None)]
            if calls:
                command = hint(Next("settle_command", row.task_id, calls[-1]))
        elif e["state"] == "publishing":
            command = hint(Next("doctor_resume", row.task_id, "approve"))
        from workflow.settlement import window_open

        out.append({**e, "command": command, "sent": e.get("sent", True),
                    "wait_until": window_open(e) if e["state"] == "in_doubt" else None})
    return out


def _receipt_text(store: Any, task_id: str) -> str:
    """The receipt exactly as ``python run.py show`` prints it."""
    from workflow.observe.receipt import build_receipt, receipt_text

    return receipt_text(build_receipt(store, task_id))


def create_app(store: Any, application: Any, *, reviewer: Optional[str], token: Optional[str], hosts: set[str],
               cookie: str, warm: bool = False, hint: Callable[[Next], str] = no_hint, team: bool = False,
               session_max_age: Optional[int] = None) -> Any:
    """The ASGI app: the pages of :class:`Inbox` (deciding with ``application``, a
    :class:`workflow.application.Application`) behind :class:`Gate` (``reviewer`` and the URL's
    ``token``), or, with ``team``, behind :class:`TeamGate` (each reviewer signs in; ``reviewer``
    and ``token`` None; sessions last ``session_max_age`` seconds, default
    ``HITL_INBOX_SESSION_MAX_AGE``). ``hosts``: accepted ``Host`` header values; ``cookie``: the
    session cookie's name; ``warm``: read and verify every
    checkpoint once now, in a background thread, so the first inbox page is as fast as the next
    (a checkpoint that does not verify is reported by the page that lists it, not here);
    ``hint``: how a refusal's next steps are worded (:class:`Inbox`). Raises ``ValueError`` for
    ``team`` with a ``reviewer`` or ``token``, or neither ``team`` nor both."""
    if (reviewer is not None or token is not None) if team else (reviewer is None or token is None):
        raise ValueError("team mode takes no reviewer and no token; single-user mode takes both")
    pages = Inbox(store, application, reviewer=reviewer, hint=hint, team=team)
    if warm:
        threading.Thread(target=_quietly, args=(pages.index.rows,), daemon=True).start()
    app = Starlette(routes=[
        Route("/", pages.inbox_page),
        Route("/task/{task_id}", pages.task_page),
        Route("/task/{task_id}/decide", pages.decide, methods=["POST"]),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Mount("/static", StaticFiles(directory=ASSETS / "static"), name="static"),
    ])
    if team:
        from state.settings import settings

        age = session_max_age if session_max_age is not None else settings().session_max_age
        return TeamGate(app, store=store, pages=pages, sessions=Sessions(age), hosts=hosts, cookie=cookie, hint=hint)
    return Gate(app, token=str(token), hosts=hosts, cookie=cookie, hint=hint)


def _quietly(read: Any) -> None:
    try:
        read()
    except Refused:  # shown by the inbox page, which reads again
        pass


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def listen(host: str, port: int, allow_remote: bool) -> tuple[socket.socket, str]:
    """A listening socket on ``host``:``port`` (0: a free port) and its ``host:port`` as a URL
    authority. Raises :class:`Refused` for a host beyond this machine without ``allow_remote``, a
    wildcard address (the ``Host`` check needs the name reviewers use), or a port that cannot be
    bound."""
    if host not in LOOPBACK and not allow_remote:
        raise Refused("usage", [Next("input_host"), f" {host} would serve the inbox beyond this machine; ",
                                Next("allow_remote"), " to mean it (the token then travels unencrypted: "
                                "http, not https)"], host=host)
    try:
        if ipaddress.ip_address(host).is_unspecified:
            raise Refused("usage", [Next("input_host"), f" {host} listens on every address; give the one "
                                    "address reviewers open (the Host header is checked against it)"],
                          host=host)
    except ValueError:
        pass  # a name, not an address
    # proto=IPPROTO_TCP, not socket.create_server's 0: asyncio sets TCP_NODELAY only on sockets
    # that say TCP, and without it a keep-alive connection waits ~40 ms per response (Nagle's
    # algorithm against the client's delayed ACK; measured with benchmarks/web_decision.py).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    try:
        if os.name != "nt":  # Windows' SO_REUSEADDR would let another process take the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise Refused("usage", f"cannot listen on {host}:{port} ({exc.strerror or type(exc).__name__})") from None
    bound = sock.getsockname()[1]
    return sock, f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"


_BUSY = b"STOPPED: the inbox has too many open connections; try again shortly\n"
#: What a connection beyond ``HITL_INBOX_MAX_CONNECTIONS`` gets before it is closed.
BUSY_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                 b"x-content-type-options: nosniff\r\nretry-after: 5\r\nconnection: close\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY))


def inbox_protocol(request_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol class with two limits it lacks: a connection that has not sent a
    whole request (head, and body if any) ``request_timeout`` seconds after it opened or after its
    last response is closed, and a connection that would make more than ``max_connections`` open
    at once gets :data:`BUSY_RESPONSE` and is closed at once (seconds; a whole number). Time the
    page code takes after the request has arrived does not count.

    Why our own: uvicorn's ``timeout_keep_alive`` starts only after a response, and any byte
    received stops it, so a connection that never finishes its headers (or, after a 403, trickles
    the body it announced) is kept forever; its ``limit_concurrency`` answers 503 only once a
    whole request head has arrived, so it holds the connection (and its file descriptor) until
    then. The size of a request head is already bounded by h11 (``h11_max_incomplete_event_size``,
    16 KiB by default), that of a form by :data:`MAX_FORM_BYTES`."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class InboxProtocol(H11Protocol):  # type: ignore[misc]
        _refused = False
        _timer: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:  # never counted, never read
                self._refused = True
                transport.write(BUSY_RESPONSE)
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_later(request_timeout, self._request_overdue)

        def _request_overdue(self) -> None:
            self._timer = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self.transport.close()  # this cycle's request has not arrived whole: too slow

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's head must come in time too

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self._refused:
                super().connection_lost(exc)

    return InboxProtocol


def server_config(app: Any) -> Any:
    """The ``uvicorn.Config`` that :func:`serve` runs ``app`` with: quiet, no ``Server`` header, no
    proxy headers, and the limits of :func:`inbox_protocol` from ``HITL_INBOX_REQUEST_TIMEOUT`` and
    ``HITL_INBOX_MAX_CONNECTIONS`` (docs/settings.md)."""
    import uvicorn

    from state.settings import settings

    found = settings()
    return uvicorn.Config(app, http=inbox_protocol(found.request_timeout, found.max_connections),
                          log_level="warning", access_log=False, lifespan="off",
                          server_header=False, proxy_headers=False)


def serve(store: Any, application: Any, host: str, port: int, reviewer: Optional[str], allow_remote: bool,
          hint: Callable[[Next], str] = no_hint, *, default_reviewer: str = "reviewer") -> None:
    """``python run.py serve``: import the SDK once, listen, print ``inbox: http://HOST:PORT/?token=…``
    (team mode: ``inbox: http://HOST:PORT/signin``) as the first line on stdout (flushed at once),
    serve until Ctrl-C or SIGTERM, deciding with ``application``
    (:class:`workflow.application.Application`) as ``reviewer`` (``--reviewer``; None:
    ``default_reviewer``, the OS user), or, in team mode (a reviewer registered), as each
    reviewer signed in. Raises :class:`Refused` before listening if the host or port cannot be
    used (see :func:`listen`), or for a ``reviewer`` given in team mode (``usage``: one name for
    everyone with the URL is not team mode)."""
    from workflow import team

    teamed = team.is_team(store)
    if teamed and reviewer is not None:  # fail closed: never one name for everyone in team mode
        raise Refused("usage", "team mode (reviewers are registered): a reviewer name given to the inbox "
                      "would decide as one name for everyone with the URL; leave it out: each reviewer signs in "
                      "with their own token; nothing started")
    reviewer = None if teamed else (reviewer or default_reviewer)
    sock, authority = listen(host, port, allow_remote)  # refusals first, before the SDK's import
    import uvicorn

    from workflow import Engine

    Engine.warm()  # the SDK, loaded once for every decision

    hosts = {authority}
    if host in ("127.0.0.1", "localhost"):
        hosts |= {f"127.0.0.1:{sock.getsockname()[1]}", f"localhost:{sock.getsockname()[1]}"}
    if host not in LOOPBACK:
        print(f"WARNING: the inbox listens on {authority}, beyond this machine: anyone who can reach "
              "it and sees the URL can decide; the token travels unencrypted", file=sys.stderr)
    token = None if teamed else secrets.token_urlsafe(32)
    app = create_app(store, application, reviewer=reviewer, token=token, hosts=hosts,
                     cookie=f"hitl_inbox_{sock.getsockname()[1]}", warm=True, hint=hint, team=teamed)
    print(f"inbox: http://{authority}/signin" if teamed else f"inbox: http://{authority}/?token={token}", flush=True)
    where = getattr(store, "location", None) or f"state dir {store.root}"  # a database: its URL, no password
    who = "each reviewer signs in (team mode)" if teamed else f"reviewer: {reviewer}"
    print(f"{who}; store: {where}; Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        uvicorn.Server(server_config(app)).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
