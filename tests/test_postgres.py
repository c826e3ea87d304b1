"""The PostgreSQL store across real processes and "hosts": exactly once, one decision, crash recovery,
schema upgrades, the same output as the file store, and the URL's password kept out of everything.

A "host" is a state dir of its own (its traces; the signing key comes from ``HITL_SIGNING_KEY``,
the same on every host, as docs/postgres.md says); every host shares one database (a fresh schema
of the session's throwaway server, tests/conftest.py). Processes are forked from a warmed
interpreter and released together (tests/forking.py). Host A names the store with ``--store``,
host B with ``HITL_STORE_URL``, so both ways are exercised.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest

from forking import in_process, run_cli, spawn, spawn_together
from state.revisions import every_checkpoint

SIGNING = {"HITL_SIGNING_KEY": "pg-tests-signing-key-0123456789abcdef"}


def _host_args(host: str, url: str, state_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(extra argv, env) for a command on ``host`` ("A": ``--store``, "B": ``HITL_STORE_URL``)."""
    if host == "A":
        return ["--store", url], dict(SIGNING)
    return [], {**SIGNING, "HITL_STORE_URL": url}


def _cli(state_dir: Path, url: str, *args: str, host: str = "A", env: dict[str, str] | None = None):
    extra, base_env = _host_args(host, url, state_dir)
    return run_cli(state_dir, *extra, *args, env={**base_env, **(env or {})})


