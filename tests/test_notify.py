"""Signed webhook notifications (``run.py notify``, workflow/notify.py, docs/reviewers.md#notifications).

Offline and deterministic: the receiver is a small HTTP server in a thread of this process that
verifies every request with the ``standardwebhooks`` package (``Webhook(secret).verify``), never a
verifier of our own, and answers what the test scripts (200, 500, a redirect, a slow answer).
Checkpoints are written straight through the store (``state.conformance.sample_body`` and
``save_revision``), so no test runs the SDK; the tests marked ``stores`` run on the file store and
on PostgreSQL (``HITL_TEST_PG_URL`` or the session's throwaway server). The kill tests run
``python run.py notify`` as a real process ended at a failpoint.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from conftest import ROOT, RUN_PY

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
KEY_ENV = {"HITL_SIGNING_KEY": "notify-tests-signing-key-0123456789"}


class Receiver:
    """An HTTP receiver in a thread: records every request as ``(headers, body, verified payload
    or the verification error)`` and answers ``script.pop(0)`` (default 200): a status code, or
    ``("sleep", seconds)`` (answers 200 after that long), or ``("redirect", url)``."""

    def __init__(self, secret: str = SECRET) -> None:
        self.secret, self.got, self.script, self.lock = secret, [], [], threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    verified = Webhook(receiver.secret).verify(body, headers)
                except WebhookVerificationError as exc:
                    verified = exc
                with receiver.lock:
                    receiver.got.append((headers, body, verified))
                    answer = receiver.script.pop(0) if receiver.script else 200
                if isinstance(answer, tuple) and answer[0] == "sleep":
                    time.sleep(answer[1])
                    answer = 200
                if isinstance(answer, tuple):
                    self.send_response(302)
                    self.send_header("location", answer[1])
                else:
                    self.send_response(answer)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def ids(self) -> list[str]:
        return [h["webhook-id"] for h, _, _ in self.got]

    def types(self) -> list[str]:
        return [json.loads(b)["type"] for _, b, _ in self.got]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def env(monkeypatch, receiver):
    """This process's settings for notify: the receiver, the secret, a first wait of 30 s."""
    for k, v in {**KEY_ENV, "HITL_WEBHOOK_URL": receiver.url, "HITL_WEBHOOK_SECRET": SECRET,
                 "HITL_WEBHOOK_FIRST_WAIT": "30", "HITL_WEBHOOK_TIMEOUT": "5"}.items():
        monkeypatch.setenv(k, v)
    for k in ("HITL_NOW", "HITL_FAILPOINT", "HITL_STORE_URL", "HITL_WEBHOOK_ATTEMPTS"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.fixture(params=["file", "postgres"])
def store(request, tmp_path, env):
    """A fresh store: the file store, or PostgreSQL (a fresh schema)."""
    if request.param == "file":
        from state.files.store import Store

        return Store(tmp_path / "state")
    from state.postgres.store import PostgresStore

    return PostgresStore(request.getfixturevalue("pg_url"), tmp_path / "state")


def _task(store, task_id: str = "t-1"):
    """A waiting task (revision 1, event ``started`` asking about call-1)."""
    from state.clock import now_iso
    from state.conformance import sample_body

    body = sample_body(task_id)
    body["history"] = [{"at": now_iso(), "event": "started", "revision": 1,
                        "detail": {"pending": ["call-1"], "calls": body["pending"]}}]
    return store.save(body, failpoint="test")


def _approve_and_complete(store, cp):
    """Revisions 2-4: an approval recorded, the decision approved, the task completed."""
    cp = store.save_revision(cp, failpoint="test", event=("approval_recorded", {
        "call_id": "call-1", "channel": "blog", "by": "alice", "approvals": 1, "required": 2}))
    cp = store.save_revision(cp, failpoint="test", event=("decision_recorded", {
        "decision": "approved", "call_id": "call-1", "channel": "blog", "by": "bob"}))
    return store.save_revision(cp, failpoint="test", status="completed", pending=[],
                               event=("completed", {"ledger": None}))


def _pass(store):
    from cli.hints import hint
    from workflow import notify

    return notify.deliver(store, notify.target(), hint)


def _later(monkeypatch, due: str, seconds: float = 1) -> None:
    """Move the judging clock (``HITL_NOW``) to ``seconds`` after ``due``."""
    from state.clock import iso, parse_iso

    monkeypatch.setenv("HITL_NOW", iso(parse_iso(due) + timedelta(seconds=seconds)))


def test_every_event_goes_out_signed_as_the_spec_says_in_order(store, receiver):
    """Why: a receiver verifies each request with the Standard Webhooks library alone; the body
    names the type, the task, the call, the channel, the status and the next command; the ID is
    the derived one."""
    from cli.text import resume_hint
    from workflow.notify import webhook_id

    cp = _approve_and_complete(store, _task(store))
    report = _pass(store)
    assert [d["type"] for d in report["delivered"]] == receiver.types() == [
        "task.waiting", "task.approval_recorded", "task.approved", "task.completed"]
    for headers, body, verified in receiver.got:
        assert isinstance(verified, dict), verified  # Webhook(secret).verify accepted it
        assert headers["webhook-timestamp"].isdigit() and abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        assert headers["webhook-signature"].startswith("v1,")
    assert receiver.ids() == [webhook_id(cp.state_id, "t-1", f"r{n}") for n in (1, 2, 3, 4)]
    waiting = receiver.got[0][2]
    assert waiting["data"]["call_id"] == "call-1" and waiting["data"]["channel"] == "blog"
    assert waiting["data"]["status"] == "waiting_for_approval"
    assert waiting["data"]["next"] == resume_hint("t-1") + ' (or reject --reason "...")'
    assert receiver.got[3][2]["data"]["next"] == "python run.py show --task t-1"
    assert receiver.got[1][2]["data"]["by"] == "alice" and receiver.got[2][2]["data"]["by"] == "bob"
    assert _pass(store)["delivered"] == [] and len(receiver.got) == 4  # delivered: never again


def test_another_secret_or_a_changed_body_does_not_verify(store, receiver):
    """Why: the signature covers the ID and the timestamp as well as the body (a signature over the
    body alone would let a captured request be replayed under a new ID or time)."""
    _task(store)
    _pass(store)
    headers, body, _ = receiver.got[0]
    other = "whsec_" + base64.b64encode(b"\x01" * 32).decode()
    for data, hdrs, secret in ((body, headers, other), (body + b" ", headers, SECRET),
                               (body, {**headers, "webhook-id": "msg_" + "0" * 32}, SECRET),
                               (body, {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)},
                                SECRET)):
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(data, hdrs)


