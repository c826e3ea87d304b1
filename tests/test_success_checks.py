"""One named test per success check of the exercise (README, "Success checks map"): the floor every change keeps.

1. 没有人批准时，ledger 里不会出现任何记录      → test_check_no_approval_no_ledger_entry
2. reject 后状态是 cancelled，而且没有副作用        → test_check_reject_is_cancelled_without_effect
3. approve 后状态是 completed                       → test_check_approve_is_completed
4. 同一个 key resume 两次，ledger 仍只有一笔        → test_check_same_key_resumed_twice_one_entry
5. ledger 与 checkpoint 冲突时修复可证明的完成状态，或停止请人处理；不会把已执行的动作标成 cancelled
   → test_check_conflict_repairs_provable_completion, test_check_conflict_unprovable_stops,
     test_check_executed_action_never_cancelled
6. JSON 损坏或 key／action 不相符时，程序停止而不是猜测
   → test_check_corrupted_json_stops, test_check_key_mismatch_stops, test_check_action_mismatch_stops
"""

from __future__ import annotations


import pytest

from conftest import checkpoint_file, ledger_entries, plant_record, resign, restore_checkpoint, snapshot


def _start(cli, key="check-1", draft="Body text", title="T"):
    r = cli("start", "--key", key, "--title", title, "--draft", draft, "--json")
    assert r.code == 0, r.err
    return r.json()


def test_check_no_approval_no_ledger_entry(cli, state_dir):
    task = _start(cli)
    assert task["status"] == "waiting_for_approval"
    assert task["pending"][0]["tool"] == "publish_draft"
    assert task["pending"][0]["arguments"] == {"title": "T", "body": "Body text"}
    assert ledger_entries(state_dir) == []
    assert cli("ledger", "--json").json()["entries"] == []


def test_check_reject_is_cancelled_without_effect(cli, state_dir):
    _start(cli)
    task = cli("resume", "--task", "check-1", "--decision", "reject", "--reason", "No.", "--json").json()
    assert task["status"] == "cancelled"
    assert task["decision"]["decision"] == "rejected" and task["decision"]["reason"] == "No."
    assert ledger_entries(state_dir) == []


def test_check_approve_is_completed(cli, state_dir):
    _start(cli)
    task = cli("resume", "--task", "check-1", "--decision", "approve", "--by", "alice", "--json").json()
    assert task["status"] == "completed"
    assert task["decision"]["decision"] == "approved" and task["decision"]["by"] == "alice"
    assert task["pending"] == []
    entries = ledger_entries(state_dir)
    assert [(e["idempotency_key"], e["task_id"], e["title"]) for e in entries] == [("check-1", "check-1", "T")]


def test_check_same_key_resumed_twice_one_entry(cli, state_dir):
    _start(cli)
    first = cli("resume", "--task", "check-1", "--decision", "approve", "--json").json()
    before = snapshot(state_dir)
    second = cli("resume", "--task", "check-1", "--decision", "approve", "--json")
    assert second.code == 0
    assert second.json() == first
    assert len(ledger_entries(state_dir)) == 1
    assert snapshot(state_dir) == before  # unchanged: no new revision, no new entry


def test_check_same_saved_state_replayed_publishes_once(cli, state_dir):
    """The SDK runs an approved tool again if the same saved state is resumed twice; the ledger
    stops the second effect. Simulated by putting back the pre-approval checkpoint (a genuine file,
    as a restore from backup or a crash before the last write would leave it)."""
    _start(cli)
    path = checkpoint_file(state_dir, "check-1")
    saved = path.read_bytes()
    cli("resume", "--task", "check-1", "--decision", "approve")
    restore_checkpoint(state_dir, "check-1", saved)
    again = cli("resume", "--task", "check-1", "--decision", "approve", "--json")
    assert again.code == 0, again.err
    assert again.json()["status"] == "completed"
    assert '"already published"' in again.json()["final_output"]
    assert len(ledger_entries(state_dir)) == 1


class _Crash(BaseException):
    """Stands for the process dying at a failpoint (BaseException: nothing catches it)."""


def _crash_at(monkeypatch, name):
    from state import failpoints

    real = failpoints.hit

    def hit(point):
        real(point)
        if point == name:
            raise _Crash(point)

    monkeypatch.setattr(failpoints, "hit", hit)


