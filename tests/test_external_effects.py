"""Effects through a real publishing service, exactly once: every count is taken AT THE SERVICE
(its list of publications, and its count of POSTs received, ``GET /v1/_stats``), never in our files.

The commands are the real CLI in separate processes (forked from a warmed interpreter,
tests/forking.py; without fork, a subset of the crash points), killed at named failpoints
(``HITL_FAILPOINT`` → exit 86); each crash also logs the failpoints it passes
(``HITL_FAILPOINT_LOG``), so a test proves its point was reached. The service runs in a thread of
the test process (:func:`tools.publishing_service.start_in_thread`), or as a process of its own
where it must come back on the same address.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RUN_PY, ROOT, ledger_entries, sign_record, snapshot
from forking import HAS_FORK, in_process, run_cli, spawn_together
from tools.publishing_service import start_in_thread

TOKEN = "tok-Zq9-publish-secret-7c41e0"
KEY = "ext-1"
START = ["start", "--key", KEY, "--title", "Hello", "--draft", "Published once.", "--json"]
APPROVE = ["resume", "--task", KEY, "--decision", "approve", "--by", "ann", "--json"]
REJECT = ["resume", "--task", KEY, "--decision", "reject", "--by", "ann", "--reason", "no", "--json"]
#: Every failpoint around the request of one approved call, in the order a resume passes them.
AROUND_THE_REQUEST = ["effect:intent:before", "effect:intent:after", "checkpoint:effect:before",
                      "checkpoint:effect:after", "effect:request:before",
                      "effect:request:after", "ledger:record:before", "ledger:record:after",
                      "checkpoint:outcome:before", "checkpoint:outcome:after"]
#: Without fork every command is a fresh interpreter (~2 s or more): the points most likely to go wrong.
if not HAS_FORK:
    AROUND_THE_REQUEST = ["effect:intent:after", "effect:request:after", "ledger:record:after"]
#: The smaller matrix run on PostgreSQL (the signing key from the environment, as on several hosts).
PG_POINTS = ["effect:intent:after", "effect:request:before", "effect:request:after", "ledger:record:after"]
SIGNING = {"HITL_SIGNING_KEY": "ext-tests-signing-key-0123456789abcdef"}
#: An attempt whose window ends soon: one try, given up after 0.2 s, and a provider that acts at once.
SHORT_WINDOW = {"HITL_PUBLISH_TIMEOUT": "0.2", "HITL_PUBLISH_ATTEMPTS": "1", "HITL_PUBLISH_SETTLE_AFTER": "0"}


class Service:
    """A publishing service in this process's thread, counted through its HTTP API."""

    def __init__(self, data_dir: Path, url: str | None = None, **switches: Any) -> None:
        self.data_dir = data_dir
        self._stop = None
        if url is None:
            url, self._stop = start_in_thread(data_dir, token=TOKEN, **switches)
        self.url = url

    def _get(self, path: str) -> Any:
        r = httpx.get(self.url + path, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def publications(self) -> list[dict[str, Any]]:
        """Every publication the service holds, oldest first."""
        return self._get("/v1/publications")["data"]

    def posts(self) -> int:
        """How many POSTs the service received (any answer)."""
        return self._get("/v1/_stats")["posts"]

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def publish_directly(svc: Service, title: str, body: str, *, key: str) -> dict[str, Any]:
    """A publication made at ``svc`` by someone else, under ``key`` (201 asserted); returns it."""
    r = httpx.post(svc.url + "/v1/publications", json={"title": title, "body": body, "channel": "blog"},
                   headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key}, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.fixture
def service(tmp_path: Path):
    """``service(**switches)`` → a started :class:`Service` (stopped at the end of the test)."""
    started: list[Service] = []

    def make(**switches: Any) -> Service:
        svc = Service(tmp_path / f"svc{len(started)}", **switches)
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


def env_for(url: str | None, idempotency: str = "key", **extra: str) -> dict[str, str]:
    """The environment of a command publishing through ``url`` (None: no service)."""
    env = {"HITL_PUBLISH_TOKEN": TOKEN, "HITL_PUBLISH_IDEMPOTENCY": idempotency, "HITL_PUBLISH_TIMEOUT": "5",
           "HITL_PUBLISH_SETTLE_AFTER": "0", **extra}
    if url is not None:
        env["HITL_PUBLISH_URL"] = url
    return env


def cli(state_dir: Path, url: str | None, *args: str, store: str | None = None, **env: str):
    """One CLI command in its own process, publishing through ``url``; ``store``: a PostgreSQL URL."""
    extra, signing = (["--store", store], SIGNING) if store else ([], {})
    return run_cli(state_dir, *extra, *args, env={**signing, **env_for(url, **env)})


def start(state_dir: Path, url: str | None, store: str | None = None, **env: str) -> None:
    r = cli(state_dir, url, *START, store=store, **env)
    assert r.code == 0, r.err
    assert r.json()["status"] == "waiting_for_approval"


def crash(state_dir: Path, url: str, point: str, log: Path, store: str | None = None, **env: str) -> None:
    """``resume --decision approve`` killed at ``point``, which the log proves it reached."""
    log.unlink(missing_ok=True)
    r = cli(state_dir, url, *APPROVE, store=store, HITL_FAILPOINT=point, HITL_FAILPOINT_LOG=str(log), **env)
    reached = log.read_text(encoding="utf-8").split() if log.exists() else []
    assert r.code == 86, f"{point}: exit {r.code}, failpoints passed {reached}: {r.err}"
    assert reached and reached[-1] == point, reached


def shown(state_dir: Path, store: str | None = None) -> dict[str, Any]:
    """``status --task KEY --json`` (read-only: in this process; on PostgreSQL a process of its own,
    for the shared signing key)."""
    r = (cli(state_dir, None, "status", "--task", KEY, "--json", store=store) if store
         else in_process(state_dir, "status", "--task", KEY, "--json"))
    assert r.code == 0, r.err
    return r.json()


def stopped(r, *words: str) -> str:
    """Assert ``r`` is one STOPPED line containing ``words``; return it."""
    r.assert_stopped()
    for w in words:
        assert w in r.err, (w, r.err)
    return r.err


def intents(state_dir: Path) -> list[dict[str, Any]]:
    folder = state_dir / "effects"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.intent.json"))] \
        if folder.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the crash matrix ------------------------------------------------------------------------------


def _crash_then_recover(state_dir: Path, svc: Service, point: str, log: Path, store: str | None = None) -> None:
    start(state_dir, svc.url, store=store)
    crash(state_dir, svc.url, point, log, store=store)
    assert len(svc.publications()) <= 1, point
    r = cli(state_dir, svc.url, *APPROVE, store=store)
    assert r.code == 0, f"{point}: {r.err}"
    assert r.json()["status"] == "completed", point
    assert len(svc.publications()) == 1, point
    posts = svc.posts()
    again = cli(state_dir, svc.url, *APPROVE, store=store)
    assert again.code == 0 and again.json()["status"] == "completed", point
    assert svc.posts() == posts and len(svc.publications()) == 1, point
    effect = shown(state_dir, store)["effects"][0]
    assert effect["state"] == "published" and effect["publication_id"] == svc.publications()[0]["id"], effect


@pytest.mark.parametrize("point", AROUND_THE_REQUEST)
def test_a_kill_at_each_failpoint_around_the_request_then_resume_publishes_exactly_once(point, service, state_dir,
                                                                                        tmp_path):
    _crash_then_recover(state_dir, service(), point, tmp_path / "fp.log")


@pytest.mark.parametrize("point", PG_POINTS)
def test_the_crash_matrix_on_postgresql_publishes_exactly_once(point, service, pg_url, state_dir, tmp_path):
    _crash_then_recover(state_dir, service(), point, tmp_path / "fp.log", store=pg_url)
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM effect_intents").fetchone() == (1,)


# -- faults at the service -------------------------------------------------------------------------


def test_an_answer_lost_after_the_commit_publishes_once_and_completes(service, state_dir):
    svc = service(lose_answer=1)
    start(state_dir, svc.url)
    r = cli(state_dir, svc.url, *APPROVE)
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert len(svc.publications()) == 1
    # the lost answer, then the lookup by the same key before another try: found, never sent again
    assert svc.posts() == 1


def test_a_call_not_confirmed_in_a_task_of_several_calls_is_sent_again_by_the_command_printed(service, state_dir):
    """Two channels; blog's request gets a 503 and its one try is used up: the ``STOPPED:`` line
    and ``status`` name the same resume with blog's ``--call`` (a resume without it is refused
    while news waits). Pasted, it sends blog again with the same key: one publication."""
    import shlex

    svc = service(fail_503=1)
    r = cli(state_dir, svc.url, "start", "--key", KEY, "--title", "Hello", "--draft", "Published once.",
            "--channel", "blog", "--channel", "news", "--json")
    assert r.code == 0, r.err
    blog = next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == "blog")
    r = cli(state_dir, svc.url, "resume", "--task", KEY, "--call", blog, "--decision", "approve", "--by", "ann",
            HITL_PUBLISH_ATTEMPTS="1")
    same = f"python run.py resume --task {KEY} --call {blog} --decision approve"
    stopped(r, f"the same command sends again: {same}")
    status = cli(state_dir, svc.url, "status", "--task", KEY).out
    assert f"  next: {same} (sends again with the same Idempotency-Key" in status, status
    again = cli(state_dir, svc.url, *shlex.split(same)[2:], "--by", "ann", "--json")
    assert again.code == 0 and again.json()["status"] == "waiting_for_approval", again.err
    assert len(svc.publications()) == 1 and [e["channel"] for e in ledger_entries(state_dir)] == ["blog"]