def test_a_replayed_old_delivery_is_rejected_by_its_timestamp(store, receiver, monkeypatch):
    """Why: the receiver's tolerance (5 minutes in the library) is what stops a replay: the same
    request, verified again 6 minutes later, is refused."""
    import standardwebhooks.webhooks as wh
    from datetime import datetime

    _task(store)
    _pass(store)
    headers, body, verified = receiver.got[0]
    assert isinstance(verified, dict)

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(minutes=6)

    monkeypatch.setattr(wh, "datetime", Later)
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(body, headers)


def test_500_then_200_same_id_after_the_backoff(store, receiver, env):
    """Why: a receiver that fails loses nothing; the retry carries the same webhook-id; it is not
    tried again before its due time (the first wait), and the task's next event waits for it."""
    cp = _task(store)
    store.save_revision(cp, failpoint="test", event=("approval_recorded", {"call_id": "call-1", "by": "alice"}))
    receiver.script[:] = [500]
    first = _pass(store)
    assert [r["attempts"] for r in first["retrying"]] == [1] and first["retrying"][0]["last_error"] == "HTTP 500"
    assert first["waiting"] == 1 and receiver.types() == ["task.waiting"]
    from datetime import datetime, timezone

    from state.clock import parse_iso

    due = first["retrying"][0]["next_due"]
    tried = datetime.fromtimestamp(int(receiver.got[0][0]["webhook-timestamp"]), tz=timezone.utc)
    assert 29 <= (parse_iso(due) - tried).total_seconds() <= 32  # HITL_WEBHOOK_FIRST_WAIT=30
    _later(env, due, -2)  # two seconds before it is due: nothing is sent
    assert _pass(store)["retrying"] == [] and len(receiver.got) == 1
    _later(env, due)
    second = _pass(store)
    assert [d["type"] for d in second["delivered"]] == ["task.waiting", "task.approval_recorded"]
    assert receiver.ids()[0] == receiver.ids()[1] and receiver.types()[2] == "task.approval_recorded"
    assert store.notify_get("t-1").inflight is None