def _rows(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def _start(state_dir: Path, url: str, key: str, host: str = "A") -> None:
    r = _cli(state_dir, url, "start", "--key", key, "--title", "T", "--draft", f"Draft {key}.",
             host=host)
    assert r.code == 0, r.err


def _assert_clear(result) -> None:
    """Exit 0 with the task printed, or exit 1 with exactly one STOPPED line and no traceback."""
    assert result.code in (0, 1), (result.code, result.out, result.err)
    assert "Traceback" not in result.err
    if result.code == 1:
        lines = [x for x in result.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("STOPPED: "), result.err


def _doctor(state_dir: Path, url: str) -> dict:
    import os

    os.environ.update(SIGNING)
    try:
        r = in_process(state_dir, "--store", url, "doctor", "--json")
    finally:
        for name in SIGNING:
            os.environ.pop(name, None)
    return r.json()


def _password(url: str) -> str:
    from state.settings import url_password

    found = url_password(url)
    assert found and len(found) >= 16
    return found


def _assert_no_password(url: str, *folders: Path, outputs: tuple = ()) -> None:
    """The URL's password is in no file of ``folders``, no row of the database, no output."""
    password = _password(url)
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                assert password.encode() not in path.read_bytes(), path
    for table in ("checkpoints", "history", "ledger", "rejections", "effect_intents", "effect_settlements",
                  "schema_migrations"):
        dump = json.dumps(_rows(url, f"SELECT * FROM {table}"), default=str)
        assert password not in dump, table
    for r in outputs:
        assert password not in r.out + r.err


def test_eight_processes_on_two_hosts_approve_one_task_once(pg_url, tmp_path):
    hosts = {"A": tmp_path / "host-a", "B": tmp_path / "host-b"}
    _start(hosts["A"], pg_url, "pg-race-1")
    jobs = []
    for n in range(8):
        host = "AB"[n % 2]
        extra, _ = _host_args(host, pg_url, hosts[host])
        jobs.append((hosts[host], [*extra, "resume", "--task", "pg-race-1", "--decision", "approve",
                                   "--by", f"reviewer-{n}", "--json"]))
    # spawn_together takes one env for all: host B's variable is harmless to host A (--store wins)
    procs = spawn_together(jobs, env={**SIGNING, "HITL_STORE_URL": pg_url})
    results = [p.wait() for p in procs]
    for r in results:
        _assert_clear(r)
        if r.code == 0:
            assert json.loads(r.out)["status"] == "completed"
    assert sum(r.code == 0 for r in results) >= 1
    assert _rows(pg_url, "SELECT idempotency_key FROM ledger") == [("pg-race-1",)]
    assert _rows(pg_url, "SELECT status, revision FROM checkpoints") == [("completed", 3)]
    report = _doctor(hosts["A"], pg_url)
    assert report["consistent"], report
    # traces stay on the host that ran: exactly one resumed run, in one host's state dir
    runs = [rec for sd in hosts.values() for path in sd.glob("traces/*.jsonl")
            for rec in map(json.loads, path.read_text(encoding="utf-8").splitlines())
            if rec.get("kind") == "run" and rec.get("phase") == "resume"]
    assert len(runs) == 1, runs
    # nothing on either host or in the database holds the password
    _assert_no_password(pg_url, *hosts.values(), outputs=tuple(results))


def test_four_approvers_against_four_rejecters_one_decision_wins(pg_url, tmp_path):
    hosts = {"A": tmp_path / "host-a", "B": tmp_path / "host-b"}
    _start(hosts["A"], pg_url, "pg-race-2")
    jobs = []
    for n in range(8):
        host, decision = "AB"[n % 2], ("approve", "reject")[n // 4]
        extra, _ = _host_args(host, pg_url, hosts[host])
        jobs.append((hosts[host], [*extra, "resume", "--task", "pg-race-2", "--decision", decision,
                                   "--by", f"{decision}-{n}", "--reason", "r", "--json"]))
    results = [p.wait() for p in spawn_together(jobs, env={**SIGNING, "HITL_STORE_URL": pg_url})]
    final = _rows(pg_url, "SELECT status FROM checkpoints")[0][0]
    assert final in ("completed", "cancelled")
    winner = "approve" if final == "completed" else "reject"
    for (_, argv), r in zip(jobs, results):
        _assert_clear(r)
        mine = argv[argv.index("--decision") + 1]
        if r.code == 0:  # only the winning decision (or its repeats) ends well
            assert mine == winner and json.loads(r.out)["status"] == final, (argv, r.out)
    entries = _rows(pg_url, "SELECT idempotency_key FROM ledger")
    rejected = _rows(pg_url, "SELECT task_id FROM rejections")
    assert (entries, rejected) == (([("pg-race-2",)], []) if final == "completed"
                                   else ([], [("pg-race-2",)]))
    assert _doctor(hosts["A"], pg_url)["consistent"]


# -- kill -9 between every pair of statements --------------------------------------------------------

EXPECT = {"approve": ("completed", 1), "reject": ("cancelled", 0)}


def _resume(decision: str) -> list[str]:
    return ["resume", "--task", "{key}", "--decision", decision, "--by", "ops", "--reason", "r",
            "--json"]


def _points(state_dir: Path, url: str, decision: str, log: Path) -> list[str]:
    """Every failpoint a resume with ``decision`` passes on PostgreSQL, in order (enumerated)."""
    _start(state_dir, url, f"enum-{decision}")
    argv = [a.replace("{key}", f"enum-{decision}") for a in _resume(decision)]
    r = _cli(state_dir, url, *argv, env={"HITL_FAILPOINT_LOG": str(log)})
    assert r.code == 0, r.err
    names = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
    return names


def _kill_at(state_dir: Path, url: str, argv: list[str], point: str, log: Path) -> None:
    """Run ``argv`` until it reaches ``point`` (it hangs there), then ``kill -9`` it."""
    log.unlink(missing_ok=True)
    extra, env = _host_args("A", url, state_dir)
    proc = spawn(state_dir, *extra, *argv, env={**env, "HITL_FAILPOINT": point,
                                                "HITL_FAILPOINT_ACTION": "hang",
                                                "HITL_FAILPOINT_LOG": str(log)})
    deadline = time.monotonic() + 120
    while point not in (log.read_text(encoding="utf-8").split() if log.exists() else []):
        assert time.monotonic() < deadline, f"{point} never reached"
        time.sleep(0.02)
    proc.kill()
    assert proc.wait().code == -9


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_kill_9_between_every_pair_of_statements_then_resume_ends_exactly_once(pg_url, tmp_path,
                                                                                decision):
    state_dir, log = tmp_path / "host", tmp_path / "fp.log"
    points = _points(state_dir, pg_url, decision, log)
    must = {"checkpoint:decision:before", "checkpoint:decision:uncommitted",
            "checkpoint:decision:after", "checkpoint:outcome:before",
            "checkpoint:outcome:uncommitted", "checkpoint:outcome:after"}
    must |= ({"ledger:record:before", "ledger:record:after"} if decision == "approve"
             else {"rejection:record:before", "rejection:record:after"})
    assert must <= set(points), points
    status, n_entries = EXPECT[decision]
    for n, point in enumerate(points):
        key = f"crash-{n}"
        _start(state_dir, pg_url, key)
        argv = [a.replace("{key}", key) for a in _resume(decision)]
        _kill_at(state_dir, pg_url, argv, point, log)
        r = _cli(state_dir, pg_url, *argv)
        assert r.code == 0, f"{point}: {r.err}"
        assert json.loads(r.out)["status"] == status, point
        entries = _rows(pg_url, f"SELECT count(*) FROM ledger WHERE idempotency_key = '{key}'")
        assert entries == [(n_entries,)], point
        again = _cli(state_dir, pg_url, *argv)
        assert again.code == 0 and json.loads(again.out) == json.loads(r.out), point
    assert _doctor(state_dir, pg_url)["consistent"]


# -- schema versions -----------------------------------------------------------------------------------


def test_a_version_1_database_with_tasks_in_every_status_upgrades_to_the_current(pg_url, tmp_path,
                                                                                 monkeypatch):
    from state import clock
    from agent import application
    from workflow.review import inbox
    from state.postgres.store import PostgresStore, latest_version

    for name, value in SIGNING.items():
        monkeypatch.setenv(name, value)
    # The tasks are written by today's code, then the tables are put back in their version-1
    # shape (what the program of version 1 created and wrote: no ledger channel/approval, one
    # rejection record per task), as a database left by that program would be.
    old = PostgresStore(pg_url, tmp_path / "old")

    def start(key: str, **kw):
        return asyncio.run(application.start(old, task_id=key, title="T", draft=f"Draft {key}.", **kw))

    def resume(key: str, decision: str, **kw):
        return asyncio.run(application.resume(old, task_id=key, decision=decision, by="ops", reason="r", **kw))

    start("v1-waiting")
    start("v1-completed"), resume("v1-completed", "approve")
    start("v1-cancelled"), resume("v1-cancelled", "reject")
    start("v1-budget"), resume("v1-budget", "approve", budget_changes={"max_turns": 1})
    start("v1-expired", expires_in_s=60)
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=1)))
    assert inbox.expire_overdue(old, "v1-expired") == (["v1-expired"], [])
    monkeypatch.delenv("HITL_NOW")
    before = {cp.task_id: cp for cp in every_checkpoint(old)}
    assert {cp.status for cp in before.values()} == {"waiting_for_approval", "completed",
                                                     "cancelled", "budget_exceeded", "expired"}
    old.close()
    for sql in ("DROP TABLE notify_progress",
                "DROP TABLE policies", "DROP TABLE reviewer_revocations", "DROP TABLE reviewer_lists",
                "ALTER TABLE ledger DROP COLUMN envelope", "ALTER TABLE rejections DROP COLUMN envelope",
                "DROP TABLE reviewers", "DROP TABLE effect_settlements", "DROP TABLE effect_intents",
                "ALTER TABLE ledger DROP COLUMN settled_by, DROP COLUMN settle_reason",
                "DROP TABLE key_fingerprint",
                "DROP INDEX rejections_by_task_channel", "ALTER TABLE rejections DROP COLUMN channel",
                "ALTER TABLE rejections ADD PRIMARY KEY (task_id)",
                "ALTER TABLE ledger DROP COLUMN result",
                "ALTER TABLE ledger DROP COLUMN approval", "ALTER TABLE ledger DROP COLUMN channel",
                "DROP INDEX checkpoints_by_status", "DELETE FROM schema_migrations WHERE version > 1"):
        _rows(pg_url, sql)
    assert _rows(pg_url, "SELECT version FROM schema_migrations") == [(1,)]
    from state.postgres import store as postgres
    postgres._migrated.clear()  # a new program starts: it has not looked at this database yet

    new = PostgresStore(pg_url, tmp_path / "new")
    assert every_checkpoint(new) == list(before.values())  # every task, verified, unchanged
    assert _rows(pg_url, "SELECT version FROM schema_migrations ORDER BY version") == [
        (v,) for v in range(1, latest_version() + 1)]
    assert _rows(pg_url, "SELECT idempotency_key, channel FROM ledger") == [("v1-completed", None)]
    # the records that program wrote carry no signature: never trusted silently, named by doctor,
    # and signed by doctor --repair, since each task's signed checkpoint proves them
    from state.errors import Refused
    from workflow.ops.doctor import doctor

    with pytest.raises(Refused, match="is not signed"):
        new.rejection_get("v1-cancelled")
    report = doctor(new)
    assert sorted((f["kind"], f["task_id"]) for f in report["findings"]) == [
        ("not_judged", "v1-cancelled"), ("not_judged", "v1-completed"),  # notes: judged once signed
        ("unsigned_record", "v1-cancelled"), ("unsigned_record", "v1-completed")], report
    assert report["inconsistencies"] == 2
    repaired = doctor(new, repair=True)
    assert [r["kind"] for r in repaired["repairs"]] == ["unsigned_record"] * 2 and repaired["consistent"], repaired
    assert new.rejection_get("v1-cancelled").by == "ops" and new.ledger_get("v1-completed") is not None
    # and the upgraded database goes on working: the waiting task is approved exactly once
    done = asyncio.run(application.resume(new, task_id="v1-waiting", decision="approve", by="ops"))
    assert done.status == "completed" and new.ledger_get("v1-waiting") is not None
    assert len(_rows(pg_url, "SELECT fingerprint FROM key_fingerprint")) == 1  # adopted by its key
    assert doctor(new)["consistent"]


