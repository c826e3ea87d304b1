"""The browser inbox in team mode (workflow/review/web.py, ``TeamGate``) over HTTP, without a
browser, on the file store and on PostgreSQL: each reviewer signs in with their own token on a form
(never a URL), gets a session of their own (in the server's memory: cookie HttpOnly, SameSite=Strict,
an expiry, a CSRF token per session), and decides as themselves under the policy's checks, the
command line's (``workflow.team``). The same in a real browser: tests/test_web_browser_team.py.

The team is tests/test_team.py's (``_team_on``): root (admin), alice, bob, carol (editors), wendy
(writer); the policy wants two editors and keeps the requester from approving. Task ``t1`` is
carol's, so carol may reject it but not approve it, and wendy may do neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from agent.application import APP
from state import clock
from state.store import open_store
from tests.test_team import OnStore, _as_token, _team_on, on_store  # noqa: F401  (on_store: a fixture)
from tests.test_web import CONFIRMED, HOST, ORIGIN, _forms, _post, _visible
from workflow.review.web import MAX_FAILED_SIGNINS, create_app

COOKIE = "hitl_inbox_8765"


@dataclass
class Team:
    """A team-mode inbox app on one store: ``s`` (the CLI and what is stored), ``tokens`` (name →
    reviewer token), ``store`` (the app's store object), ``app``, and ``locks`` (the task IDs whose
    lock the app took, in order: a refusal before the lock leaves it empty)."""

    s: OnStore
    tokens: dict[str, str]
    store: object
    app: object
    locks: list[str]

    def client(self, token: str | None = None) -> TestClient:
        """A new browser (its own cookies); signed in with ``token`` if given."""
        c = TestClient(self.app, base_url=ORIGIN, raise_server_exceptions=False)
        if token is not None:
            r = _sign_in(c, token)
            assert r.status_code == 303 and r.headers["location"] == "/", r.text
        return c


@pytest.fixture
def team(on_store, tmp_path, monkeypatch) -> Team:
    from cli.hints import hint

    s = on_store
    tokens = _team_on(s, tmp_path, monkeypatch)
    with _as_token(tokens["carol"]):
        r = s.cli("start", "--key", "t1", "--title", "Release notes", "--draft", "Version 1.2 fixes the login bug.")
    assert r.code == 0, r.err
    store = open_store(s.url, str(s.state_dir))
    locks: list[str] = []
    real = store.task_lock

    def spy(task_id, **kw):
        locks.append(task_id)
        return real(task_id, **kw)

    store.task_lock = spy
    app = create_app(store, APP, reviewer=None, token=None, hosts={HOST}, cookie=COOKIE, hint=hint, team=True)
    return Team(s, tokens, store, app, locks)


def _signin_csrf(client: TestClient) -> str:
    page = client.get("/signin")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([^"]+)"', page.text)[1]


def _sign_in(client: TestClient, token: str, **headers: str):
    return client.post("/signin", data={"csrf": _signin_csrf(client), "token": token}, follow_redirects=False,
                       headers={"origin": ORIGIN, **headers})


def _session_cookie(r) -> str:
    """The Set-Cookie header of the session cookie in response ``r`` ("" if none)."""
    return next((v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith(f"{COOKIE}=")), "")


def _csrf(page: str) -> str:
    """The session's CSRF token, as a task or inbox page carries it (the sign-out form's)."""
    return re.search(r'action="/signout" class="signout"><input type="hidden" name="csrf" value="([^"]+)"', page)[1]


def _press(client: TestClient, task_id: str = "t1", decision: str = "approve") -> str:
    """The confirm step's page after pressing ``decision``."""
    (form,) = _forms(client.get(f"/task/{task_id}").text)
    asked = _post(client, task_id, form | {"decision": decision})
    assert asked.status_code == 200 and f"Yes, {decision}</button>" in asked.text, asked.text
    return asked.text


def _press_and_confirm(client: TestClient, task_id: str = "t1", decision: str = "approve"):
    (confirm,) = _forms(_press(client, task_id, decision), "confirm")
    return _post(client, task_id, confirm | CONFIRMED)