def test_two_503s_then_ok_publish_once_in_one_command(service, state_dir):
    svc = service(fail_503=2)
    start(state_dir, svc.url)
    r = cli(state_dir, svc.url, *APPROVE, HITL_PUBLISH_ATTEMPTS="3")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert len(svc.publications()) == 1 and svc.posts() == 3


def test_service_down_is_publishing_and_nothing_published_then_back_the_same_resume_publishes_once(state_dir,
                                                                                                   tmp_path):
    port = free_port()
    url, data = f"http://127.0.0.1:{port}", tmp_path / "svc"
    start(state_dir, url)
    r = cli(state_dir, url, *APPROVE, HITL_PUBLISH_ATTEMPTS="2")
    stopped(r, "nothing reached the service", "nothing was published")
    assert shown(state_dir)["status"] == "publishing"
    assert not ledger_entries(state_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, str(RUN_PY), "publishing-service", "--port", str(port), "--data",
                             str(data)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**env, "HITL_PUBLISH_TOKEN": TOKEN})
    try:
        assert proc.stdout.readline().strip() == f"publishing service: {url}"
        svc = Service(data, url=url)
        assert svc.publications() == [] and svc.posts() == 0  # the service saw nothing while down
        r = cli(state_dir, url, *APPROVE)
        assert r.code == 0, r.err
        assert r.json()["status"] == "completed"
        assert len(svc.publications()) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def test_killed_after_the_service_committed_the_next_resume_asks_and_records_it_once(service, state_dir, tmp_path):
    svc = service()
    start(state_dir, svc.url)
    crash(state_dir, svc.url, "effect:request:after", tmp_path / "fp.log")
    assert len(svc.publications()) == 1 and svc.posts() == 1  # the service acted; we did not record it
    assert shown(state_dir)["status"] == "publishing"
    r = cli(state_dir, svc.url, *APPROVE)
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert len(svc.publications()) == 1
    assert svc.posts() == 1  # the lookup by key found it: nothing sent again
    assert ledger_entries(state_dir)[0]["result"]["id"] == svc.publications()[0]["id"]