def test_a_database_newer_than_the_program_is_refused(pg_url, tmp_path):
    from state.errors import Refused
    from state.postgres.store import PostgresStore, latest_version

    store = PostgresStore(pg_url, tmp_path / "s")
    assert store.exists("x") is False  # migrates
    _rows(pg_url, f"INSERT INTO schema_migrations (version, name) VALUES ({latest_version() + 1}, 'future')")
    with pytest.raises(Refused, match="upgrade the program"):
        PostgresStore(pg_url, tmp_path / "s", target_version=latest_version()).exists("x")


# -- the same output on either store -------------------------------------------------------------------


def _normal(value, where: str):
    """``value`` with what differs by nature between stores and runs blanked: locations, times,
    process IDs, durations, lock files (doctor counts the file store's)."""
    if isinstance(value, dict):
        return {k: ("<x>" if k in ("checkpoint_path", "path", "state_dir", "at", "published_at",
                                   "created_at", "updated_at", "expires_at", "waiting_since",
                                   "requested_at", "started_at", "ended_at", "pid", "age_s",
                                   "elapsed_s", "run_time_ms", "latency_ms", "final_output",
                                   "file", "records", "duration_ms",
                                   "lock_files")  # (the database keeps no lock files)
                     else _normal(v, where)) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v, where) for v in value]
    if isinstance(value, str):
        return re.sub(r"\d{4}-\d\d-\d\dT[0-9:.]+Z", "<time>", value)
    return value


