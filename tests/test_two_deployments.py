"""Two deployments with different signing keys on one store: the second is refused on first
contact, before it writes, with a message that names the cause; and ``list`` lists what verifies
while naming, in one ``STOPPED:`` line, every checkpoint it could not verify (never a silent
partial list). On PostgreSQL the database records its key's fingerprint (``key_fingerprint``);
on files, a new task's key must have signed one of the checkpoints already there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import checkpoint_file, snapshot
from forking import HAS_FORK, run_cli, spawn

KEY_A = {"HITL_SIGNING_KEY": "deployment-a-signing-key-0123456789"}
KEY_B = {"HITL_SIGNING_KEY": "deployment-b-signing-key-9876543210"}
ANOTHER_KEY = "is signed with another signing key"


def _rows(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _pg(state: Path, url: str, env: dict[str, str], *args: str):
    return run_cli(state, "--store", url, *args, env=env)


def _one_stopped_line(r) -> str:
    assert r.code == 1 and "Traceback" not in r.err, (r.code, r.out, r.err)
    lines = [x for x in r.err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("STOPPED: "), r.err
    return lines[0]


def test_a_second_deployment_with_another_key_is_refused_before_it_writes(pg_url, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert _pg(a, pg_url, KEY_A, "start", "--key", "a-1", "--draft", "From A.").code == 0
    before = _rows(pg_url, "SELECT task_id, revision, mac FROM checkpoints")
    history = _rows(pg_url, "SELECT count(*) FROM history")
    for args in (("start", "--key", "b-1", "--draft", "From B."), ("list",),
                 ("status", "--task", "a-1"), ("resume", "--task", "a-1", "--decision", "approve")):
        line = _one_stopped_line(_pg(b, pg_url, KEY_B, *args))
        assert ANOTHER_KEY in line and "HITL_SIGNING_KEY" in line, (args, line)
        assert KEY_B["HITL_SIGNING_KEY"] not in line and KEY_A["HITL_SIGNING_KEY"] not in line
    assert _rows(pg_url, "SELECT task_id, revision, mac FROM checkpoints") == before
    assert _rows(pg_url, "SELECT count(*) FROM history") == history
    assert _rows(pg_url, "SELECT count(*) FROM ledger") == [(0,)]
    r = _pg(a, pg_url, KEY_A, "list", "--json")  # the first deployment goes on as before
    assert r.code == 0 and [t["task_id"] for t in json.loads(r.out)["tasks"]] == ["a-1"]


def test_the_fingerprint_names_the_key_without_holding_it(pg_url, tmp_path):
    from state.integrity import key_fingerprint

    assert _pg(tmp_path / "a", pg_url, KEY_A, "start", "--key", "a-1", "--draft", "x").code == 0
    [(stored,)] = _rows(pg_url, "SELECT fingerprint FROM key_fingerprint")
    key = KEY_A["HITL_SIGNING_KEY"].encode()
    assert stored == key_fingerprint(key) != key_fingerprint(KEY_B["HITL_SIGNING_KEY"].encode())
    assert key.hex() not in stored and KEY_A["HITL_SIGNING_KEY"] not in stored


def test_a_checkpoint_row_copied_into_another_database_with_the_same_key_is_refused(pg_server, pg_url, tmp_path):
    """Two databases, one ``HITL_SIGNING_KEY`` (the MAC verifies in either, and the key's
    fingerprint is the same): a checkpoint row copied from one into the other is bound to its
    database by the state ID in its signed envelope, so it is refused there, nothing published,
    and the task is still approved once in its own database."""
    from conftest import fresh_schema_url

    other = fresh_schema_url(pg_server)
    a, b = tmp_path / "a", tmp_path / "b"
    assert _pg(a, pg_url, KEY_A, "start", "--key", "t-1", "--draft", "Once.").code == 0
    assert _pg(b, other, KEY_A, "start", "--key", "b-1", "--draft", "Its own.").code == 0
    [row] = _rows(pg_url, "SELECT task_id, revision, status, mac, envelope FROM checkpoints WHERE task_id = 't-1'")
    _rows(other, "INSERT INTO checkpoints (task_id, revision, status, mac, envelope) VALUES (%s, %s, %s, %s, %s)",
          row)
    for args in (("status", "--task", "t-1"), ("resume", "--task", "t-1", "--decision", "approve")):
        line = _one_stopped_line(_pg(b, other, KEY_A, *args))
        assert "belongs to another store" in line, (args, line)
    assert _rows(other, "SELECT count(*) FROM ledger") == [(0,)]
    assert _rows(other, "SELECT revision, mac FROM checkpoints WHERE task_id = 't-1'") == [(row[1], row[3])]
    r = _pg(a, pg_url, KEY_A, "resume", "--task", "t-1", "--decision", "approve", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "completed", r.err
    assert _rows(pg_url, "SELECT count(*) FROM ledger") == [(1,)]


def test_two_deployments_racing_on_an_empty_database_one_key_wins(pg_url, tmp_path):
    """Two processes per key start tasks at once on an empty database: one key's fingerprint is
    recorded, every checkpoint written is signed with it, the other key's processes are refused."""
    argv = []
    for n, env in enumerate((KEY_A, KEY_B, KEY_A, KEY_B)):
        argv.append((tmp_path / f"h{n}", ["--store", pg_url, "start", "--key", f"race-{n}",
                                          "--draft", "x"], env))
    import os

    gate, release = os.pipe()  # as forking.spawn_together, with an environment per process
    try:
        procs = [spawn(sd, *args, env=env, gate=gate if HAS_FORK else None) for sd, args, env in argv]
        os.write(release, b"x" * len(procs))
    finally:
        os.close(release)
        os.close(gate)
    results = [p.wait() for p in procs]
    [(stored,)] = _rows(pg_url, "SELECT fingerprint FROM key_fingerprint")
    from state.integrity import key_fingerprint

    winner = KEY_A if stored == key_fingerprint(KEY_A["HITL_SIGNING_KEY"].encode()) else KEY_B
    for (_, _, env), r in zip(argv, results):
        if env is winner:
            assert r.code == 0, r.err
        else:
            assert ANOTHER_KEY in _one_stopped_line(r) or "none of the" in r.err, r.err
    written = {t for (t,) in _rows(pg_url, "SELECT task_id FROM checkpoints")}
    assert written == {f"race-{n}" for n, (_, _, env) in enumerate(argv) if env is winner}


