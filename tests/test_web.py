"""The browser inbox (``python run.py serve``, workflow/review/web.py) over HTTP, without a browser: the
gate (Host, Origin, token, session cookie, CSRF), the decision path through ``hitl.resume`` and its
revision check under the task lock, the form's input rules, the inbox listing and its cache.
The same pages in a real browser: tests/test_web_browser.py."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from state import clock
from state.errors import Refused
from tests.conftest import ROOT, RUN_PY, checkpoint_file, next_revision_file, resign, snapshot
from state.store import FileStore
from agent.application import APP
from workflow.review.web import create_app

TOKEN = "k" * 43
HOST = "127.0.0.1:8765"
ORIGIN = f"http://{HOST}"
COOKIE = "hitl_inbox_8765"


def _app(state_dir: Path, reviewer: str = "ann"):
    """The app as ``run.py serve`` builds it (the publisher's words for a refusal's next steps)."""
    from cli.hints import hint

    return create_app(FileStore(state_dir), APP, reviewer=reviewer, token=TOKEN, hosts={HOST}, cookie=COOKIE,
                      hint=hint)


def _client(state_dir: Path, reviewer: str = "ann", app=None) -> TestClient:
    return TestClient(app or _app(state_dir, reviewer), base_url=ORIGIN, raise_server_exceptions=False)


def _login(client: TestClient) -> None:
    r = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    assert client.cookies.get(COOKIE)  # kept by the client, as a browser keeps it


def _forms(page: str, kind: str = "decide") -> list[dict[str, str]]:
    """The hidden fields (unescaped) of every ``kind`` form on a task page, in page order:
    ``decide`` (a pending call's buttons) or ``confirm`` (the confirming step)."""
    return [{k: html.unescape(v) for k, v in
             re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form)}
            for form in re.findall(rf'<form method="post" [^>]*class="{kind}">.*?</form>', page,
                                   flags=re.S)]


def _post(client: TestClient, task_id: str, fields: dict[str, str], **headers: str):
    return client.post(f"/task/{task_id}/decide", data=fields, follow_redirects=False,
                       headers={"origin": ORIGIN, **headers})


#: The field of the confirming step's button: a post with it decides.
CONFIRMED = {"confirm": "yes"}


def _decide(client: TestClient, task_id: str, fields: dict[str, str]):
    """Press Approve or Reject (``fields``: a decide form's and the button's), check that this
    only asks to confirm, then press the confirming button; the second answer."""
    asked = _post(client, task_id, fields)
    assert asked.status_code == 200 and f"Yes, {fields['decision']}</button>" in asked.text, asked.text
    (confirm,) = _forms(asked.text, "confirm")
    return _post(client, task_id, confirm | CONFIRMED)


def _visible(page: str) -> str:
    """What a reader sees of a page: its text, without tags (attributes hold form values)."""
    return html.unescape(re.sub(r"<[^>]*>", " ", page))


@pytest.fixture
def task(cli, state_dir: Path) -> str:
    """One waiting task, started offline through the command line."""
    r = cli("start", "--key", "web-1", "--title", "Release notes", "--draft", "Version 1.2 fixes the login bug.")
    assert r.code == 0, r.err
    return "web-1"


def test_no_token_no_session_is_403(task, state_dir):
    client = _client(state_dir)
    for path in ("/", f"/task/{task}", "/static/inbox.js"):
        r = client.get(path)
        assert r.status_code == 403 and "open the URL that python run.py serve printed" in r.text
    assert client.get("/?token=" + "x" * 43).status_code == 403
    # '"\\351.\\351"' is "é.é" once unquoted: a non-ASCII value must not make compare_digest raise
    for forged in ("forged.0000", '"\\351.\\351"', "."):
        assert client.get("/", headers={"cookie": f"{COOKIE}={forged}"}).status_code == 403