def test_every_command_gives_the_same_output_on_either_store(pg_url, tmp_path):
    outputs = {}
    for kind in ("file", "postgres"):
        sd = tmp_path / kind
        extra = ["--store", pg_url] if kind == "postgres" else []
        env = dict(SIGNING)

        def cli(*args: str):
            r = run_cli(sd, *extra, *args, env=env)
            assert r.code in (0, 1), r.err
            return r

        cli("start", "--key", "same-1", "--title", "T", "--draft", "One.")
        cli("start", "--key", "same-2", "--title", "T", "--draft", "Two.")
        cli("start", "--key", "same-3", "--title", "T", "--draft", "Three.")
        cli("resume", "--task", "same-1", "--decision", "approve", "--by", "alice")
        cli("resume", "--task", "same-2", "--decision", "reject", "--by", "bob", "--reason", "no")
        seen = {}
        for args in (["status", "--task", "same-1"], ["list"], ["ledger"], ["show", "--task", "same-1"],
                     ["doctor"], ["resume", "--task", "same-2", "--decision", "approve"],
                     ["status", "--task", "nope"]):
            r = cli(*args, "--json") if args[0] != "resume" and args[-1] != "nope" else cli(*args)
            seen[" ".join(args)] = (r.code, _normal(r.json(), kind) if r.code == 0 else
                                    r.err.replace(str(sd), "<where>").replace(
                                        "postgresql://", "").split(" in ")[0])
        outputs[kind] = seen
    for command in outputs["file"]:
        a, b = outputs["file"][command], outputs["postgres"][command]
        assert json.dumps(a, indent=1, sort_keys=True) == json.dumps(b, indent=1, sort_keys=True), command