def test_the_wait_doubles_from_the_first_wait():
    """Why: exponential backoff, bounded."""
    from workflow.notify import wait_after

    assert [wait_after(30, n) for n in (1, 2, 3)] == [30, 60, 120]
    assert wait_after(30, 40) == 3600


def test_order_per_task_and_tasks_do_not_wait_for_each_other(store, receiver):
    """Why: a task's later event is never sent before its earlier one is delivered; another task's
    events go out meanwhile."""
    _approve_and_complete(store, _task(store, "t-1"))
    _task(store, "t-2")
    receiver.script[:] = [500]  # t-1's first event (tasks are taken in task ID order)
    report = _pass(store)
    sent = [(json.loads(b)["data"]["task_id"], json.loads(b)["type"]) for _, b, _ in receiver.got]
    assert sent == [("t-1", "task.waiting"), ("t-2", "task.waiting")]
    assert report["waiting"] == 3


def test_given_up_after_the_bound_stays_visible_and_the_next_event_goes_on(store, receiver, env):
    """Why: a receiver that refuses one event forever does not silence the task; the failed event
    stays visible (notify --list) with its tries and last error."""
    from cli.hints import hint
    from workflow import notify

    env.setenv("HITL_WEBHOOK_ATTEMPTS", "2")
    cp = _task(store)
    store.save_revision(cp, failpoint="test", event=("expired", {"by": "ops"}), status="expired", pending=[])
    receiver.script[:] = [500, 503]
    first = _pass(store)
    _later(env, first["retrying"][0]["next_due"])
    second = _pass(store)
    assert [(f["type"], f["attempts"], f["last_error"]) for f in second["failed"]] == [("task.waiting", 2, "HTTP 503")]
    assert [d["type"] for d in second["delivered"]] == ["task.expired"]
    listed = notify.outbox(store, hint)
    assert listed["totals"] == {"events": 2, "delivered": 1, "pending": 0, "failed": 1}
    assert listed["tasks"][0]["failed"][0]["id"] == receiver.ids()[0]
    assert _pass(store)["delivered"] == []  # given up: not sent again


def test_an_event_given_up_is_sent_again_by_retry_failed_with_its_own_id(store, receiver, env):
    """Why: a receiver down longer than the tries lost the events that fell due meanwhile, and no
    command sent them again. ``notify --retry-failed`` sends each one given up once more, with the
    same ``webhook-id``: refused again it stays failed (one more try counted), taken it is delivered."""
    from cli.hints import hint
    from workflow import notify

    env.setenv("HITL_WEBHOOK_ATTEMPTS", "1")
    _task(store)
    receiver.script[:] = [500, 502]
    gave_up = _pass(store)["failed"]
    assert [(f["type"], f["attempts"]) for f in gave_up] == [("task.waiting", 1)]
    again = notify.retry_failed(store, hint)  # the receiver still refuses: still failed, 2 tries
    assert again["delivered"] == [] and [(f["attempts"], f["last_error"]) for f in again["failed"]] == [
        (2, "HTTP 502")]
    done = notify.retry_failed(store, hint)  # back up: delivered, no longer failed
    assert [d["id"] for d in done["delivered"]] == [gave_up[0]["id"]] and done["failed"] == []
    assert receiver.ids() == [gave_up[0]["id"]] * 3 and all(isinstance(v, dict) for _, _, v in receiver.got[2:])
    assert notify.outbox(store, hint)["totals"] == {"events": 1, "delivered": 1, "pending": 0, "failed": 0}
    assert notify.retry_failed(store, hint)["delivered"] == [] and len(receiver.got) == 3  # nothing left


