"""The browser inbox in a real browser: Playwright drives Debian's Chromium (``/usr/bin/chromium``,
headless) against a real ``python run.py serve --port 0`` process over a real socket.

Where Chromium is missing these tests skip, except under ``CI=true``, where a missing browser is a
failure (``.ci/run`` installs it). Decisions made "by the command line" run ``run.py`` in a worker
thread of this process: Playwright's sync API keeps an event loop of its own on this thread.
``UPDATE_DOCS_SCREENSHOT=1`` also writes the inbox screenshot to docs/inbox.png (the README's) and
the task page's to docs/inbox-task.png.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import ROOT, RUN_PY, CliResult, run_in_process
from state.store import FileStore

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-quic", "--disable-sync",
        # DNS rebinding, simulated: the name rebind.test resolves to 127.0.0.1 in this browser
        "--host-resolver-rules=MAP rebind.test 127.0.0.1"]
#: Seconds a page may take to show a change the server already made (the page polls every 2 s).
SEE_WITHIN_MS = 20_000


def _chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {CHROMIUM} is missing (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium); CI=true makes this a failure")
    return CHROMIUM


@dataclass
class Server:
    """A running ``run.py serve``: its first-line ``url`` (with the token), ``base`` and state dir."""

    url: str
    base: str
    state_dir: Path
    proc: subprocess.Popen

    def cli(self, *args: str) -> CliResult:
        """``run.py --state-dir STATE ARGS`` in-process, on a worker thread (see module docstring)."""
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(run_in_process, self.state_dir, *args).result()

    def start(self, key: str, title: str, draft: str) -> str:
        r = self.cli("start", "--key", key, "--title", title, "--draft", draft)
        assert r.code == 0, r.err
        return key


def _serve(state_dir: Path) -> Server:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, str(RUN_PY), "--state-dir", str(state_dir), "serve",
                             "--port", "0", "--reviewer", "alice"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    line = proc.stdout.readline()
    m = re.fullmatch(r"inbox: (http://127\.0\.0\.1:\d+)/\?token=\S+\n", line)
    if not m:
        proc.kill()
        pytest.fail(f"serve did not print its URL: {line!r} {proc.communicate(timeout=30)[1]!r}")
    return Server(url=line.split(" ", 1)[1].strip(), base=m.group(1), state_dir=state_dir, proc=proc)


def _stop(server: Server) -> None:
    server.proc.terminate()
    _, err = server.proc.communicate(timeout=60)
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    path = _chromium()
    with sync_playwright() as p:  # launch(): a fresh temporary profile (user-data dir) each time
        b = p.chromium.launch(executable_path=str(path), headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):
    s = _serve(tmp_path_factory.mktemp("inbox") / "state")
    yield s
    _stop(s)


@pytest.fixture
def page(browser, server):
    """A new browser context (its own cookies) that opened the printed URL."""
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(SEE_WITHIN_MS)
    page.goto(server.url)
    assert page.url == server.base + "/"  # the token traded for the cookie, gone from the URL
    yield page
    context.close()


def _task_page(page, server, key):
    page.goto(f"{server.base}/task/{key}")
    return page.locator('section.call').first


def _press(call, page, button: str) -> None:
    """Press ``button`` (Approve or Reject) of ``call``, then the confirming step's button."""
    call.get_by_role("button", name=button).click()
    page.locator("form.confirm").get_by_role("button", name=f"Yes, {button.lower()}").click()


def test_approve(page, server):
    key = server.start("b-approve", "Release 1.2", "Version 1.2 fixes the login bug.")
    call = _task_page(page, server, key)
    call.get_by_role("button", name="Approve").click()
    page.locator("form.confirm").wait_for()  # a press only asks to confirm
    assert FileStore(server.state_dir).load(key).status == "waiting_for_approval"
    page.get_by_role("button", name="Yes, approve").click()
    page.get_by_text("Decision recorded: approved by alice").wait_for()
    assert page.locator("pre.receipt").inner_text().startswith(f"receipt: task {key}")
    cp = FileStore(server.state_dir).load(key)
    assert cp.status == "completed" and cp.decision.by == "alice"
    assert FileStore(server.state_dir).ledger_get(key) is not None


def test_reject_with_a_reason_reaches_the_model_verbatim(page, server):
    key = server.start("b-reject", "Release 1.3", "Version 1.3 ships on Friday.")
    reason = "Not on a Friday — \"never\" <b>ship</b> & wait.\nSecond line: 周一再发"
    call = _task_page(page, server, key)
    call.get_by_label("Reason").fill(reason)
    _press(call, page, "Reject")  # the reason travels through the confirming form
    page.get_by_text("Decision recorded: rejected by alice").wait_for()
    cp = FileStore(server.state_dir).load(key)
    assert cp.status == "cancelled" and cp.decision.reason == reason
    # The offline model answers with exactly the tool output it received: the rejection message.
    assert cp.final_output == f"publish_draft answered: {reason}"
    assert FileStore(server.state_dir).ledger_get(key) is None