def test_a_wrong_password_is_one_line_that_never_shows_it(pg_url, tmp_path):
    from urllib.parse import quote

    password = _password(pg_url)
    wrong = pg_url.replace(quote(password, safe=""), "not-" + password[:8] + "-wrong")
    r = run_cli(tmp_path / "s", "--store", wrong, "list")
    _assert_clear(r)
    assert r.code == 1 and "password authentication failed" in r.err
    assert password[:8] not in r.err and "wrong" not in r.err
    assert not (tmp_path / "s").exists()  # nothing created on disk either


def test_the_longest_lock_timeout_works_on_postgresql(pg_url, tmp_path):
    """``HITL_LOCK_TIMEOUT`` at its maximum becomes a ``lock_timeout`` the server takes."""
    from state.settings import MAX_LOCK_TIMEOUT_S

    env = {"HITL_LOCK_TIMEOUT": str(MAX_LOCK_TIMEOUT_S)}
    state = tmp_path / "a"
    assert _cli(state, pg_url, "start", "--key", "lt-1", "--draft", "x", env=env).code == 0
    r = _cli(state, pg_url, "resume", "--task", "lt-1", "--decision", "approve", env=env)
    assert r.code == 0, r.err
    assert _rows(pg_url, "SELECT idempotency_key FROM ledger") == [("lt-1",)]


@pytest.mark.parametrize("value", ["3000000", "1e308"])
def test_a_lock_timeout_postgresql_cannot_take_is_refused_before_the_database(pg_url, tmp_path, value):
    """``3000000`` s is beyond ``lock_timeout``'s 32-bit milliseconds ("exceeds integer range"),
    ``1e308`` overflowed in the conversion: both are refused by name, nothing written anywhere."""
    state = tmp_path / "a"
    assert _cli(state, pg_url, "start", "--key", "lt-1", "--draft", "x").code == 0
    before = _rows(pg_url, "SELECT task_id, revision FROM checkpoints")
    r = _cli(state, pg_url, "resume", "--task", "lt-1", "--decision", "approve",
             env={"HITL_LOCK_TIMEOUT": value})
    _assert_clear(r)
    assert r.code == 1 and f"HITL_LOCK_TIMEOUT={value!r} is not a number of seconds" in r.err
    assert _rows(pg_url, "SELECT task_id, revision FROM checkpoints") == before
    assert _rows(pg_url, "SELECT count(*) FROM ledger") == [(0,)]