def test_a_reject_sends_no_request_at_all(service, state_dir):
    svc = service()
    start(state_dir, svc.url)
    r = cli(state_dir, svc.url, *REJECT)
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled"
    assert svc.posts() == 0 and svc.publications() == []
    assert intents(state_dir) == [] and not ledger_entries(state_dir)


def test_approving_twice_publishes_once_and_the_second_sends_nothing(service, state_dir):
    svc = service()
    start(state_dir, svc.url)
    first = cli(state_dir, svc.url, *APPROVE)
    assert first.code == 0 and first.json()["status"] == "completed", first.err
    assert svc.posts() == 1
    before = snapshot(state_dir / "ledger")
    second = cli(state_dir, svc.url, *APPROVE)
    assert second.code == 0 and second.json()["status"] == "completed", second.err
    assert svc.posts() == 1 and len(svc.publications()) == 1
    assert snapshot(state_dir / "ledger") == before


def test_four_racing_approvers_against_a_slow_service_publish_once(service, state_dir):
    svc = service(slow=1.0)
    start(state_dir, svc.url)
    procs = spawn_together([(state_dir, APPROVE)] * 4, env=env_for(svc.url))
    results = [p.wait() for p in procs]
    for r in results:
        assert r.code in (0, 1) and "Traceback" not in r.err, (r.code, r.err)
        if r.code == 1:
            r.assert_stopped()
    assert any(r.code == 0 and r.json()["status"] == "completed" for r in results), [r.err for r in results]
    assert len(svc.publications()) == 1
    assert svc.posts() == 1  # the others found the ledger entry: no second request
    assert shown(state_dir)["status"] == "completed"