def test_per_call_decisions(page, server):
    """A draft for two channels: two pending calls, each with its own Reason box and buttons. Reject
    the second with a reason: the first still waits, on a fresh page; approve it: completed, one
    ledger entry (the approved channel's)."""
    r = server.cli("start", "--key", "b-calls", "--title", "Two channels", "--draft", "One draft.",
                   "--channel", "blog", "--channel", "news")
    assert r.code == 0, r.err
    page.goto(f"{server.base}/task/b-calls")
    calls = page.locator("section.call")
    assert calls.count() == 2
    pending = FileStore(server.state_dir).load("b-calls").pending
    assert [calls.nth(i).get_attribute("data-call") for i in range(2)] == [p.call_id for p in pending]
    news = calls.nth([p.arguments["channel"] for p in pending].index("news"))
    news.get_by_label("Reason").fill("not for the news")
    _press(news, page, "Reject")
    page.get_by_text("1 pending call").wait_for()
    cp = FileStore(server.state_dir).load("b-calls")
    assert cp.status == "waiting_for_approval" and [p.arguments["channel"] for p in cp.pending] == ["blog"]
    decided = page.locator("section.call.decided")  # the other call's decision, beside the waiting one
    assert "rejected by alice" in decided.inner_text() and "not for the news" in decided.inner_text()
    _press(page.locator("section.call:not(.decided)"), page, "Approve")
    page.locator("h1 .status", has_text="completed").wait_for()
    cp = FileStore(server.state_dir).load("b-calls")
    assert {(d.decision, d.reason) for d in cp.decisions} == {("rejected", "not for the news"), ("approved", None)}
    assert "not for the news" in cp.final_output  # the rejection message reached the model
    ledger = FileStore(server.state_dir)
    assert ledger.ledger_get("b-calls#blog") is not None and ledger.ledger_get("b-calls#news") is None


def test_no_token_is_403(browser, server):
    context = browser.new_context()
    try:
        page = context.new_page()
        assert page.goto(server.base + "/").status == 403
        # the command as the server was started, its --state-dir included
        assert f"open the URL that python run.py --state-dir {server.state_dir} serve printed" in page.content()
        assert page.goto(server.base + "/?token=wrong").status == 403
    finally:
        context.close()


def test_a_post_without_the_csrf_token_is_403(page, server):
    key = server.start("b-csrf", "CSRF", "A draft.")
    _task_page(page, server, key)
    page.evaluate("document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
    with page.expect_response(lambda r: r.request.method == "POST") as answered:
        page.get_by_role("button", name="Approve").click()
    assert answered.value.status == 403
    assert FileStore(server.state_dir).load(key).status == "waiting_for_approval"


class _Attacker(BaseHTTPRequestHandler):
    """Another origin on this machine (same host, another port: the same *site*, so even the
    SameSite=Strict cookie goes along): its page posts a decision form to the inbox."""

    target = ""
    fields: dict[str, str] = {}

    def do_GET(self):
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in self.fields.items())
        body = (f'<form id="f" method="post" action="{self.target}">{inputs}</form>'
                '<script>document.getElementById("f").submit()</script>').encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_another_origin_and_another_host_name_are_403(page, server):
    key = server.start("b-origin", "Origin", "A draft.")
    _task_page(page, server, key)
    fields = {n: page.locator(f"input[name={n}]").first.get_attribute("value")
              for n in ("csrf", "revision", "call_id")}  # even with the real CSRF token leaked
    _Attacker.target = f"{server.base}/task/{key}/decide"
    _Attacker.fields = {**fields, "decision": "approve"}
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with page.expect_response(lambda r: r.request.method == "POST") as answered:
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert answered.value.status == 403
        assert "another origin" in answered.value.text()
    finally:
        evil.shutdown()
    # DNS rebinding: a name the attacker controls, now resolving to 127.0.0.1, with our port.
    port = server.base.rsplit(":", 1)[1]
    assert page.goto(f"http://rebind.test:{port}/task/{key}").status == 403
    assert page.goto(f"http://rebind.test:{port}/?token={server.url.split('token=')[1]}").status == 403
    assert FileStore(server.state_dir).load(key).status == "waiting_for_approval"


def test_a_hostile_draft_renders_inert(page, server):
    draft = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
             '<a href="javascript:window.__pwned = 3">click</a>')
    key = server.start("b-hostile", '<svg onload="window.__pwned = 4">', draft)
    page.goto(server.base + "/")
    assert page.evaluate("window.__pwned") is None
    _task_page(page, server, key)
    assert page.locator("pre.body").inner_text() == draft  # shown as text, exactly
    assert page.get_by_role("link", name="click").count() == 0
    assert page.locator("section.call img, section.call script, svg").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_a_stale_page_is_refused_and_the_fresh_task_shown(page, server):
    """The page's refresh is blocked (a sleeping laptop, JavaScript off): it still shows revision 1
    when the command line decides; the page's Reject is refused under the lock, nothing changes."""
    key = server.start("b-stale", "Stale", "A draft.")
    page.route("**/*partial=1*", lambda route: route.abort())
    call = _task_page(page, server, key)
    assert server.cli("resume", "--task", key, "--decision", "approve").code == 0
    call.get_by_label("Reason").fill("too late")
    call.get_by_role("button", name="Reject").click()  # refused at the confirming step already
    alert = page.locator("p.stopped")
    alert.wait_for()
    assert f"task {key}: the task changed since the page was rendered (revision 1, now 3)" in alert.inner_text()
    assert page.locator("h1 .status").inner_text() == "completed"  # the fresh task
    cp = FileStore(server.state_dir).load(key)
    assert cp.status == "completed" and cp.decision.decision == "approved"