# -- signed records ----------------------------------------------------------------------------------


def test_rows_copied_whole_from_another_database_with_the_same_key_are_refused(pg_url, pg_server, tmp_path,
                                                                               monkeypatch):
    """Why: two databases (two deployments) may share ``HITL_SIGNING_KEY``; every ledger,
    rejection, intent and settlement row names its database's ``store_identity`` in its signed
    envelope, so a row copied whole (every column, the envelope included) from the other database
    verifies but is refused as another store's (``foreign_state``), and the task it would decide
    goes nowhere."""
    import psycopg

    from conftest import fresh_schema_url
    from state.conformance import _decision, _intent, _settlement
    from state.errors import Refused
    from state.postgres.store import PostgresStore

    for name, value in SIGNING.items():
        monkeypatch.setenv(name, value)
    other_url = fresh_schema_url(pg_server)
    ours, theirs = PostgresStore(pg_url, tmp_path / "a"), PostgresStore(other_url, tmp_path / "b")
    for store in (ours, theirs):
        store.ledger_record(key="t-1", task_id="t-1", action="publish_draft", title="T", content_sha256="a" * 64)
        store.rejection_record("t-1", "a" * 64, _decision())
        store.intent_record(_intent())
        store.settlement_record(_settlement())
    reads = {"effect_settlements": lambda: ours.settlement_get("t-1", 1),
             "effect_intents": lambda: ours.intent_get("t-1"),
             "ledger": lambda: ours.ledger_get("t-1"), "rejections": lambda: ours.rejection_get("t-1")}
    key = {"effect_settlements": "idempotency_key", "effect_intents": "idempotency_key", "ledger": "idempotency_key",
           "rejections": "task_id"}
    with psycopg.connect(other_url, autocommit=True) as src, psycopg.connect(pg_url, autocommit=True) as dst:
        for table, read in reads.items():
            good = read()
            cur = src.execute(f"SELECT * FROM {table} WHERE {key[table]} = 't-1'")
            columns, row = [d.name for d in cur.description], cur.fetchone()
            mine = dst.execute(f"SELECT * FROM {table} WHERE {key[table]} = 't-1'").fetchone()
            copy = f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in columns)} WHERE {key[table]} = 't-1'"
            dst.execute(copy, row)  # every column of their row (the same key: a settlement's intent stays)
            with pytest.raises(Refused, match="belongs to another state dir or store") as refused:
                read()
            assert refused.value.code == "foreign_state", table
            dst.execute(copy, mine)  # put back: it reads again
            assert read() == good, table
    ours.close(), theirs.close()


@pytest.mark.parametrize("envelope", ["[" * 100_000, '{"a": ' * 5_000 + "1" + "}" * 5_000])
def test_a_row_nested_too_deep_is_refused_naming_its_task_and_the_others_load(pg_url, tmp_path, envelope):
    """A checkpoint row whose envelope was set by hand to JSON nested deeper than a parser follows
    is refused as any row that does not verify (``integrity``, naming its task), never an
    unexpected ``RecursionError``: the other tasks still load, and the listing names the bad row."""
    from state.errors import Refused
    from state.postgres.store import PostgresStore
    from state.conformance import sample_body

    store = PostgresStore(pg_url, tmp_path / "state")
    store.save(sample_body("t-a"), failpoint="test")
    store.save(sample_body("t-b"), failpoint="test")
    with store._db() as conn:
        conn.execute("UPDATE checkpoints SET envelope = %s WHERE task_id = 't-b'", (envelope,))
    with pytest.raises(Refused) as refused:
        store.load("t-b")
    assert refused.value.code == "integrity" and "task 't-b'" in str(refused.value), refused.value
    assert "nested too deeply" in str(refused.value)
    with pytest.raises(Refused, match="t-b"):
        every_checkpoint(store)
    assert store.load("t-a").task_id == "t-a"
