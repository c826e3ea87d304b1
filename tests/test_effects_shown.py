"""Where a person looks at an effect through a publishing service: ``show``, ``list`` and the
browser inbox show whether it is publishing, in doubt or published (with the publication id) and
what to run next. The reference service runs in this process; counts are taken at the service."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.test_web import _client, _login, _visible
from tools.publishing_service import start_in_thread

TOKEN = "tok-shown-123456789"


def _publications(data_dir: Path) -> int:
    """How many publications the reference service stored (its own SQLite file)."""
    with sqlite3.connect(data_dir / "publications.sqlite3") as conn:
        return conn.execute("SELECT COUNT(*) FROM publications").fetchone()[0]


@pytest.fixture
def service(tmp_path, monkeypatch):
    """A service that does not deduplicate and loses its first answer after committing."""
    url, stop = start_in_thread(tmp_path / "svc", token=TOKEN, dedup=False, lose_answer=1)
    monkeypatch.setenv("HITL_PUBLISH_URL", url)
    monkeypatch.setenv("HITL_PUBLISH_TOKEN", TOKEN)
    monkeypatch.setenv("HITL_PUBLISH_IDEMPOTENCY", "none")
    yield url, tmp_path / "svc"
    stop()


@pytest.fixture
def in_doubt(cli, service) -> str:
    """Task ``n1`` approved, its answer lost: in doubt (one publication at the service)."""
    assert cli("start", "--key", "n1", "--title", "Notes <b>", "--draft", "x").code == 0
    r = cli("resume", "--task", "n1", "--decision", "approve", "--by", "ann")
    assert r.code == 1 and "in doubt" in r.err, r.err
    return "n1"


def test_show_names_the_effect_in_doubt_and_the_settle_command(cli, in_doubt, service):
    r = cli("show", "--task", in_doubt)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].startswith("outcome: in_doubt;")
    assert lines[2].startswith(f"effect: blog through {service[0]}: IN DOUBT (attempt 1")
    # a request given up may still act until the attempt's window ends: "published" may be settled
    # at once, "not published" only after the window ("wait until"), never "look now and settle"
    assert "if it is there, settle it as published now; if not, wait until " in lines[2]
    assert lines[3].startswith("next: look at the service; if it is there: python run.py settle --task n1 "
                               "--outcome published --by NAME; if not, wait until ")
    assert "effect intent written for blog (attempt 1" in r.out
    j = json.loads(cli("show", "--task", in_doubt, "--json").out)
    assert j["outcome"]["status"] == "in_doubt" and j["service"] == service[0]
    (e,) = j["effects"]
    assert e["state"] == "in_doubt" and e["attempt"] == 1 and e["settle_reason"] is None
    assert TOKEN not in r.out + json.dumps(j)


def test_show_never_says_nothing_done_while_an_effect_is_in_doubt(cli, in_doubt):
    """An effect begun and not confirmed may have happened: the receipt's ledger part says so."""
    r = cli("show", "--task", in_doubt)
    assert r.out.splitlines()[1] == ("outcome: in_doubt; ledger: no entry (an effect was begun and may "
                                     "have happened; not settled: doctor explains)")
    assert "nothing done" not in r.out
    assert json.loads(cli("show", "--task", in_doubt, "--json").out)["outcome"]["unsettled"] == ["blog"]


def test_show_of_a_local_effect_cut_by_a_crash_says_it_may_have_happened(cli, state_dir):
    """A local effect's intent written, the process killed before its ledger entry: ``show`` does
    not say "nothing done"; once the same resume finishes it, the entry is shown and the key goes."""
    from tests.forking import run_cli

    assert cli("start", "--key", "c1", "--draft", "x").code == 0
    crashed = run_cli(state_dir, "resume", "--task", "c1", "--decision", "approve",
                      env={"HITL_FAILPOINT": "ledger:record:before"})
    assert crashed.code == 86, crashed.err
    j = json.loads(cli("show", "--task", "c1", "--json").out)
    assert j["outcome"]["unsettled"] == ["blog"] and j["outcome"]["ledger"] is None
    text = cli("show", "--task", "c1").out
    assert "ledger: no entry (an effect was begun and may have happened" in text
    assert "nothing done" not in text
    assert cli("resume", "--task", "c1", "--decision", "approve").code == 0
    j = json.loads(cli("show", "--task", "c1", "--json").out)
    assert "unsettled" not in j["outcome"] and j["outcome"]["executed"]