def test_a_database_from_before_fingerprints_is_adopted_only_by_its_own_key(pg_url, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert _pg(a, pg_url, KEY_A, "start", "--key", "a-1", "--draft", "x").code == 0
    _rows(pg_url, "DELETE FROM key_fingerprint")  # as a database left by the program before
    from state.postgres import store as postgres
    postgres._migrated.clear()
    line = _one_stopped_line(_pg(b, pg_url, KEY_B, "start", "--key", "b-1", "--draft", "x"))
    assert "none of the 1 checkpoints" in line and "HITL_SIGNING_KEY" in line
    assert _rows(pg_url, "SELECT count(*) FROM key_fingerprint") == [(0,)]
    assert _rows(pg_url, "SELECT task_id FROM checkpoints") == [("a-1",)]
    assert _pg(a, pg_url, KEY_A, "start", "--key", "a-2", "--draft", "x").code == 0
    assert _rows(pg_url, "SELECT count(*) FROM key_fingerprint") == [(1,)]


def test_list_on_postgresql_shows_what_verifies_and_names_what_does_not(pg_url, tmp_path):
    """A row signed with another key (written before fingerprints existed, or edited) no longer
    stops the whole listing: the rest is listed, and that row is the one STOPPED line."""
    a = tmp_path / "a"
    for key in ("a-1", "a-2", "a-3"):
        assert _pg(a, pg_url, KEY_A, "start", "--key", key, "--draft", "x").code == 0
    [(envelope,)] = _rows(pg_url, "SELECT envelope FROM checkpoints WHERE task_id = 'a-2'")
    edited = envelope.replace('"title": "Untitled draft"', '"title": "Edited draft"')
    assert edited != envelope
    _rows(pg_url, "UPDATE checkpoints SET envelope = %s WHERE task_id = 'a-2'", (edited,))
    r = _pg(a, pg_url, KEY_A, "list")
    line = _one_stopped_line(r)
    assert "a-1" in r.out and "a-3" in r.out and "a-2" not in r.out
    assert "1 checkpoint is not listed" in line and "integrity check failed for task 'a-2'" in line
    view = json.loads(_pg(a, pg_url, KEY_A, "list", "--json").out)
    assert [t["task_id"] for t in view["tasks"]] == ["a-1", "a-3"]
    assert [u["file"].rsplit("/", 1)[-1] for u in view["unverified"]] == ["a-2"]
    r = _pg(a, pg_url, KEY_A, "status", "--task", "a-2")  # the row itself still stops
    assert "integrity check failed" in _one_stopped_line(r)


def test_list_on_files_shows_what_verifies_and_names_what_does_not(cli, state_dir):
    for key in ("f-1", "f-2"):
        assert cli("start", "--key", key, "--draft", "x").code == 0
    path = checkpoint_file(state_dir, "f-2")
    raw = path.read_text(encoding="utf-8")
    path.write_text(raw.replace('"title": "Untitled draft"', '"title": "Edited draft"'), encoding="utf-8")
    before = snapshot(state_dir)
    r = cli("list")
    line = _one_stopped_line(r)
    assert "f-1" in r.out and "f-2" not in r.out
    assert "1 checkpoint is not listed" in line and f"integrity check failed for {path.parent.name}/{path.name}" in line
    assert snapshot(state_dir) == before


def test_list_with_nothing_verified_is_just_the_stopped_line(cli, state_dir):
    assert cli("start", "--key", "f-1", "--draft", "x").code == 0
    path = checkpoint_file(state_dir, "f-1")
    path.write_text(path.read_text(encoding="utf-8").replace('"title": "Untitled draft"',
                                                             '"title": "Edited"'), encoding="utf-8")
    r = cli("list")
    r.assert_stopped()
    assert "integrity check failed" in r.err


def test_a_second_key_on_one_state_dir_is_refused_before_it_writes(cli, state_dir, monkeypatch):
    monkeypatch.setenv("HITL_SIGNING_KEY", KEY_A["HITL_SIGNING_KEY"])
    assert cli("start", "--key", "f-1", "--draft", "x").code == 0
    before = snapshot(state_dir)
    monkeypatch.setenv("HITL_SIGNING_KEY", KEY_B["HITL_SIGNING_KEY"])
    r = cli("start", "--key", "f-2", "--draft", "x")
    r.assert_stopped()
    assert "none of the 1 checkpoints" in r.err and "is signed with this HITL_SIGNING_KEY" in r.err
    assert snapshot(state_dir) == before
    monkeypatch.setenv("HITL_SIGNING_KEY", KEY_A["HITL_SIGNING_KEY"])
    assert cli("start", "--key", "f-2", "--draft", "x").code == 0
    assert cli("list").code == 0


@pytest.mark.parametrize("env", [KEY_A, {}])
def test_the_own_key_starts_tasks_as_before(cli, state_dir, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for key in ("o-1", "o-2"):
        assert cli("start", "--key", key, "--draft", "x").code == 0
    assert cli("list").code == 0


def test_review_walks_what_verifies_and_says_what_it_could_not(cli, state_dir):
    from workflow.review.inbox import review
    from state.store import FileStore

    for key in ("r-1", "r-2"):
        assert cli("start", "--key", key, "--draft", "x").code == 0
    path = checkpoint_file(state_dir, "r-2")
    path.write_text(path.read_text(encoding="utf-8").replace('"title": "Untitled draft"',
                                                             '"title": "Edited"'), encoding="utf-8")
    said: list[str] = []
    done = review(FileStore(state_dir), ask=lambda prompt: "s", say=said.append,
                  decide=lambda *a: pytest.fail("nothing is decided"))
    assert said[0].startswith("NOTE: 1 checkpoint is not listed") and path.name in said[0]
    assert [r["task_id"] for r in done["reviewed"]] == ["r-1"]


def test_the_browser_inbox_lists_what_verifies_and_says_what_it_could_not(cli, state_dir):
    """The inbox page, like ``list``: a checkpoint that does not verify no longer turns the whole
    page into an error; the others are listed under one STOPPED line naming it."""
    from tests.test_web import _client, _login

    for key in ("w-1", "w-2"):
        assert cli("start", "--key", key, "--draft", "x").code == 0
    client = _client(state_dir)
    _login(client)
    assert 'data-task="w-2"' in client.get("/").text
    path = checkpoint_file(state_dir, "w-2")
    path.write_text(path.read_text(encoding="utf-8").replace('"title": "Untitled draft"',
                                                             '"title": "Edited"'), encoding="utf-8")
    r = client.get("/")
    assert r.status_code == 200 and 'data-task="w-1"' in r.text and 'data-task="w-2"' not in r.text
    assert "STOPPED: 1 checkpoint is not listed" in r.text and path.name in r.text