def test_the_token_becomes_an_httponly_samesite_strict_cookie_and_leaves_the_url(task, state_dir):
    client = _client(state_dir)
    r = client.get(f"/?token={TOKEN}&status=all", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/?status=all"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower() and "Path=/" in cookie
    assert TOKEN not in cookie  # the session is its own random nonce, not the URL's token
    page = client.get("/?status=all")
    assert page.status_code == 200 and task in page.text


def test_the_token_redirect_stays_on_this_server(state_dir):
    r = _client(state_dir).get(f"/%2Fevil.example/x?token={TOKEN}", follow_redirects=False)  # path //evil…
    assert r.status_code == 303 and r.headers["location"] == "/evil.example/x"


def test_every_response_carries_a_csp_without_unsafe_inline(task, state_dir):
    client = _client(state_dir)
    refused = client.get("/")
    _login(client)
    for r in (refused, client.get("/"), client.get(f"/task/{task}"), client.get("/static/inbox.js")):
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp and r.headers["x-content-type-options"] == "nosniff"


def test_another_host_header_is_403_even_with_the_token(task, state_dir):
    """DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1 sends
    ``Host: attacker.example:8765``."""
    client = _client(state_dir)
    r = client.get(f"/?token={TOKEN}", headers={"host": "attacker.example:8765"})
    assert r.status_code == 403 and "answers only to 127.0.0.1:8765" in r.text
    _login(client)
    assert client.get("/", headers={"host": "attacker.example:8765"}).status_code == 403


def test_a_request_from_another_site_is_403_even_with_the_token(task, state_dir):
    """A link on another web site to the printed URL (the browser says where the request comes from)."""
    r = _client(state_dir).get(f"/?token={TOKEN}", headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403 and "another site" in r.text


def test_a_post_from_another_origin_or_without_origin_is_403(task, state_dir):
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0] | {"decision": "approve"} | CONFIRMED
    before = snapshot(state_dir)
    r = _post(client, task, fields, origin="http://evil.example")
    assert r.status_code == 403 and "another origin" in r.text
    r = client.post(f"/task/{task}/decide", data=fields, follow_redirects=False)  # no Origin at all
    assert r.status_code == 403 and "no Origin header" in r.text
    r = _post(client, task, fields, origin="http://127.0.0.1:9999")  # same host, another port
    assert r.status_code == 403
    assert snapshot(state_dir) == before


def test_a_post_without_the_csrf_token_is_403(task, state_dir):
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0] | {"decision": "approve"} | CONFIRMED
    before = snapshot(state_dir)
    for csrf in (None, "", "0" * 64):
        sent = {k: v for k, v in fields.items() if k != "csrf"} | ({"csrf": csrf} if csrf is not None else {})
        r = _post(client, task, sent)
        assert r.status_code == 403 and "CSRF" in r.text
    assert snapshot(state_dir) == before


def test_a_csrf_token_replayed_with_another_session_is_403(task, state_dir):
    """Two sessions of one server (two browsers that opened the URL): the CSRF token of one does
    not work with the cookie of the other."""
    app = _app(state_dir)  # one server, one signing key
    alice, mallory = _client(state_dir, app=app), _client(state_dir, app=app)
    _login(alice)
    _login(mallory)
    assert alice.cookies.get(COOKIE) != mallory.cookies.get(COOKIE)
    fields = _forms(alice.get(f"/task/{task}").text)[0] | {"decision": "approve"} | CONFIRMED
    before = snapshot(state_dir)
    r = _post(mallory, task, fields)
    assert r.status_code == 403 and "CSRF" in r.text
    assert snapshot(state_dir) == before


def test_approve_on_the_page_runs_hitl_resume_and_records_the_servers_reviewer(task, state_dir):
    client = _client(state_dir, reviewer="ann")
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0]
    r = _decide(client, task, fields | {"decision": "approve", "by": "mallory", "reason": "ok"})
    assert r.status_code == 303 and r.headers["location"] == f"/task/{task}?decided=1"
    cp = FileStore(state_dir).load(task)
    assert cp.status == "completed" and cp.decision.by == "ann" and cp.decision.reason == "ok"
    assert FileStore(state_dir).ledger_get(task) is not None
    page = client.get(r.headers["location"]).text
    assert "Decision recorded: approved by ann" in page and "receipt: task web-1" in page