# -- a provider without deduplication, and a human who settles --------------------------------------


def _in_doubt(state_dir: Path, svc: Service) -> None:
    start(state_dir, svc.url, idempotency="none")
    r = cli(state_dir, svc.url, *APPROVE, idempotency="none")
    stopped(r, "is in doubt", "does not deduplicate")
    assert shown(state_dir)["status"] == "in_doubt"
    assert len(svc.publications()) == 1 and svc.posts() == 1


def test_without_deduplication_a_lost_answer_is_in_doubt_and_never_sent_again(service, state_dir):
    svc = service(dedup=False, lose_answer=1)
    _in_doubt(state_dir, svc)
    for _ in range(2):
        r = cli(state_dir, svc.url, *APPROVE, idempotency="none")
        stopped(r, "is in doubt", "nothing was sent again", "python run.py settle",
                "or --outcome not-published --by NAME")
        assert "run the same command again" not in r.err  # repeating it is not the way on
        assert svc.posts() == 1 and len(svc.publications()) == 1
    assert shown(state_dir)["status"] == "in_doubt" and not ledger_entries(state_dir)


def test_a_task_failed_while_its_request_was_in_doubt_names_the_settle_that_ends_it(service, state_dir):
    """A ``fail`` whose write landed while a request of the call was out (the one order no check
    refuses): the task is ``failed`` with the effect in doubt. doctor names a person's look at the
    service and the settle (never "a human" alone); found published, the settle records it and
    ends the task ``completed``, the failure kept (an executed action is never left failed)."""
    from state.files.store import Store

    svc = service(dedup=False, lose_answer=1)
    _in_doubt(state_dir, svc)
    store = Store(state_dir)
    store.save_revision(store.load(KEY), failpoint="checkpoint:outcome", status="failed", pending=[],
                        expires_at=None, failure="ended by bob: gave up",
                        event=("failed", {"by": "bob", "reason": "gave up", "status": "failed"}))
    r = cli(state_dir, svc.url, "doctor", "--json", idempotency="none")
    [finding] = r.json()["findings"]
    call = store.load(KEY).decision.call_id
    assert finding["kind"] == "cancelled_with_intent", finding
    assert finding["action"].startswith("a human looks at the service"), finding
    assert finding["action"].endswith(
        f"python run.py settle --task {KEY} --call {call} --outcome published|not-published --by NAME (an action that "
        "may have executed is never marked cancelled)"), finding
    settled = cli(state_dir, svc.url, "settle", "--task", KEY, "--call", call, "--outcome", "published", "--by", "bea",
                  "--reason", "seen in the service's list", idempotency="none")
    assert settled.code == 0, settled.err
    assert cli(state_dir, svc.url, "doctor", "--json", idempotency="none").json()["consistent"]
    assert svc.posts() == 1 and len(ledger_entries(state_dir)) == 1
    task = shown(state_dir)
    assert task["status"] == "completed" and task["failure"] == "ended by bob: gave up", task