def _forged(client: TestClient, team: Team, decision: str = "approve"):
    """A confirming post built by hand (no button was shown): this session's CSRF token, the call,
    the current revision."""
    cp = team.store.load("t1")
    page = client.get("/task/t1").text
    fields = {"csrf": _csrf(page), "revision": str(cp.revision), "call_id": cp.pending[0].call_id,
              "decision": decision, "reason": "forged" if decision == "reject" else ""}
    return _post(client, "t1", fields | CONFIRMED)


def test_a_reviewer_signs_in_on_a_form_and_gets_a_session_of_their_own(team):
    """No session: a page sends the browser to /signin; a wrong token is one STOPPED line (never
    echoed); the right one opens a session whose cookie is HttpOnly, SameSite=Strict, with the
    expiry, not Secure over plain http; the pages then decide as that reviewer."""
    c = team.client()
    r = c.get("/task/t1", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/signin"
    assert c.post("/task/t1/decide", data={}, headers={"origin": ORIGIN}).status_code == 403
    wrong = team.tokens["alice"][:-4] + "AAAA"
    r = _sign_in(c, wrong)
    assert r.status_code == 403 and not _session_cookie(r)
    assert _visible(r.text).count("STOPPED:") == 1 and "not the token of a registered reviewer" in r.text
    assert wrong not in r.text and team.tokens["alice"] not in r.text
    r = _sign_in(c, team.tokens["alice"])
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = _session_cookie(r)
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower() and "Max-Age=28800" in cookie
    assert "Secure" not in cookie and team.tokens["alice"] not in cookie
    page = c.get("/task/t1")
    assert page.status_code == 200 and "deciding as <strong>alice</strong>" in page.text


def test_the_session_cookie_is_secure_over_tls(team):
    c = TestClient(team.app, base_url=f"https://{HOST}", raise_server_exceptions=False)
    r = _sign_in(c, team.tokens["alice"], origin=f"https://{HOST}")
    assert r.status_code == 303, r.text
    assert "Secure" in _session_cookie(r)


def test_the_sign_in_form_needs_its_csrf_token_and_the_origin(team):
    """A sign-in posted from elsewhere (login CSRF: the victim signed in as the attacker) carries
    neither the pre-session cookie's CSRF token nor this Origin: both are refused, nobody signs in."""
    c = team.client()
    for fields, headers in (({"token": team.tokens["alice"]}, {"origin": ORIGIN}),
                            ({"token": team.tokens["alice"], "csrf": "x" * 64}, {"origin": ORIGIN}),
                            ({"token": team.tokens["alice"], "csrf": _signin_csrf(c)},
                             {"origin": "http://evil.example"}),
                            ({"token": team.tokens["alice"], "csrf": _signin_csrf(c)}, {})):
        r = c.post("/signin", data=fields, headers=headers, follow_redirects=False)
        assert r.status_code == 403 and not _session_cookie(r), r.text
    assert c.get("/", follow_redirects=False).headers["location"] == "/signin"


def test_failed_sign_ins_are_limited(team):
    c = team.client()
    for _ in range(MAX_FAILED_SIGNINS):
        assert _sign_in(c, "hitl_" + "0" * 16 + "_" + "A" * 43).status_code == 403
    r = _sign_in(c, team.tokens["alice"])  # even the right token waits now
    assert r.status_code == 429 and "too many failed sign-ins" in r.text


def test_two_reviewers_in_two_sessions_reach_a_two_of_two_quorum_once(team):
    """alice approves: the page says 1 of 2, by alice, still needed from bob (carol asked for it,
    wendy has no role); bob approves: completed, exactly one ledger entry, both recorded."""
    alice, bob = team.client(team.tokens["alice"]), team.client(team.tokens["bob"])
    page = _visible(alice.get("/task/t1").text)
    assert "Approvals: 0 of 2; still needed: 2 more, from alice, bob." in " ".join(page.split())
    asked = _press(alice)  # the confirm step of an approval that does not reach the quorum says so
    assert "Record your approval? It is one of the 2 this call needs; publish_draft does not run yet: 1 more " \
        "after yours." in " ".join(_visible(asked).split()) and "cannot be undone" not in asked
    r = _press_and_confirm(alice)
    assert r.status_code == 303, r.text
    assert team.store.load("t1").status == "waiting_for_approval" and team.s.ledger() == []
    mine = alice.get("/task/t1").text  # approved already: no second Approve, and a line saying so
    assert ">Approve</button>" not in mine and "approved call" in mine and "already (1 of 2)" in mine
    page = " ".join(_visible(bob.get("/task/t1").text).split())
    assert "Approvals: 1 of 2 (approved by alice); still needed: 1 more, from bob." in page
    assert "The requester (carol) may not approve." in page
    r = _press_and_confirm(bob)
    assert r.status_code == 303, r.text
    cp = team.store.load("t1")
    assert cp.status == "completed" and sorted(a.by for a in cp.approvals) == ["alice", "bob"]
    assert len(team.s.ledger()) == 1


def test_a_reviewer_the_rule_does_not_allow_sees_no_button_and_a_forged_post_changes_nothing(team):
    """wendy (a writer; the rule wants editors): no Approve, no Reject, one line saying why; a
    confirming post forged with her own session's CSRF token is refused by the same check, before the
    task lock is taken, and nothing changes in the store."""
    wendy = team.client(team.tokens["wendy"])
    page = wendy.get("/task/t1").text
    assert _forms(page) == [] and ">Approve</button>" not in page and ">Reject</button>" not in page
    assert "You cannot decide this call: task t1: calls on channel blog are decided by editor; 'wendy' has " \
        "role writer." in " ".join(_visible(page).split())
    before = team.s.snap()
    for decision in ("approve", "reject"):
        r = _forged(wendy, team, decision)
        assert r.status_code == 403 and "are decided by editor" in r.text, r.text
    assert team.s.snap() == before and team.locks == []


def test_the_requester_the_rule_keeps_out_sees_no_approve_button_and_a_forged_approval_changes_nothing(team):
    """carol asked for t1; the rule keeps the requester from approving (she may still reject, as on
    the command line): no Approve button, one line saying why; a forged approval is refused before
    the lock, nothing changed."""
    carol = team.client(team.tokens["carol"])
    page = carol.get("/task/t1").text
    (form,) = re.findall(r'<form method="post" [^>]*class="decide">.*?</form>', page, flags=re.S)
    assert ">Approve</button>" not in form and ">Reject</button>" in form
    assert "You cannot approve this call: task t1: 'carol' asked for it, and the policy keeps the requester " \
        "from approving calls on channel blog." in " ".join(_visible(page).split())
    before = team.s.snap()
    r = _forged(carol, team, "approve")
    assert r.status_code == 403 and "keeps the requester from approving" in r.text, r.text
    assert team.s.snap() == before and team.locks == []


def test_a_csrf_token_from_another_session_is_refused(team):
    alice, bob = team.client(team.tokens["alice"]), team.client(team.tokens["bob"])
    (form,) = _forms(alice.get("/task/t1").text)
    stolen = _csrf(bob.get("/task/t1").text)
    before = team.s.snap()
    r = _post(alice, "t1", form | {"decision": "approve", "csrf": stolen} | CONFIRMED)
    assert r.status_code == 403 and "CSRF" in r.text
    r = alice.post("/signout", data={"csrf": stolen}, headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 403 and alice.get("/task/t1").status_code == 200  # still signed in
    assert team.s.snap() == before


def test_sign_out_ends_the_session_on_the_server(team):
    """After sign-out, the old cookie (kept by hand, as a thief would) no longer opens anything."""
    alice = team.client(team.tokens["alice"])
    old = alice.cookies.get(COOKIE)
    page = alice.get("/task/t1").text
    no_csrf = alice.post("/signout", data={"csrf": "x"}, headers={"origin": ORIGIN}, follow_redirects=False)
    assert no_csrf.status_code == 403 and alice.get("/task/t1").status_code == 200
    r = alice.post("/signout", data={"csrf": _csrf(page)}, headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/signin"
    thief = team.client()
    thief.cookies.set(COOKIE, old)
    assert thief.get("/task/t1", follow_redirects=False).headers["location"] == "/signin"
    (form,) = _forms(page)
    r = _post(thief, "t1", form | {"decision": "approve"} | CONFIRMED)
    assert r.status_code == 403 and team.store.load("t1").approvals == []


@pytest.mark.parametrize("action", ["remove", "rotate"])
def test_a_removed_or_rotated_reviewers_session_stops_at_the_next_request(team, action):
    """alice signed in; root removes her, or rotates her token: her next request is refused (the
    session's reviewer is resolved against the list at each request) and the session ends, so her
    decision form is refused too, before the lock, nothing changed; bob's session goes on."""
    alice, bob = team.client(team.tokens["alice"]), team.client(team.tokens["bob"])
    (form,) = _forms(alice.get("/task/t1").text)
    with _as_token(team.tokens["root"]):
        assert team.s.cli("reviewers", action, "alice").code == 0
    before = team.s.snap()
    r = alice.get("/task/t1")
    assert r.status_code == 403 and "no longer theirs (removed or rotated since)" in r.text
    r = _post(alice, "t1", form | {"decision": "approve"} | CONFIRMED)
    assert r.status_code == 403 and team.s.snap() == before and team.locks == []
    assert bob.get("/task/t1").status_code == 200


def test_a_reviewer_token_in_the_url_is_never_accepted(team):
    c = team.client()
    for path in ("/", "/signin", "/task/t1"):
        r = c.get(f"{path}?token={team.tokens['alice']}", follow_redirects=False)
        assert r.status_code == 403 and "a token in the URL is never accepted" in r.text
        assert team.tokens["alice"] not in r.text and not _session_cookie(r)
    alice = team.client(team.tokens["alice"])  # signed in, a token in the URL is still refused
    assert alice.get(f"/?token={team.tokens['alice']}").status_code == 403


def test_an_expired_session_is_refused(team, monkeypatch):
    """A session lasts HITL_INBOX_SESSION_MAX_AGE (8 h): with the clock moved 7 h on it still works,
    8 h and a minute on it is refused and gone (HITL_NOW only moves the clock forward)."""
    alice = team.client(team.tokens["alice"])
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(hours=7)))
    assert alice.get("/task/t1").status_code == 200
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(hours=8, minutes=1)))
    r = alice.get("/task/t1")
    assert r.status_code == 403 and "your sign-in expired" in r.text
    monkeypatch.delenv("HITL_NOW")
    assert alice.get("/task/t1", follow_redirects=False).headers["location"] == "/signin"  # ended