def test_reject_sends_the_reason_to_the_model_verbatim(task, state_dir):
    """The offline model answers with the tool output it received, the rejection message."""
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0]
    reason = "Not yet: the date is wrong <b>&amp;</b> \"quotes\"\r\nsecond line"
    r = _decide(client, task, fields | {"decision": "reject", "reason": reason})  # via a hidden field
    assert r.status_code == 303
    cp = FileStore(state_dir).load(task)
    sent = "Not yet: the date is wrong <b>&amp;</b> \"quotes\"\nsecond line"  # the form's CRLF is LF
    assert cp.status == "cancelled" and cp.decision.reason == sent
    assert cp.final_output == f"publish_draft answered: {sent}"
    assert FileStore(state_dir).ledger_get(task) is None


@pytest.mark.parametrize("step", [{}, CONFIRMED], ids=["press", "confirm"])
@pytest.mark.parametrize("change, message, code", [
    ({"decision": "maybe"}, "press Approve or Reject", 400),
    ({"decision": "reject", "reason": "   "}, "a reject needs a reason", 400),
    ({"decision": "approve", "revision": "one"}, "no revision", 400),
    ({"decision": "approve", "reason": "x" * 1001}, "the limit is 1000", 400),
    ({"decision": "approve", "reason": "bell\x07"}, "control character", 400),
    ({"decision": "approve", "call_id": "call_other"}, "has no pending call &#39;call_other&#39;", 409),
])
def test_bad_form_input_gets_one_clear_line_and_changes_nothing(task, state_dir, change, message, code,
                                                                 step):
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0] | change | step
    before = snapshot(state_dir)
    r = _post(client, task, fields)
    assert r.status_code == code and "STOPPED: " in r.text and message in r.text, r.text
    assert "Traceback" not in r.text
    assert snapshot(state_dir) == before


