"""Races between real processes: exactly once, nothing lost, no file corrupted, no lock forever.

Processes are forked from a warmed interpreter and released together through one pipe
(tests/forking.py); without fork they are plain subprocesses started back to back.
``HITL_RACE_REPEAT=N`` repeats each race N times (default 1), each on a fresh state dir.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import ledger_entries, snapshot
from forking import in_process, run_cli, spawn, spawn_together, step

REPEAT = int(os.environ.get("HITL_RACE_REPEAT", "1"))
N = 8


def _start(state_dir: Path, key: str) -> None:
    r = step(state_dir, "start", "--key", key, "--title", "T", "--draft", f"Draft {key}.")
    assert r.code == 0, r.err


def _assert_clear(result, status: str | None) -> None:
    """Exit 0 with the task printed, or exit 1 with exactly one STOPPED line and no traceback."""
    assert result.code in (0, 1), (result.code, result.err)
    assert "Traceback" not in result.err
    if result.code == 0:
        assert result.err == "", result.err
        if status is not None:
            assert json.loads(result.out)["status"] == status
    else:
        lines = [x for x in result.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("STOPPED: "), result.err
        assert result.out == ""


def _assert_sound(state_dir: Path) -> None:
    """Every file parses and verifies, nothing half-written is left, doctor agrees."""
    from state.files.store import Store
    from state.files.ledger import Ledger

    store = Store(state_dir)
    for task_id in store.task_ids():  # raises on any corrupted or unverifiable checkpoint
        store.load(task_id)
    Ledger(store.ledger_dir).entries()  # raises on any corrupted entry
    assert not list(state_dir.rglob(".tmp-*"))
    report = in_process(state_dir, "doctor", "--json")
    assert report.code == 0 and report.json()["consistent"], report.out + report.err


@pytest.mark.parametrize("rep", range(REPEAT))
def test_eight_processes_approve_the_same_task_once(tmp_path, rep):
    state_dir = tmp_path / "s"
    _start(state_dir, "race-1")
    procs = spawn_together([(state_dir, ["resume", "--task", "race-1", "--decision", "approve",
                                         "--json"])] * N)
    results = [p.wait() for p in procs]
    for r in results:
        _assert_clear(r, "completed")
    assert any(r.code == 0 for r in results)
    entries = ledger_entries(state_dir)
    assert len(entries) == 1 and entries[0]["idempotency_key"] == "race-1"
    _assert_sound(state_dir)
    print(f"\nrace same task rep {rep}: exit codes {sorted(r.code for r in results)}")


@pytest.mark.parametrize("rep", range(REPEAT))
def test_approvers_and_rejecters_race_one_decision_wins(tmp_path, rep):
    state_dir = tmp_path / "s"
    _start(state_dir, "race-2")
    jobs = [(state_dir, ["resume", "--task", "race-2", "--decision",
                         "approve" if i % 2 == 0 else "reject", "--json"]) for i in range(N)]
    results = [p.wait() for p in spawn_together(jobs)]
    for r in results:
        _assert_clear(r, None)
    status = in_process(state_dir, "status", "--task", "race-2", "--json").json()["status"]
    assert status in ("completed", "cancelled")
    assert len(ledger_entries(state_dir)) == (1 if status == "completed" else 0)
    losers = [r for (sd, args), r in zip(jobs, results)
              if (args[4] == "approve") != (status == "completed")]
    assert all(r.code == 1 for r in losers), "a losing decision must be refused, not applied"
    _assert_sound(state_dir)
    print(f"\nrace approve/reject rep {rep}: {status}, exit codes {sorted(r.code for r in results)}")


@pytest.mark.parametrize("rep", range(REPEAT))
def test_eight_tasks_approved_at_once_none_lost(tmp_path, rep):
    state_dir = tmp_path / "s"
    keys = [f"many-{i}" for i in range(N)]
    for key in keys:
        _start(state_dir, key)
    jobs = [(state_dir, ["resume", "--task", k, "--decision", "approve", "--json"]) for k in keys]
    results = [p.wait() for p in spawn_together(jobs)]
    for r in results:
        assert r.code == 0, r.err
        _assert_clear(r, "completed")
    assert sorted(e["idempotency_key"] for e in ledger_entries(state_dir)) == sorted(keys)
    _assert_sound(state_dir)


@pytest.mark.parametrize("rep", range(REPEAT))
def test_eight_starts_on_a_fresh_state_dir_share_one_signing_key(tmp_path, rep):
    state_dir = tmp_path / "s"
    jobs = [(state_dir, ["start", "--key", f"first-{i}", "--draft", "d", "--json"]) for i in range(N)]
    results = [p.wait() for p in spawn_together(jobs)]
    for r in results:
        assert r.code == 0, r.err
    assert len((state_dir / "signing.key").read_text(encoding="ascii").strip()) == 64
    _assert_sound(state_dir)


def _wait_for(path: Path, text: str, proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(encoding="utf-8").split():
            return
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"the holder never reached {text}")


@pytest.mark.parametrize("point", ["checkpoint:decision:after", "ledger:record:after"])
def test_lock_of_a_killed_holder_does_not_block(tmp_path, point):
    """A resume hangs mid-write holding the task lock. A second resume waits a bounded time and
    stops with a clear line, changing nothing. Then the holder is killed with kill -9: the next
    resume proceeds at once and completes with exactly one ledger entry."""
    state_dir = tmp_path / "s"
    _start(state_dir, "held-1")
    log = tmp_path / "fp.log"
    holder = spawn(state_dir, "resume", "--task", "held-1", "--decision", "approve",
                   env={"HITL_FAILPOINT": point, "HITL_FAILPOINT_ACTION": "hang",
                        "HITL_FAILPOINT_LOG": str(log)})
    try:
        _wait_for(log, point, holder)
        before = snapshot(state_dir)
        blocked = run_cli(state_dir, "resume", "--task", "held-1", "--decision", "approve",
                          env={"HITL_LOCK_TIMEOUT": "0.3"})
        _assert_clear(blocked, None)
        assert blocked.code == 1 and "being worked on by another process" in blocked.err
        assert snapshot(state_dir) == before
        status = in_process(state_dir, "status", "--task", "held-1", "--json")  # reads need no lock
        assert status.code == 0
    finally:
        holder.kill()
    assert holder.wait().code != 0
    after = step(state_dir, "resume", "--task", "held-1", "--decision", "approve", "--json")
    assert after.code == 0, after.err
    assert after.json()["status"] == "completed"
    assert len(ledger_entries(state_dir)) == 1
    _assert_sound(state_dir)