def test_a_single_user_server_refuses_to_decide_once_a_reviewer_is_registered(team):
    """A server started as ``serve --reviewer ann`` before team mode began decides as one name:
    once reviewers are registered, its decisions are refused (no sign-in, no session), nothing
    decided, and its task page shows no button."""
    from cli.hints import hint
    from state.errors import Refused
    from workflow.review.web import decide_call

    single = create_app(team.store, APP, reviewer="ann", token="k" * 43, hosts={HOST}, cookie=COOKIE, hint=hint)
    c = TestClient(single, base_url=ORIGIN, raise_server_exceptions=False)
    assert c.get(f"/?token={'k' * 43}", follow_redirects=False).status_code == 303
    assert _forms(c.get("/task/t1").text) == []
    before = team.s.snap()
    cp = team.store.load("t1")
    with pytest.raises(Refused, match="started without sign-in"):
        decide_call(team.store, APP, task_id="t1", call_id=cp.pending[0].call_id, decision="approve", reason=None,
                    by="alice", expect_revision=cp.revision)
    assert team.s.snap() == before and team.locks == []


def test_a_reviewer_signing_in_over_and_over_ends_only_their_own_oldest_sessions(monkeypatch):
    """The server keeps a bounded number of sessions and ended the oldest past it: a reviewer who
    signed in 1000 times with her own token signed everyone else out. Now each reviewer holds at
    most ``MAX_SESSIONS_PER_REVIEWER``, and a new sign-in ends her own oldest first."""
    from state import reviewers as people
    from workflow.review import web

    monkeypatch.setattr(web, "MAX_SESSIONS", 20)

    def reviewer(name: str):
        token_id, token = people.new_token()
        return people.record(name, ["editor"], token, token_id, "2030-01-01T00:00:00Z")

    sessions, carol, alice = web.Sessions(3600), reviewer("carol"), reviewer("alice")
    kept = sessions.open(carol)
    mine = [sessions.open(alice) for _ in range(50)]
    assert sessions.get(kept) is not None and sessions.get(kept).reviewer == "carol"
    assert [n for n in mine if sessions.get(n) is not None] == mine[-web.MAX_SESSIONS_PER_REVIEWER:]