def test_a_form_of_another_type_too_large_or_with_a_repeated_field_is_refused_unread(task, state_dir):
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0] | {"decision": "approve"} | CONFIRMED
    before = snapshot(state_dir)
    r = client.post(f"/task/{task}/decide", json=fields, headers={"origin": ORIGIN})
    assert r.status_code == 400 and "application/x-www-form-urlencoded" in r.text
    r = _post(client, task, fields | {"reason": "x" * 20_000})
    assert r.status_code == 400 and "larger than 16384 bytes" in r.text
    r = client.post(f"/task/{task}/decide", content=urlencode(fields) + "&decision=reject",
                    headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and "field &#x27;decision&#x27; is given twice" in r.text
    assert snapshot(state_dir) == before


def test_bad_query_and_unknown_task_get_clear_pages(task, state_dir):
    client = _client(state_dir)
    _login(client)
    assert "page must be a whole number" in client.get("/?page=0").text
    assert "status must be one of" in client.get("/?status=deleted").text
    r = client.get("/task/no-such-task")
    assert r.status_code == 404 and "no task &#39;no-such-task&#39;" in r.text
    assert client.get("/task/..%2f..%2fetc").status_code == 404


def test_a_hostile_draft_is_escaped(cli, state_dir):
    draft = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    assert cli("start", "--key", "web-x", "--title", "<b onclick=x()>t</b>", "--draft", draft).code == 0
    client = _client(state_dir)
    _login(client)
    for page in (client.get("/").text, client.get("/task/web-x").text):
        assert "<script>alert" not in page and "<img src=x" not in page and "<b onclick" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get("/task/web-x").text


def test_a_stale_page_is_refused_with_the_fresh_task(task, cli, state_dir):
    """The page was rendered at revision 1; the CLI decided meanwhile."""
    client = _client(state_dir)
    _login(client)
    fields = _forms(client.get(f"/task/{task}").text)[0]
    assert cli("resume", "--task", task, "--decision", "approve").code == 0
    before = snapshot(state_dir)
    for step in ({}, CONFIRMED):  # the press of the button, and its confirmation
        r = _post(client, task, fields | {"decision": "approve"} | step)
        assert r.status_code == 409
        assert "the task changed since the page was rendered (revision 1, now 3)" in r.text
        assert "receipt: task web-1" in r.text and 'class="status">completed<' in r.text  # the fresh page
        assert "Yes, approve" not in r.text
    assert snapshot(state_dir) == before


def test_hitl_resume_checks_the_expected_revision_under_the_lock(task, state_dir):
    """Another writer moves the task on between the caller's look and the lock: the check right
    after the load under the lock refuses, and nothing is decided."""
    from agent import application

    class RacingStore(FileStore):
        @contextmanager
        def task_lock(self, task_id, **kw):
            next_revision_file(state_dir, task, lambda d: None)  # the other writer
            with super().task_lock(task_id, **kw):
                yield

    store = RacingStore(state_dir)
    with pytest.raises(Refused, match=r"changed since the page was rendered \(revision 1, now 2\)"):
        asyncio.run(application.resume(store, task_id=task, decision="reject", by="ann", reason="no",
                                expect_revision=1))
    cp = FileStore(state_dir).load(task)
    assert cp.decision is None and cp.status == "waiting_for_approval"
    assert FileStore(state_dir).rejection_get(task) is None


@pytest.fixture
def two_channels(cli) -> str:
    """A waiting task whose draft goes to two channels: two pending calls, one per channel."""
    r = cli("start", "--key", "web-2", "--title", "Launch", "--draft", "We are live.",
            "--channel", "blog", "--channel", "news")
    assert r.code == 0, r.err
    return "web-2"


def test_one_form_per_pending_call_each_decided_on_its_own(two_channels, state_dir):
    task = two_channels
    client = _client(state_dir, reviewer="ann")
    _login(client)
    page = client.get(f"/task/{task}").text
    forms = _forms(page)
    cp = FileStore(state_dir).load(task)
    assert [f["call_id"] for f in forms] == [p.call_id for p in cp.pending] and len(forms) == 2
    assert "2 pending calls" in page and page.count(">Approve</button>") == 2
    assert "<dt>Channel</dt><dd>blog</dd>" in page and "<dt>Channel</dt><dd>news</dd>" in page
    assert page.count('<label for="reason-') == 2
    inbox = client.get("/").text
    assert "blog, news" in inbox and "(2 calls)" in inbox
    news = next(f for f, p in zip(forms, cp.pending) if p.arguments["channel"] == "news")
    r = _decide(client, task, news | {"decision": "reject", "reason": "not for the news"})
    assert r.status_code == 303
    cp = FileStore(state_dir).load(task)
    assert cp.status == "waiting_for_approval" and [p.arguments["channel"] for p in cp.pending] == ["blog"]
    page = client.get(f"/task/{task}").text
    assert "1 pending call" in page and len(_forms(page)) == 1
    blog = _forms(page)[0]
    assert _decide(client, task, blog | {"decision": "approve"}).status_code == 303
    cp = FileStore(state_dir).load(task)
    assert cp.status == "completed" and {(d.call_id, d.decision, d.by) for d in cp.decisions} == {
        (news["call_id"], "rejected", "ann"), (blog["call_id"], "approved", "ann")}


def test_the_form_of_a_call_decided_meanwhile_is_stale(two_channels, state_dir):
    """Both forms were rendered at one revision: once one call is decided, the other form is stale."""
    task = two_channels
    client = _client(state_dir)
    _login(client)
    first, second = _forms(client.get(f"/task/{task}").text)
    assert _decide(client, task, first | {"decision": "approve"}).status_code == 303
    before = snapshot(state_dir)
    r = _post(client, task, second | {"decision": "approve"} | CONFIRMED)
    assert r.status_code == 409 and "the task changed since the page was rendered (revision 1" in r.text
    assert snapshot(state_dir) == before


def test_the_adapter_refuses_a_call_that_is_not_pending(task, state_dir):
    from workflow.review.web import decide_call

    before = snapshot(state_dir)
    with pytest.raises(Refused) as refused:
        decide_call(FileStore(state_dir), APP, task_id=task, call_id="call_nope", decision="approve",
                    reason=None, by="ann", expect_revision=1)
    assert refused.value.code == "not_found"
    assert snapshot(state_dir) == before


def _clone(state_dir: Path, source: str, new_id: str, at: str) -> None:
    """A signed copy of ``source``'s checkpoint under ``new_id``, its request made ``at``."""
    from state.files.store import file_name

    src = checkpoint_file(state_dir, source)
    dst = src.parent.parent / file_name(new_id) / src.name  # its own folder, the same revision
    dst.parent.mkdir(mode=0o700)
    dst.write_bytes(src.read_bytes())

    def rename(data):
        data["task_id"] = data["idempotency_key"] = new_id
        data["history"][0]["at"] = at

    resign(state_dir, dst, rename)


def test_the_inbox_pages_newest_first_and_filters_by_status(task, state_dir):
    for i in range(60):
        _clone(state_dir, task, f"bulk-{i:03d}", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000000Z")
    client = _client(state_dir)
    _login(client)
    first = client.get("/").text
    assert "61 tasks" in first and "page 1 of 2" in first
    assert first.count("<td>blog</td>") == 50  # one channel each: the default, blog
    keys = re.findall(r'data-task="([^"]+)"', first)
    assert len(keys) == 50 and keys[:3] == ["web-1", "bulk-059", "bulk-058"]  # newest request first
    second = re.findall(r'data-task="([^"]+)"', client.get("/?page=2").text)
    assert second == [f"bulk-{i:03d}" for i in range(10, -1, -1)]  # 61 = 50 + 11
    assert "0 tasks" in client.get("/?status=completed").text


def test_the_inbox_rereads_a_changed_checkpoint_and_fails_closed(task, cli, state_dir):
    client = _client(state_dir)
    _login(client)
    assert 'data-task="web-1"' in client.get("/").text
    assert cli("resume", "--task", task, "--decision", "reject", "--reason", "no").code == 0
    assert 'data-task="web-1"' not in client.get("/").text  # no longer waiting: re-read
    assert 'data-task="web-1"' in client.get("/?status=cancelled").text
    path = checkpoint_file(state_dir, task)
    stat = path.stat()
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"title": "Release notes"', b'"title": "Release-notes"'))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: the edit hides
    r = client.get("/?status=cancelled")
    assert r.status_code == 500 and "integrity check failed" in r.text and "doctor" in r.text


def test_serve_refuses_a_remote_host_without_the_flag_and_a_wildcard_address(state_dir):
    from cli.hints import text
    from workflow.review.web import listen

    with pytest.raises(Refused) as remote:
        listen("192.0.2.10", 0, allow_remote=False)
    assert text(remote.value).startswith("--host 192.0.2.10 would serve the inbox beyond this machine; "
                                         "add --allow-remote to mean it")
    with pytest.raises(Refused) as wildcard:
        listen("0.0.0.0", 0, allow_remote=True)
    assert text(wildcard.value).startswith("--host 0.0.0.0 listens on every address")


def test_serve_prints_the_url_first_and_refuses_without_leaving_files(state_dir):
    """A real ``run.py serve --port 0``: the first stdout line is the URL with a 256-bit token; a
    refused host prints one STOPPED line and leaves no state dir behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, str(RUN_PY), "--state-dir", str(state_dir), "serve",
                             "--port", "0", "--reviewer", "ann"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    m = re.fullmatch(r"inbox: http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+)\n", line)
    assert m and int(m.group(1)) > 0 and len(m.group(2)) >= 43, line  # 32 bytes: 256 bits
    refused = subprocess.run([sys.executable, str(RUN_PY), "--state-dir", str(state_dir), "serve",
                              "--host", "0.0.0.0"], capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=120)
    assert refused.returncode == 1 and refused.stderr.startswith("STOPPED: --host 0.0.0.0")
    assert "Traceback" not in refused.stderr and not state_dir.exists()


def test_the_listening_socket_says_tcp_so_asyncio_turns_off_nagle():
    """asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP; without it each response
    on a keep-alive connection waited ~40 ms (measured by benchmarks/web_decision.py)."""
    import socket

    from workflow.review.web import listen

    sock, authority = listen("127.0.0.1", 0, allow_remote=False)
    try:
        assert sock.proto == socket.IPPROTO_TCP and authority == f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# ------------------------------------------------------------------ what the task page says
def test_a_press_of_approve_or_reject_only_asks_to_confirm(two_channels, state_dir):
    """The first post (the button) decides nothing: it shows what the decision will do and a
    confirming button whose form carries the same call, revision and reason (verbatim, through a
    hidden field); Cancel goes back to the task. The confirming post decides."""
    task = two_channels
    client = _client(state_dir, reviewer="ann")
    _login(client)
    forms = _forms(client.get(f"/task/{task}").text)
    cp = FileStore(state_dir).load(task)
    blog, news = (next(f for f, p in zip(forms, cp.pending) if p.arguments["channel"] == c)
                  for c in ("blog", "news"))
    before = snapshot(state_dir)
    reason = 'Not for "the news" <b>&amp;</b>\r\nsecond line'
    asked = _post(client, task, news | {"decision": "reject", "reason": reason})
    assert asked.status_code == 200 and snapshot(state_dir) == before
    assert "Reject this call? It does not run; this reason is sent to the model:" in asked.text
    (confirm,) = _forms(asked.text, "confirm")
    assert confirm == news | {"decision": "reject", "reason": reason.replace("\r\n", "\n")}
    assert f'<a class="cancel" href="/task/{task}">Cancel</a>' in asked.text
    assert len(_forms(asked.text)) == 1  # the other call keeps its own buttons
    asked = _post(client, task, blog | {"decision": "approve"})
    assert asked.status_code == 200 and snapshot(state_dir) == before
    assert "Approve this call? publish_draft runs now and publishes to blog; this cannot be undone." in asked.text
    assert _post(client, task, _forms(asked.text, "confirm")[0] | {"confirm": "no"}).status_code == 200
    assert snapshot(state_dir) == before  # only "yes" decides
    r = _post(client, task, confirm | CONFIRMED)
    assert r.status_code == 303
    cp = FileStore(state_dir).load(task)
    assert [(d.channel, d.decision, d.by, d.reason) for d in cp.decisions] == [
        ("news", "rejected", "ann", reason.replace("\r\n", "\n"))]


def test_a_partly_decided_task_shows_each_calls_decision_next_to_the_waiting_one(two_channels, cli, state_dir):
    task = two_channels
    cp = FileStore(state_dir).load(task)
    news = next(p.call_id for p in cp.pending if p.arguments["channel"] == "news")
    assert cli("resume", "--task", task, "--call", news, "--decision", "reject", "--by", "bea",
               "--reason", "not for the news").code == 0
    cp = FileStore(state_dir).load(task)
    (rec,) = cp.decisions
    client = _client(state_dir, reviewer="ann")
    _login(client)
    page = client.get(f"/task/{task}?decided=1").text
    assert "1 pending call · 1 decided" in page and len(_forms(page)) == 1
    decided = re.search(rf'<section class="call decided" data-call="{news}">.*?</section>', page, re.S)
    assert decided, page
    shown = " ".join(_visible(decided.group(0)).split())
    at = clock.parse_iso(rec.at).strftime("%Y-%m-%d %H:%M UTC")
    assert shown == (f"publish_draft {news} rejected Channel news Decision rejected by bea "
                     f"At {at} Reason not for the news")
    assert f'<time datetime="{rec.at}" title="{rec.at}">{at}</time>' in decided.group(0)
    assert "Decision recorded: rejected by bea; the task is now waiting_for_approval" in page
    assert page.index('class="call"') < page.index('class="call decided"')  # after the waiting call


def test_a_decision_on_record_for_a_call_still_pending_is_named_on_it(two_channels, cli, state_dir):
    """A decision recorded before a crash, for a call that still waits: named on that call (the
    next resume carries it out), not listed as decided."""
    task = two_channels
    cp = FileStore(state_dir).load(task)
    news, blog = (next(p.call_id for p in cp.pending if p.arguments["channel"] == c) for c in ("news", "blog"))
    assert cli("resume", "--task", task, "--call", news, "--decision", "reject", "--by", "bea",
               "--reason", "later").code == 0
    resign(state_dir, checkpoint_file(state_dir, task),
           lambda data: data["decisions"][0].update(call_id=blog, channel="blog"))
    client = _client(state_dir)
    _login(client)
    page = client.get(f"/task/{task}").text
    waiting = re.search(rf'<section class="call" data-call="{blog}">.*?</section>', page, re.S).group(0)
    assert "On record, not yet carried out: rejected by bea at" in _visible(waiting)
    assert 'class="call decided"' not in page and len(_forms(page)) == 1


def test_readable_time_is_utc_to_the_minute():
    from workflow.review.web import readable_time

    assert readable_time("2026-12-01T22:13:05.123456Z") == "2026-12-01 22:13 UTC"
    assert readable_time("2031-02-03T01:30:59+02:00") == "2031-02-02 23:30 UTC"
    assert readable_time("not a time") == "not a time"


def test_the_task_page_shows_readable_times_and_keeps_the_utc_value(task, state_dir):
    client = _client(state_dir)
    _login(client)
    page = client.get(f"/task/{task}").text
    cp = FileStore(state_dir).load(task)
    for raw in (cp.history[0].at, cp.expires_at):
        readable = clock.parse_iso(raw).strftime("%Y-%m-%d %H:%M UTC")
        assert f'<time datetime="{raw}" title="{raw}">{readable}</time>' in page
        assert raw not in _visible(page)  # microseconds only in the attribute


def _backdate_first_request(state_dir: Path, task: str, hours: int) -> str:
    """Move the task's ``started`` event ``hours`` before its last ``interrupted`` one (a reviewer
    who decided one call long after the request); returns the later event's time."""
    path = checkpoint_file(state_dir, task)
    later = json.loads(path.read_text(encoding="utf-8"))["history"][-1]["at"]
    earlier = clock.iso(clock.parse_iso(later) - timedelta(hours=hours))

    def backdate(data):
        assert [e["event"] for e in data["history"]] == ["started", "decision_recorded", "interrupted"]
        data["history"][0]["at"] = data["created_at"] = earlier

    resign(state_dir, path, backdate)
    return later


def test_waiting_counts_from_the_first_request_on_the_page_and_in_list(two_channels, cli, state_dir,
                                                                     monkeypatch):
    """A decision on one call of two leaves the other waiting: its age counts from the request
    (the task's start), not from the revision that decision wrote; the inbox, the task page and
    ``list`` (text and JSON) say the same."""
    task = two_channels
    cp = FileStore(state_dir).load(task)
    news = next(p.call_id for p in cp.pending if p.arguments["channel"] == "news")
    assert cli("resume", "--task", task, "--call", news, "--decision", "reject", "--reason", "no").code == 0
    later = _backdate_first_request(state_dir, task, hours=2)
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.parse_iso(later) + timedelta(hours=3)))
    client = _client(state_dir)
    _login(client)
    assert "<dt>Waiting</dt><dd>5h00m</dd>" in client.get(f"/task/{task}").text
    assert re.search(rf'data-task="{task}">.*?<td>5h00m</td>', client.get("/").text, re.S)
    assert cli("list", "--json").json()["tasks"][0]["age_s"] == 5 * 3600
    assert cli("list").out.startswith(f"WAITING    {task}  [blog,news]  5h00m ago, ")