def test_in_doubt_and_settled_are_announced(store, receiver):
    """Why: an effect in doubt is not a revision; its event is derived from the write-ahead intent
    while it holds, and a person's settlement from the settlement record."""
    from state.conformance import _intent, _settlement

    cp = _task(store)
    store.save_revision(cp, failpoint="test", service="https://publish.example/api",
                        event=("decision_recorded", {"decision": "approved", "call_id": "call-1"}))
    store.intent_record(_intent().model_copy(update={"deduplicates": False}))
    _pass(store)
    assert receiver.types() == ["task.waiting", "task.approved", "task.in_doubt"]
    doubt = receiver.got[2][2]["data"]
    assert doubt["call_id"] == "call-1" and doubt["next"].startswith("python run.py settle --task t-1 --call call-1")
    store.settlement_record(_settlement())
    _pass(store)
    assert receiver.types()[3] == "task.settled" and receiver.got[3][2]["data"]["outcome"] == "not_published"


def test_redirects_are_not_followed_and_a_slow_receiver_is_a_failed_try(store, receiver, env):
    """Why: a redirect could send the signed event elsewhere; a slow receiver must not hold notify."""
    env.setenv("HITL_WEBHOOK_TIMEOUT", "0.3")
    _task(store)
    receiver.script[:] = [("redirect", receiver.url + "/elsewhere")]
    first = _pass(store)
    assert first["retrying"][0]["last_error"] == "HTTP 302" and len(receiver.got) == 1
    _later(env, first["retrying"][0]["next_due"])
    receiver.script[:] = [("sleep", 1.0)]
    second = _pass(store)
    assert second["retrying"][0]["last_error"] == "no answer within 0.3 s"
    assert second["retrying"][0]["attempts"] == 2


def test_no_secret_in_bodies_or_in_the_store_records(store, receiver, tmp_path):
    """Why: the webhook secret signs; it is never sent or kept. Nor is the draft."""
    from state.secrets import values

    assert SECRET in values()  # the variable is one of the secrets every record is scrubbed of
    _approve_and_complete(store, _task(store))
    receiver.script[:] = [500]
    _pass(store)
    secret_b64 = SECRET.removeprefix("whsec_")
    for _, body, _ in receiver.got:
        assert secret_b64.encode() not in body and b"A draft for the store contract" not in body
        assert b"Contract" not in body  # nor the title
    progress = store.notify_get("t-1").model_dump_json()
    assert secret_b64 not in progress
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert secret_b64.encode() not in path.read_bytes(), path


def test_the_progress_record_is_compare_and_swap(store):
    """Why: two notify processes never undo each other's progress."""
    from state.errors import Refused
    from state.notify import Progress

    assert store.notify_get("t-1") is None
    one = Progress(task_id="t-1", version=1, delivered=["msg_" + "a" * 32])
    store.notify_save(None, one)
    with pytest.raises(Refused) as caught:
        store.notify_save(None, Progress(task_id="t-1", version=1))
    assert caught.value.code == "stale_revision"
    two = Progress(task_id="t-1", version=2, delivered=[*one.delivered, "msg_" + "b" * 32])
    store.notify_save(one, two)
    with pytest.raises(Refused):
        store.notify_save(one, Progress(task_id="t-1", version=2))
    assert store.notify_get("t-1") == two


# -- real processes --------------------------------------------------------------------------------


