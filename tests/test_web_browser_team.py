"""The browser inbox in team mode in a real browser: Playwright drives Debian's Chromium (headless)
against a real ``python run.py serve --port 0`` (no ``--reviewer``: reviewers are registered, so
each signs in), as tests/test_web_browser.py does for single-user mode (its ``browser`` fixture;
skipped without Chromium, except under ``CI=true``). Each browser context is one reviewer's browser.

The team: root (admin), alice, bob, carol, dave, erin (editors), wendy (writer); the policy wants
two editors and keeps the requester from approving. Every task is carol's. Over HTTP without a
browser, on both stores: tests/test_web_team.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, RUN_PY, add_reviewer, ledger_entries, run_in_process, snapshot
from tests.test_team import POLICY, _as_token
from tests.test_web_browser import SEE_WITHIN_MS, browser  # noqa: F401  (browser: a fixture)
from state.store import FileStore


def _cli(state_dir: Path, *args: str, token: str | None = None):
    """``run.py --state-dir STATE ARGS`` in-process on a worker thread (Playwright's sync API keeps
    an event loop on this one), with ``HITL_REVIEWER_TOKEN`` set to ``token`` for it."""
    def run():
        with _as_token(token):
            return run_in_process(state_dir, *args)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@dataclass
class TeamServer:
    """A running team-mode ``run.py serve``: ``base`` URL, state dir, tokens by name."""

    base: str
    state_dir: Path
    tokens: dict[str, str]
    proc: subprocess.Popen

    def start(self, key: str) -> str:
        r = _cli(self.state_dir, "start", "--key", key, "--title", f"Release {key}", "--draft", "A draft.",
                 token=self.tokens["carol"])
        assert r.code == 0, r.err
        return key


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):  # noqa: F811
    state = tmp_path_factory.mktemp("team-inbox") / "state"
    with ThreadPoolExecutor(1) as pool:
        r = pool.submit(add_reviewer, lambda *a: run_in_process(state, *a), "root", "admin").result()
    assert r.code == 0, r.err
    tokens = {"root": r.json()["token"]}
    for name, role in (("alice", "editor"), ("bob", "editor"), ("carol", "editor"), ("dave", "editor"),
                       ("erin", "editor"), ("wendy", "writer")):
        r = _cli(state, "reviewers", "add", name, "--role", role, "--json", token=tokens["root"])
        assert r.code == 0, r.err
        tokens[name] = r.json()["token"]
    policy = state.parent / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    assert _cli(state, "policy", "set", str(policy), token=tokens["root"]).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, str(RUN_PY), "--state-dir", str(state), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    line = proc.stdout.readline()
    m = re.fullmatch(r"inbox: (http://127\.0\.0\.1:\d+)/signin\n", line)
    if not m:
        proc.kill()
        pytest.fail(f"serve did not print its sign-in URL: {line!r} {proc.communicate(timeout=30)[1]!r}")
    yield TeamServer(m.group(1), state, tokens, proc)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert not any(t in err for t in tokens.values())  # never logged


@pytest.fixture
def as_(browser, server):  # noqa: F811
    """``as_(name)``: a page in a new browser context (its own cookies), signed in as ``name``."""
    contexts = []

    def signed_in(name: str):
        context = browser.new_context()
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(SEE_WITHIN_MS)
        page.goto(server.base + "/")
        assert page.url == server.base + "/signin"  # no session: the sign-in form
        page.get_by_label("Reviewer token").fill(server.tokens[name])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()
        assert page.url == server.base + "/", page.content()
        assert page.locator("header .who").inner_text() == f"deciding as {name}"
        return page
    yield signed_in
    for context in contexts:
        context.close()


def _approve(page, server, key: str) -> None:
    page.goto(f"{server.base}/task/{key}")
    page.get_by_role("button", name="Approve").click()
    page.get_by_role("button", name="Yes, approve").click()
    page.locator("p.done").wait_for()  # "Decision recorded", or "Approval recorded" below the quorum


def _post(page, path: str, fields: dict[str, str]) -> tuple[int, str]:
    """A form post made by a script in ``page`` (same origin, the page's cookies): ``(status, text)``."""
    return page.evaluate("""async ([path, fields]) => {
        const r = await fetch(path, {method: "POST", body: new URLSearchParams(fields), credentials: "same-origin"});
        return [r.status, await r.text()];
    }""", [path, fields])


def _csrf(page) -> str:
    return page.locator("form.signout input[name=csrf]").get_attribute("value")


def _forged(page, server, key: str, decision: str = "approve", csrf: str | None = None) -> tuple[int, str]:
    cp = FileStore(server.state_dir).load(key)
    return _post(page, f"/task/{key}/decide", {
        "csrf": csrf or _csrf(page), "revision": str(cp.revision), "call_id": cp.pending[0].call_id,
        "decision": decision, "reason": "forged", "confirm": "yes"})


def test_two_reviewers_in_two_browsers_reach_a_two_of_two_quorum_with_one_ledger_entry(as_, server):
    key = server.start("q-1")
    alice, bob = as_("alice"), as_("bob")
    bob.goto(f"{server.base}/task/{key}")
    assert "Approvals: 0 of 2" in bob.locator("p.quorum").inner_text()
    _approve(alice, server, key)
    bob.locator("p.quorum", has_text="Approvals: 1 of 2 (approved by alice)").wait_for()  # the open page follows
    assert "still needed: 1 more, from bob" in bob.locator("p.quorum").inner_text()
    assert FileStore(server.state_dir).load(key).status == "waiting_for_approval"
    assert ledger_entries(server.state_dir) == []
    _approve(bob, server, key)
    bob.locator("h1 .status", has_text="completed").wait_for()
    cp = FileStore(server.state_dir).load(key)
    assert cp.status == "completed" and sorted(a.by for a in cp.approvals) == ["alice", "bob"]
    assert len(ledger_entries(server.state_dir)) == 1


def test_a_reviewer_without_the_role_sees_no_button_and_a_forged_post_changes_nothing(as_, server):
    key = server.start("q-role")
    wendy = as_("wendy")
    wendy.goto(f"{server.base}/task/{key}")
    assert wendy.get_by_role("button", name="Approve").count() == 0
    assert wendy.get_by_role("button", name="Reject").count() == 0
    assert "are decided by editor; 'wendy' has role writer" in wendy.locator("p.not-allowed").inner_text()
    before = snapshot(server.state_dir)
    for decision in ("approve", "reject"):
        status, text = _forged(wendy, server, key, decision)
        assert status == 403 and "are decided by editor" in text
    assert snapshot(server.state_dir) == before


def test_the_requester_sees_no_approve_button_and_a_forged_approval_changes_nothing(as_, server):
    key = server.start("q-requester")
    carol = as_("carol")
    carol.goto(f"{server.base}/task/{key}")
    assert carol.get_by_role("button", name="Approve").count() == 0
    assert "keeps the requester from approving" in carol.locator("p.not-allowed").inner_text()
    before = snapshot(server.state_dir)
    status, text = _forged(carol, server, key)
    assert status == 403 and "keeps the requester from approving" in text
    assert snapshot(server.state_dir) == before


def test_a_csrf_token_stolen_from_another_session_is_refused(as_, server):
    key = server.start("q-csrf")
    alice, bob = as_("alice"), as_("bob")
    bob.goto(f"{server.base}/task/{key}")
    before = snapshot(server.state_dir)
    status, text = _forged(alice, server, key, csrf=_csrf(bob))
    assert status == 403 and "CSRF" in text
    assert snapshot(server.state_dir) == before


def test_sign_out_ends_the_session(browser, as_, server):  # noqa: F811
    alice = as_("alice")
    kept = alice.context.cookies()
    alice.get_by_role("button", name="Sign out").click()
    alice.wait_for_url(server.base + "/signin")
    thief = browser.new_context()
    try:
        thief.add_cookies(kept)  # the old cookie, as it was before the sign-out
        page = thief.new_page()
        page.goto(server.base + "/")
        assert page.url == server.base + "/signin"
    finally:
        thief.close()


@pytest.mark.parametrize("action, name", [("remove", "dave"), ("rotate", "erin")])
def test_a_removed_or_rotated_reviewers_session_stops_at_the_next_request(as_, server, action, name):
    key = server.start(f"q-{action}")
    page = as_(name)
    page.goto(f"{server.base}/task/{key}")
    assert _cli(server.state_dir, "reviewers", action, name, token=server.tokens["root"]).code == 0
    answer = page.goto(f"{server.base}/task/{key}")
    # The first request after the change is refused and ends the session; the page's own refresh
    # (every 2 s) may have been that request, and this one then finds no session: the sign-in form.
    assert (answer.status == 403 and "no longer theirs" in page.content()) or page.url == server.base + "/signin"
    status, _ = _post(page, f"/task/{key}/decide", {"csrf": "x", "decision": "approve"})
    assert status == 403 and FileStore(server.state_dir).load(key).approvals == []


def test_a_token_in_the_url_is_refused(browser, server):  # noqa: F811
    context = browser.new_context()
    try:
        page = context.new_page()
        answer = page.goto(f"{server.base}/?token={server.tokens['alice']}")
        assert answer.status == 403 and "a token in the URL is never accepted" in page.content()
        assert server.tokens["alice"] not in page.content()
        assert not context.cookies()  # no session
    finally:
        context.close()