def test_a_new_call_in_the_next_turn_is_a_new_request():
    """The model's next turn asks about a call nobody saw: its age starts there."""
    from types import SimpleNamespace as NS

    from workflow.review.inbox import waiting_since

    def ask(at, event, *ids):
        return NS(at=at, event=event, detail={"pending": list(ids)})

    history = [ask("T1", "started", "a", "b"), ask("T2", "decision_recorded"),
               ask("T3", "interrupted", "b"), ask("T4", "interrupted", "c"), ask("T5", "interrupted", "c")]
    assert waiting_since(NS(history=history, created_at="T0")) == "T4"
    assert waiting_since(NS(history=history[:3], created_at="T0")) == "T1"
    assert waiting_since(NS(history=[], created_at="T0")) == "T0"


HOSTILE = "A\u202eB\x1b[31mC\nD\u200bE"  # bidi override, ESC sequence, newline, zero-width space
HOSTILE_SHOWN = "A\\u202eB\\x1b[31mC\\nD\\u200bE"


def test_control_and_bidi_characters_from_a_model_or_a_file_are_shown_escaped(two_channels, cli,
                                                                                state_dir):
    """Jinja2 escapes HTML, not U+202E: a title, body, call ID and reason holding bidi, ESC and
    newline characters are shown the way the terminal shows them (workflow.observe.views.one_line); the
    body keeps its line breaks; the hidden call ID still carries the exact value back."""
    task = two_channels
    cp = FileStore(state_dir).load(task)
    news = next(p.call_id for p in cp.pending if p.arguments["channel"] == "news")
    assert cli("resume", "--task", task, "--call", news, "--decision", "reject", "--reason", "no").code == 0

    def hostile(data):
        data["title"] = data["pending"][0]["arguments"]["title"] = "T" + HOSTILE
        data["pending"][0]["arguments"]["body"] = "line one " + HOSTILE
        data["pending"][0]["call_id"] = "call_" + HOSTILE
        data["decisions"][0]["reason"] = "R" + HOSTILE
        data["decisions"][0]["call_id"] = "callnews_" + HOSTILE

    resign(state_dir, checkpoint_file(state_dir, task), hostile)
    client = _client(state_dir)
    _login(client)
    inbox, page = client.get("/").text, client.get(f"/task/{task}").text
    for text in (_visible(inbox), _visible(page)):
        assert not any(c in text for c in "\u202e\x1b\u200b")
    assert f"<td>T{HOSTILE_SHOWN}</td>" in inbox
    assert f"<dt>Title</dt><dd>T{HOSTILE_SHOWN}</dd>" in page
    assert f"<code>call_{HOSTILE_SHOWN}</code>" in page and f"<code>callnews_{HOSTILE_SHOWN}</code>" in page
    assert "line one A\\u202eB\\x1b[31mC\nD\\u200bE</pre>" in page  # the body's line break kept
    assert "R" + "A\\u202eB\\x1b[31mC\nD\\u200bE" in page
    assert _forms(page)[0]["call_id"] == "call_" + HOSTILE  # what the form sends back: exact


def test_an_expired_request_names_expire_in_the_command_lines_words(task, state_dir):
    """Why: the inbox (library) names no command; ``timing`` says ``expired (reject…)`` and the
    command line's hint adds its own way out (``, or python run.py expire``)."""
    from cli.hints import hint
    from workflow.review.inbox_index import row_of, timing

    cp = FileStore(state_dir).load(task)
    later = clock.parse_iso(cp.expires_at) + timedelta(days=1)
    assert timing(row_of(cp), later, hint)["left"] == "expired (reject, or python run.py expire)"
    assert timing(row_of(cp), later)["left"] == "expired (reject)"