def test_check_conflict_repairs_provable_completion(cli, state_dir, monkeypatch):
    """Ledger written, checkpoint not yet marked completed (crash between): the next resume
    completes it from the ledger, without a second entry."""
    _start(cli)
    _crash_at(monkeypatch, "checkpoint:outcome:before")
    with pytest.raises(_Crash):
        cli("resume", "--task", "check-1", "--decision", "approve")
    monkeypatch.undo()
    assert len(ledger_entries(state_dir)) == 1
    assert cli("status", "--task", "check-1", "--json").json()["status"] == "waiting_for_approval"
    # a reject now would mark an executed action cancelled: refused, nothing changes
    before = snapshot(state_dir)
    cli("resume", "--task", "check-1", "--decision", "reject").assert_stopped()
    assert snapshot(state_dir) == before
    done = cli("resume", "--task", "check-1", "--decision", "approve", "--json")
    assert done.code == 0 and done.json()["status"] == "completed"
    assert len(ledger_entries(state_dir)) == 1


def test_check_conflict_unprovable_stops(cli, state_dir):
    """Checkpoint says completed but the ledger has no entry: nothing proves what happened → stop."""
    _start(cli)
    cli("resume", "--task", "check-1", "--decision", "approve")
    for p in (state_dir / "ledger").glob("*.json"):
        p.unlink()
    before = snapshot(state_dir)
    r = cli("resume", "--task", "check-1", "--decision", "approve")
    r.assert_stopped()
    assert "ledger has no entry" in r.err
    assert snapshot(state_dir) == before


def test_check_executed_action_never_cancelled(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "check-1", "--decision", "approve")
    before = snapshot(state_dir)
    r = cli("resume", "--task", "check-1", "--decision", "reject", "--reason", "too late")
    r.assert_stopped()
    assert "never cancelled" in r.err
    assert cli("status", "--task", "check-1", "--json").json()["status"] == "completed"
    assert snapshot(state_dir) == before


def test_check_corrupted_json_stops(cli, state_dir):
    _start(cli)
    path = checkpoint_file(state_dir, "check-1")
    path.write_bytes(path.read_bytes()[:-40])
    before = snapshot(state_dir)
    for args in (("resume", "--task", "check-1", "--decision", "approve"), ("status", "--task", "check-1")):
        r = cli(*args)
        r.assert_stopped()
        assert "not valid JSON" in r.err
    assert snapshot(state_dir) == before
    assert ledger_entries(state_dir) == []


def test_check_corrupted_ledger_stops(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "check-1", "--decision", "approve")
    entry = next((state_dir / "ledger").glob("*.json"))
    entry.write_text('{"idempotency_key": "check-1", ', encoding="utf-8")
    before = snapshot(state_dir)
    for args in (("resume", "--task", "check-1", "--decision", "approve"), ("ledger",)):
        cli(*args).assert_stopped()
    assert snapshot(state_dir) == before


def test_check_key_mismatch_stops(cli, state_dir):
    """The ledger holds this key for other content: stop, never publish or overwrite."""
    _start(cli)
    plant_record(state_dir, "ledger_entry", {  # signed: the content check behind the signature
        "idempotency_key": "check-1", "task_id": "check-1", "action": "publish_draft", "title": "T",
        "content_sha256": "0" * 64, "published_at": "2026-01-01T00:00:00Z"})
    before = snapshot(state_dir)
    r = cli("resume", "--task", "check-1", "--decision", "approve")
    r.assert_stopped()
    assert "different content" in r.err
    assert snapshot(state_dir) == before


def test_check_checkpoint_key_mismatch_stops(cli, state_dir):
    """A checkpoint whose key differs from its task (even correctly signed) is refused."""
    _start(cli)
    path = checkpoint_file(state_dir, "check-1")
    resign(state_dir, path, lambda d: d.update(idempotency_key="other-key"))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "check-1", "--decision", "approve")
    r.assert_stopped()
    assert "idempotency_key" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_check_action_mismatch_stops(cli, state_dir):
    _start(cli)
    path = checkpoint_file(state_dir, "check-1")
    resign(state_dir, path, lambda d: d.update(action="send_email"))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "check-1", "--decision", "approve")
    r.assert_stopped()
    assert "action" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