def test_settled_as_published_completes_without_sending_and_records_who(service, state_dir):
    svc = service(dedup=False, lose_answer=1)
    _in_doubt(state_dir, svc)
    r = cli(state_dir, svc.url, "settle", "--task", KEY, "--outcome", "published", "--by", "bea",
            "--reason", "seen in the service's list", "--json", idempotency="none")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert svc.posts() == 1 and len(svc.publications()) == 1
    [entry] = ledger_entries(state_dir)
    assert entry["settled_by"] == "bea" and entry["settle_reason"] == "seen in the service's list"
    assert shown(state_dir)["effects"][0]["settled_by"] == "bea"
    again = cli(state_dir, svc.url, *APPROVE, idempotency="none")
    assert again.code == 0 and again.json()["status"] == "completed", again.err
    assert svc.posts() == 1


def test_settled_as_not_published_goes_back_to_publishing_and_the_next_resume_sends_once(service, state_dir,
                                                                                        tmp_path):
    svc = service(dedup=False)
    start(state_dir, svc.url, idempotency="none")
    crash(state_dir, svc.url, "effect:request:before", tmp_path / "fp.log", idempotency="none",
          **SHORT_WINDOW)  # its window ends 0.2 s after the attempt was bound
    assert svc.posts() == 0  # it really did not reach the service; the program cannot know that
    assert shown(state_dir)["status"] == "in_doubt"
    time.sleep(0.3)  # past the window: no request of the attempt can still act
    r = cli(state_dir, svc.url, "settle", "--task", KEY, "--outcome", "not-published", "--by", "bea",
            "--json", idempotency="none")
    assert r.code == 0, r.err
    assert shown(state_dir)["status"] == "publishing"
    assert svc.posts() == 0
    text = cli(state_dir, svc.url, "status", "--task", KEY, idempotency="none").out
    assert "attempt 1 not published: settled by bea; the next resume sends it as attempt 2, with a new key" in text
    assert "(sends it once more;" in text and "same Idempotency-Key" not in text  # the key is a new one
    r = cli(state_dir, svc.url, *APPROVE, idempotency="none")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert len(svc.publications()) == 1 and svc.posts() == 1
    assert [i["attempt"] for i in intents(state_dir)] == [1, 2]


def test_an_attempt_settled_not_published_of_an_ended_task_is_never_said_to_be_sent_again(service, state_dir,
                                                                                          tmp_path):
    """After a person's ``not-published``, the next resume would send a new attempt; once a ``fail``
    has ended the task (or made its end mark and was cut by a crash), ``status`` says nothing more
    is sent, never that the next resume sends it."""
    svc = service(dedup=False)
    start(state_dir, svc.url, idempotency="none")
    crash(state_dir, svc.url, "effect:request:before", tmp_path / "fp.log", idempotency="none", **SHORT_WINDOW)
    time.sleep(0.3)  # past the attempt's window
    assert cli(state_dir, svc.url, "settle", "--task", KEY, "--outcome", "not-published", "--by", "bea",
               idempotency="none").code == 0
    fail = ["fail", "--task", KEY, "--by", "bob", "--reason", "gone"]
    assert cli(state_dir, svc.url, *fail, idempotency="none", HITL_FAILPOINT="checkpoint:outcome:before").code == 86
    for ended in (False, True):
        if ended:
            assert cli(state_dir, svc.url, *fail, "--json", idempotency="none").json()["status"] == "failed"
        text = cli(state_dir, svc.url, "status", "--task", KEY, idempotency="none").out
        assert ("not published (attempt 1 found not done; the task ended)" if ended else "attempt 1 not published: "
                "settled by bea; the task was ended: nothing more is sent") in text, text
        assert "the next resume sends it" not in text, text
    assert svc.posts() == 0 and ledger_entries(state_dir) == []