def test_show_after_settling_says_who_and_why(cli, in_doubt):
    r = cli("settle", "--task", in_doubt, "--outcome", "published", "--by", "bob", "--reason", "seen it")
    assert r.code == 0, r.err
    r = cli("show", "--task", in_doubt)
    assert "published (settled by bob, reason 'seen it')" in r.out and "\nnext:" not in r.out
    (e,) = json.loads(cli("show", "--task", in_doubt, "--json").out)["effects"]
    assert (e["state"], e["settled_by"], e["settle_reason"]) == ("published", "bob", "seen it")


def test_show_of_a_published_effect_gives_the_publication_id(cli, tmp_path, monkeypatch):
    url, stop = start_in_thread(tmp_path / "svc2", token=TOKEN)
    try:
        monkeypatch.setenv("HITL_PUBLISH_URL", url)
        monkeypatch.setenv("HITL_PUBLISH_TOKEN", TOKEN)
        assert cli("start", "--key", "p1", "--draft", "x").code == 0
        assert cli("resume", "--task", "p1", "--decision", "approve", "--by", "ann").code == 0
        j = json.loads(cli("show", "--task", "p1", "--json").out)
        (e,) = j["effects"]
        assert e["state"] == "published" and e["publication_id"].startswith("pub_")
        assert f"published as {e['publication_id']}" in cli("show", "--task", "p1").out
    finally:
        stop()


def test_show_of_a_local_task_has_no_effect_keys(cli):
    assert cli("start", "--key", "l1", "--draft", "x").code == 0
    j = json.loads(cli("show", "--task", "l1", "--json").out)
    assert "effects" not in j and "service" not in j
    assert "effect" not in cli("show", "--task", "l1").out


def test_list_status_in_doubt_keeps_only_the_task_in_doubt(cli, in_doubt):
    assert cli("start", "--key", "w1", "--draft", "y").code == 0
    r = cli("list", "--status", "in_doubt")
    assert r.code == 0, r.err
    assert r.out.split()[:2] == ["in_doubt", "n1"] and "w1" not in r.out
    assert [t["task_id"] for t in json.loads(cli("list", "--status", "in_doubt", "--json").out)["tasks"]] == ["n1"]
    assert "n1" not in cli("list", "--status", "waiting_for_approval").out


def test_the_inbox_shows_the_in_doubt_badge_and_the_settle_command_it_does_not_run(in_doubt, state_dir):
    client = _client(state_dir)
    _login(client)
    page = client.get("/?status=in_doubt")
    assert page.status_code == 200 and 'class="badge effect-in_doubt">in doubt</span>' in page.text
    assert "Notes &lt;b&gt;" in page.text and "Notes <b>" not in page.text  # escaped
    task = client.get(f"/task/{in_doubt}")
    seen = _visible(task.text)
    assert task.status_code == 200 and "in_doubt" in seen and "This inbox does not settle it." in seen
    # the attempt's window is open: wait, never "look now"
    assert "if not, a request may still reach it and act until" in seen and "wait until then and look again" in seen
    assert "python run.py settle --task n1 --call call_" in seen and "--outcome published --by NAME" in seen
    assert 'class="decide"' not in task.text  # no Approve button for a call that may have happened


def test_the_inbox_badge_of_a_published_effect_names_the_publication(cli, in_doubt, state_dir, service):
    assert cli("settle", "--task", in_doubt, "--outcome", "published", "--by", "bob").code == 0
    client = _client(state_dir)
    _login(client)
    page = client.get("/?status=all")
    assert 'class="badge effect-published">published</span>' in page.text
    assert _publications(service[1]) == 1  # counted at the service: the lost answer was one publication


def test_the_inboxs_default_list_holds_a_task_in_doubt(in_doubt, state_dir):
    """The inbox opens on the tasks a person must act on: a call in doubt is one of them."""
    client = _client(state_dir)
    _login(client)
    page = client.get("/")
    assert page.status_code == 200 and f"/task/{in_doubt}" in page.text
    assert 'class="badge effect-in_doubt">in doubt</span>' in page.text