def test_a_command_line_decision_appears_on_the_open_pages(browser, page, server):
    key = server.start("b-cli", "Seen by the page", "A draft.")
    inbox = page.context.new_page()
    inbox.set_default_timeout(SEE_WITHIN_MS)
    inbox.goto(server.base + "/")
    row = inbox.locator(f'tr[data-task="{key}"]')
    row.wait_for()
    _task_page(page, server, key)
    assert server.cli("resume", "--task", key, "--decision", "reject", "--reason", "from the CLI").code == 0
    page.locator("h1 .status", has_text="cancelled").wait_for()  # without a reload
    assert "reason 'from the CLI'" in page.locator("pre.receipt").inner_text()
    row.wait_for(state="detached")  # no longer waiting: gone from the inbox


def test_a_confirming_step_left_open_gives_way_to_the_fresh_task(page, server):
    """Approve pressed, the confirmation not given; the command line rejects meanwhile: the open
    page (now at /task/ID/decide) shows the fresh task without a reload, with no button left."""
    key = server.start("b-confirm", "Left open", "A draft.")
    _task_page(page, server, key).get_by_role("button", name="Approve").click()
    page.locator("form.confirm").wait_for()
    assert server.cli("resume", "--task", key, "--decision", "reject", "--reason", "no").code == 0
    page.locator("h1 .status", has_text="cancelled").wait_for()  # without a reload
    assert page.locator("form").count() == 0
    assert FileStore(server.state_dir).ledger_get(key) is None


def test_screenshot_of_the_inbox(browser, tmp_path):
    """A fresh server with three waiting tasks (one for two channels); the inbox as a PNG
    (docs/inbox.png with UPDATE_DOCS_SCREENSHOT=1)."""
    server = _serve(tmp_path / "state")
    try:
        for key, title, draft, channels in (
            ("release-1.2", "Release notes 1.2", "Version 1.2 fixes the login bug.", ["blog"]),
            ("launch", "Launch post", "We are live in three more countries.", ["blog", "news"]),
            ("status-page", "Maintenance window", "Saturday 02:00-03:00 UTC, read-only.", ["status"]),
        ):
            flags = [a for c in channels for a in ("--channel", c)]
            assert server.cli("start", "--key", key, "--title", title, "--draft", draft, *flags).code == 0
        context = browser.new_context(viewport={"width": 1000, "height": 420})
        page = context.new_page()
        page.goto(server.url)
        page.locator("tr[data-task]").nth(2).wait_for()
        shot = page.screenshot(path=str(tmp_path / "inbox.png"), full_page=True)
        context.close()
    finally:
        _stop(server)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 5_000
    if os.environ.get("UPDATE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "inbox.png", ROOT / "docs" / "inbox.png")


def test_screenshot_of_a_partly_decided_task(browser, tmp_path):
    """A two-channel task whose news call was rejected on the command line: the task page shows
    that decision beside the waiting blog call, readable times, and the confirming step after a
    press of Approve (docs/inbox-task.png with UPDATE_DOCS_SCREENSHOT=1)."""
    server = _serve(tmp_path / "state")
    try:
        assert server.cli("start", "--key", "launch", "--title", "Launch post", "--draft",
                          "We are live in three more countries.", "--channel", "blog",
                          "--channel", "news").code == 0
        cp = FileStore(server.state_dir).load("launch")
        news = next(p.call_id for p in cp.pending if p.arguments["channel"] == "news")
        assert server.cli("resume", "--task", "launch", "--call", news, "--decision", "reject",
                          "--by", "bea", "--reason", "Not news: the blog post is enough.").code == 0
        context = browser.new_context(viewport={"width": 1000, "height": 900})
        page = context.new_page()
        page.set_default_timeout(SEE_WITHIN_MS)
        page.goto(server.url)
        page.goto(f"{server.base}/task/launch")
        page.locator("section.call:not(.decided)").get_by_role("button", name="Approve").click()
        page.locator("form.confirm").wait_for()
        assert "rejected by bea" in page.locator("section.call.decided").inner_text()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC",
                            page.locator("section.call.decided time").inner_text())
        shot = page.screenshot(path=str(tmp_path / "inbox-task.png"), full_page=True)
        context.close()
    finally:
        _stop(server)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 5_000
    if os.environ.get("UPDATE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "inbox-task.png", ROOT / "docs" / "inbox-task.png")