@pytest.mark.parametrize("dedup", [True, False])
def test_settle_is_refused_where_nothing_was_begun_and_changes_nothing(service, state_dir, tmp_path, dedup):
    """The process killed before the intent: nothing was begun, so there is nothing to settle (the
    next resume sends it)."""
    svc = service(dedup=dedup)
    idempotency = "key" if dedup else "none"
    start(state_dir, svc.url, idempotency=idempotency)
    crash(state_dir, svc.url, "effect:intent:before", tmp_path / "fp.log", idempotency=idempotency)
    assert shown(state_dir)["status"] == "waiting_for_approval"  # an approval recorded, nothing begun
    before = snapshot(state_dir)
    for outcome in ("published", "not-published"):
        r = cli(state_dir, svc.url, "settle", "--task", KEY, "--outcome", outcome, "--by", "bea",
                idempotency=idempotency)
        stopped(r, "is not in doubt", "nothing recorded")
    assert snapshot(state_dir) == before
    assert svc.posts() == 0 and not ledger_entries(state_dir)
    r = cli(state_dir, svc.url, *APPROVE, idempotency=idempotency)  # the next resume sends it: once
    assert r.code == 0, r.err
    assert len(svc.publications()) == 1


def test_a_409_is_never_reported_as_published(service, state_dir, tmp_path):
    svc = service()
    start(state_dir, svc.url)
    crash(state_dir, svc.url, "effect:intent:after", tmp_path / "fp.log")
    [intent] = intents(state_dir)
    publish_directly(svc, "Other", "Not ours.", key=intent["request_key"])
    r = cli(state_dir, svc.url, *APPROVE)
    stopped(r, "holds Idempotency-Key", "for other content", "not published")
    assert not ledger_entries(state_dir)
    assert shown(state_dir)["status"] == "publishing"
    assert [p["title"] for p in svc.publications()] == ["Other"]


def test_a_publication_found_under_the_key_with_the_same_title_and_another_body_is_not_adopted(service, state_dir,
                                                                                               tmp_path):
    """The lookup after a crash compares every field of the draft, not only the title: a publication
    under this call's key with the same title and another body is never recorded as this call's."""
    svc = service()
    start(state_dir, svc.url)
    crash(state_dir, svc.url, "effect:intent:after", tmp_path / "fp.log")
    [intent] = intents(state_dir)
    publish_directly(svc, "Hello", "Not ours.", key=intent["request_key"])
    r = cli(state_dir, svc.url, *APPROVE)
    stopped(r, "for other content", "not published")
    assert not ledger_entries(state_dir) and shown(state_dir)["status"] == "publishing"
    assert [(p["title"], p["body"]) for p in svc.publications()] == [("Hello", "Not ours.")]


def test_an_intent_whose_content_fingerprint_was_edited_stops_the_command_and_sends_nothing(service, state_dir,
                                                                                            tmp_path):
    """An intent is this call's only if its task, action AND content fingerprint are the call's:
    one whose ``content_sha256`` was edited (the rest left as it was) is refused before any request."""
    import hashlib

    svc = service()
    start(state_dir, svc.url)
    crash(state_dir, svc.url, "effect:intent:after", tmp_path / "fp.log")
    [path] = [p for p in sorted((state_dir / "effects").rglob("*intent*")) if p.is_file()]
    data = json.loads(path.read_text(encoding="utf-8"))
    fields = {k: v for k, v in data.items() if k not in ("record", "state_id", "mac")}
    fields["content_sha256"] = hashlib.sha256(b"another draft").hexdigest()
    for signed in (False, True):  # edited by hand (the signature fails), then re-signed by a key holder
        path.write_text(json.dumps(sign_record(state_dir, "effect_intent", fields) if signed
                                   else {**data, "content_sha256": fields["content_sha256"]}), encoding="utf-8")
        r = cli(state_dir, svc.url, *APPROVE)
        r.assert_stopped()
        assert ("not this call's" in r.err) if signed else ("integrity check failed" in r.err), r.err
        assert svc.posts() == 0 and svc.publications() == [] and not ledger_entries(state_dir)