def _notify(state_dir: Path, receiver: Receiver, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env.update({**KEY_ENV, "HITL_WEBHOOK_URL": receiver.url, "HITL_WEBHOOK_SECRET": SECRET, **extra})
    return subprocess.run([sys.executable, str(RUN_PY), "--state-dir", str(state_dir), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("failpoint", ["notify:send:after", "notify:send:before", "notify:progress:before"])
def test_a_kill_mid_delivery_then_a_rerun_delivers_everything_with_the_same_ids(tmp_path, receiver, env, failpoint):
    """Why: at least once: a process killed before, during or right after a delivery, before its
    progress is written, loses nothing; the rerun sends every event, with the same IDs."""
    from state.files.store import Store

    store = Store(tmp_path / "state")
    _approve_and_complete(store, _task(store))
    killed = _notify(tmp_path / "state", receiver, "notify", "--once", HITL_FAILPOINT=failpoint)
    assert killed.returncode == 86, killed.stderr
    before = receiver.ids()
    assert len(before) == (0 if failpoint == "notify:send:before" else 1)
    again = _notify(tmp_path / "state", receiver, "--json", "notify", "--once")
    assert again.returncode == 0, again.stderr
    assert len(json.loads(again.stdout)["delivered"]) == 4
    from workflow.notify import task_events

    every = [e.id for e in task_events(store, store.load("t-1"))]
    assert receiver.ids() == before + every and len(set(receiver.ids())) == 4
    assert all(isinstance(v, dict) for _, _, v in receiver.got)


def test_a_change_made_before_notify_ever_ran_is_delivered_after_a_crash(tmp_path, receiver, env):
    """Why: the outbox is the change itself: a process killed right after it wrote the change
    (``expire``, killed at ``checkpoint:expired:after``) leaves an event the next notify sends."""
    from state.files.store import Store

    store = Store(tmp_path / "state")
    cp = _task(store)
    store.save_revision(cp, failpoint="test", expires_at="2030-01-01T00:00:00.000000Z", event=("resumed", {}))
    env_ = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env_.update(KEY_ENV, HITL_NOW="2100-01-01T00:00:00Z", HITL_FAILPOINT="checkpoint:expired:after")
    crash = subprocess.run([sys.executable, str(RUN_PY), "--state-dir", str(tmp_path / "state"), "expire"],
                           cwd=ROOT, env=env_, capture_output=True, text=True, timeout=120)
    assert crash.returncode == 86, crash.stderr
    assert store.load("t-1").status == "expired"
    done = _notify(tmp_path / "state", receiver, "notify", "--once")
    assert done.returncode == 0, done.stderr
    assert receiver.types() == ["task.waiting", "task.expired"]


def test_bad_or_missing_settings_stop_with_one_line_and_write_nothing(tmp_path, receiver, env):
    """Why: a bad secret or URL is named (never echoed) before anything is sent or written."""
    from state.files.store import Store

    store = Store(tmp_path / "state")
    _task(store)
    for extra, says in (({"HITL_WEBHOOK_SECRET": "not-a-secret-value"}, "HITL_WEBHOOK_SECRET does not start"),
                        ({"HITL_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"x" * 8).decode()}, "decodes to 8 bytes"),
                        ({"HITL_WEBHOOK_URL": "http://user:pw@127.0.0.1/x"}, "HITL_WEBHOOK_URL holds credentials"),
                        ({"HITL_WEBHOOK_ATTEMPTS": "0"}, "HITL_WEBHOOK_ATTEMPTS"),
                        ({"HITL_WEBHOOK_URL": ""}, "notify needs HITL_WEBHOOK_URL")):
        r = _notify(tmp_path / "state", receiver, "notify", **extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("STOPPED: ") and says in lines[0], r.stderr
        assert "not-a-secret-value" not in r.stderr and "pw@" not in r.stderr
    assert receiver.got == [] and not (tmp_path / "state" / "notify").exists()


def test_notify_never_imports_the_sdk(tmp_path, receiver):
    """Why: notify is an operations command; importing the SDK costs about 2 s per start."""
    code = ("import sys, run; code = run.main(['--state-dir', sys.argv[1], 'notify', '--once']); "
            "assert 'agents' not in sys.modules, 'agents imported'; sys.exit(code)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env.update(KEY_ENV, HITL_WEBHOOK_URL=receiver.url, HITL_WEBHOOK_SECRET=SECRET)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "state")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_approval_that_reaches_the_quorum_asks_nobody_to_approve_again(store, receiver):
    """The approval that completed a quorum went out as ``task.approval_recorded`` with a ``next``
    telling people to approve once more. It now says ``quorum_reached`` and points at ``show``; an
    approval short of the quorum still names the ``resume`` command."""
    cp = _task(store)
    for n, by in ((1, "alice"), (2, "bob")):
        cp = store.save_revision(cp, failpoint="test", event=("approval_recorded", {
            "call_id": "call-1", "channel": "blog", "by": by, "approvals": n, "required": 2}))
    _pass(store)
    short, reached = (b["data"] for _, _, b in receiver.got[1:3])
    assert (short["quorum_reached"], reached["quorum_reached"]) == (False, True)
    assert "--decision approve" in short["next"] and reached["next"] == "python run.py show --task t-1"