def test_a_call_in_doubt_stays_in_doubt_after_the_setting_is_switched_to_key(service, state_dir):
    """Whether a call may be sent again is judged by what the intent recorded when it was sent
    (a provider that does not deduplicate), not by ``HITL_PUBLISH_IDEMPOTENCY`` now: switched to
    ``key`` afterwards, the command is refused (the kind of provider is the task's, like its URL),
    the call is still in doubt and nothing is sent again."""
    svc = service(dedup=False, lose_answer=1)
    _in_doubt(state_dir, svc)
    for _ in range(2):
        r = cli(state_dir, svc.url, *APPROVE, idempotency="key")
        stopped(r, "which does not deduplicate", "which deduplicates", "nothing was sent")
        assert svc.posts() == 1 and len(svc.publications()) == 1
    assert shown(state_dir)["status"] == "in_doubt" and not ledger_entries(state_dir)


# -- the token and the service's address -----------------------------------------------------------


def test_the_token_is_never_written_to_any_file_or_output(service, state_dir, tmp_path):
    svc = service(lose_answer=1)
    outputs = []
    for args in (START, APPROVE, APPROVE, ["status", "--task", KEY], ["show", "--task", KEY], ["ledger"],
                 ["doctor"], ["list"]):
        r = cli(state_dir, svc.url, *args)
        assert r.code == 0, (args, r.err)
        outputs += [r.out, r.err]
    down = tmp_path / "down"
    start(down, f"http://127.0.0.1:{free_port()}")
    r = cli(down, f"http://127.0.0.1:{free_port()}", *APPROVE)  # refused: another URL
    outputs += [r.out, r.err]
    assert len(svc.publications()) == 1
    files = [p for d in (state_dir, down) for p in d.rglob("*") if p.is_file()]
    assert any(p.parent.name == "traces" for p in files) and any(p.parent.name == "effects" for p in files)
    secret = TOKEN.encode()
    assert [p for p in files if secret in p.read_bytes()] == []
    assert [o for o in outputs if TOKEN in o] == []


def test_a_resume_under_another_url_or_none_is_refused_before_any_request(service, state_dir):
    a, b = service(), service()
    start(state_dir, a.url)
    before = snapshot(state_dir)
    for url in (b.url, None):
        r = cli(state_dir, url, *APPROVE)
        stopped(r, f"started with its effect going to {a.url}", "nothing was sent")
        assert snapshot(state_dir) == before, url
    assert a.posts() == b.posts() == 0 and a.publications() == b.publications() == []
    assert shown(state_dir)["status"] == "waiting_for_approval"
    # and the right URL still publishes it, once
    r = cli(state_dir, a.url, *APPROVE)
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert len(a.publications()) == 1 and b.posts() == 0


def test_the_service_counts_posts_only_for_the_token():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        svc = Service(Path(folder))
        try:
            assert httpx.get(svc.url + "/v1/_stats", timeout=10).status_code == 401
            assert svc.posts() == 0
            httpx.post(svc.url + "/v1/publications", json={}, timeout=10)
            assert svc.posts() == 1 and svc.publications() == []
        finally:
            svc.stop()


def test_two_channels_through_a_deduplicating_service_approved_together_publish_once_each(service, state_dir):
    """``--always`` approves both calls of a turn; they run side by side, each binding its own attempt
    into the one checkpoint: the second binds after the first (it used to stop with "changed on disk",
    the first already published), and the task completes with one publication per channel."""
    svc = service()
    r = cli(state_dir, svc.url, "start", "--key", KEY, "--title", "Hello", "--draft", "Published once.",
            "--channel", "blog", "--channel", "news", "--json")
    assert r.code == 0, r.err
    blog = next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == "blog")
    r = cli(state_dir, svc.url, "resume", "--task", KEY, "--call", blog, "--decision", "approve", "--by", "ann",
            "--always", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert sorted(p["channel"] for p in svc.publications()) == ["blog", "news"] and svc.posts() == 2
    assert sorted(e["idempotency_key"] for e in ledger_entries(state_dir)) == [f"{KEY}#blog", f"{KEY}#news"]
