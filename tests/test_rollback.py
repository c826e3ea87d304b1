"""An older, genuinely signed checkpoint put back in place (a backup restore, or someone who can
write the state dir but has no key) must not reopen a decided task. Approved tasks are guarded by
the ledger; rejected ones by the rejection record (state/files/rejections.py)."""

from __future__ import annotations

import pytest

from conftest import checkpoint_file, ledger_entries, plant_record, restore_checkpoint, snapshot


@pytest.fixture
def rejected_then_restored(cli, state_dir):
    """Start, keep revision 1, reject, then put revision 1 back."""
    cli("start", "--key", "rb-1", "--title", "T", "--draft", "secret launch date")
    path = checkpoint_file(state_dir, "rb-1")
    revision_1 = path.read_bytes()
    r = cli("resume", "--task", "rb-1", "--decision", "reject", "--by", "bob", "--reason", "do not publish")
    assert r.code == 0, r.err
    return restore_checkpoint(state_dir, "rb-1", revision_1)  # the task's files from a backup


def test_restored_checkpoint_cannot_reopen_a_rejected_task(cli, state_dir, rejected_then_restored):
    assert cli("status", "--task", "rb-1", "--json").json()["status"] == "waiting_for_approval"
    before = snapshot(state_dir)
    r = cli("resume", "--task", "rb-1", "--decision", "approve", "--by", "alice")
    r.assert_stopped()
    assert "was rejected by bob" in r.err and "can never be approved" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_restored_rejected_task_can_be_rejected_again(cli, state_dir, rejected_then_restored):
    """The reject the rejection record proves finishes it; another reason would be dropped (the
    model is told the recorded one), so a reject giving one is refused, nothing changed."""
    before = snapshot(state_dir)
    other = cli("resume", "--task", "rb-1", "--decision", "reject", "--by", "bob", "--reason", "still no")
    assert other.code == 1 and "another reason cannot replace it" in other.err and snapshot(state_dir) == before
    r = cli("resume", "--task", "rb-1", "--decision", "reject", "--by", "bob", "--reason", "do not publish", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []


def test_finishing_a_restored_reject_keeps_the_reviewer_on_record(cli, state_dir, rejected_then_restored):
    """Whoever runs doctor's advice, the decision recorded is the one the rejection record proves:
    rejected by bob, with bob's reason, at bob's time."""
    from state.files.rejections import get
    from state.files.store import Store

    record = get(Store(state_dir), "rb-1")
    r = cli("resume", "--task", "rb-1", "--decision", "reject", "--by", "carol", "--json")
    assert r.code == 0, r.err
    decision = r.json()["decision"]
    assert (decision["by"], decision["reason"], decision["at"]) == ("bob", "do not publish", record.at)


def test_doctor_reports_a_restored_rejected_task(cli, rejected_then_restored):
    r = cli("doctor", "--json")
    assert r.code == 1
    kinds = {f["kind"]: f for f in r.json()["findings"]}
    assert kinds["rejection_not_finished"]["action"] == "python run.py resume --task rb-1 --decision reject"


def test_key_of_a_rejected_task_cannot_start_again(cli, state_dir, rejected_then_restored):
    rejected_then_restored.unlink()  # the checkpoint is gone; the rejection record stays
    before = snapshot(state_dir)
    r = cli("start", "--key", "rb-1", "--title", "T", "--draft", "secret launch date")
    r.assert_stopped()
    assert "was rejected before" in r.err and snapshot(state_dir) == before


def test_reject_writes_the_rejection_record_before_the_decision(cli, state_dir):
    from state.files import rejections
    from state.files.store import Store

    cli("start", "--key", "rb-2", "--title", "T", "--draft", "D")
    cli("resume", "--task", "rb-2", "--decision", "reject", "--by", "bob", "--reason", "no")
    rec = rejections.get(Store(state_dir), "rb-2")
    assert rec is not None and (rec.by, rec.reason) == ("bob", "no")
    # approve never writes one
    cli("start", "--key", "rb-3", "--title", "T", "--draft", "D3")
    cli("resume", "--task", "rb-3", "--decision", "approve")
    assert rejections.get(Store(state_dir), "rb-3") is None


def test_doctor_flags_a_forged_entry_on_an_expired_task(cli, state_dir, monkeypatch):
    import json

    cli("start", "--key", "ex-1", "--title", "T", "--draft", "D", "--expires-in", "90s")
    monkeypatch.setenv("HITL_NOW", "2999-01-01T00:00:00Z")
    assert cli("expire").code == 0
    cp = json.loads(checkpoint_file(state_dir, "ex-1").read_text(encoding="utf-8"))
    entry = {"idempotency_key": "ex-1", "task_id": "ex-1", "action": "publish_draft", "title": "T",
             "content_sha256": cp["content_sha256"], "published_at": "2026-01-01T00:00:00Z"}
    plant_record(state_dir, "ledger_entry", entry, signed=False)  # by hand: not signed, never trusted
    r = cli("doctor", "--json")
    assert r.code == 1
    assert {f["kind"] for f in r.json()["findings"]} == {"unsigned_unproven", "not_judged"}  # nothing proves it
    plant_record(state_dir, "ledger_entry", entry)  # signed (by a key holder): the table still flags it
    r = cli("doctor", "--json")
    assert r.code == 1
    assert "entry_without_approval" in {f["kind"] for f in r.json()["findings"]}


def test_rejection_record_that_is_a_fifo_stops_without_hanging(cli, state_dir):
    import os

    from state.files import rejections
    from state.files.store import Store

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this OS")
    cli("start", "--key", "ff-1", "--title", "T", "--draft", "D")
    path = rejections.path_for(Store(state_dir), "ff-1")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    before = snapshot(state_dir)
    r = cli("resume", "--task", "ff-1", "--decision", "approve")  # would block on open() before
    r.assert_stopped()
    assert "FIFO" in r.err and snapshot(state_dir) == before and ledger_entries(state_dir) == []


def test_expire_never_overwrites_a_recorded_reject(cli, state_dir, monkeypatch):
    """A crash right after the rejection record, then the deadline passes: expire leaves the task
    to the reject that was already decided, and resume --decision reject finishes it."""
    from state import failpoints

    cli("start", "--key", "rj-1", "--title", "T", "--draft", "D", "--expires-in", "90s")

    class Crash(BaseException):
        pass

    def hit(point):
        if point == "rejection:record:after":
            raise Crash(point)

    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Crash):
        cli("resume", "--task", "rj-1", "--decision", "reject", "--reason", "no")
    monkeypatch.undo()
    monkeypatch.setenv("HITL_NOW", "2099-01-01T00:00:00Z")
    r = cli("expire", "--json")
    assert r.code == 0 and r.json()["expired"] == []
    r = cli("resume", "--task", "rj-1", "--decision", "reject", "--reason", "no", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled"
    assert cli("doctor").code == 0 and ledger_entries(state_dir) == []


def test_a_reject_that_crashed_right_after_its_decision_write_still_blocks_a_restored_backup(cli, state_dir):
    """Why the rejection record is made *before* the decision is written: a reject whose process
    dies right after writing its decision (before anything else) must already have left the
    record, or a backup from before the reject, put back, could be approved and published."""
    from conftest import run_subprocess

    cli("start", "--key", "rb-1", "--title", "T", "--draft", "secret launch date")
    revision_1 = checkpoint_file(state_dir, "rb-1").read_bytes()
    r = run_subprocess(state_dir, "resume", "--task", "rb-1", "--decision", "reject", "--by", "bob",
                       "--reason", "no", env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert r.code == 86, r  # the failpoint's exit: a crash right after the decision write
    restore_checkpoint(state_dir, "rb-1", revision_1)
    r = cli("resume", "--task", "rb-1", "--decision", "approve", "--by", "alice")
    r.assert_stopped()
    assert "can never be approved" in r.err and ledger_entries(state_dir) == []


def test_a_sticky_reject_that_crashed_after_its_decision_write_blocks_every_channel_of_a_backup(cli, state_dir):
    """The same for a reject with ``--always`` on a two-channel task: the record of each call it
    decides (blog's, and news's made by the sticky rule) is there before the decision is written,
    so neither call of a backup put back can be approved."""
    from conftest import run_subprocess, start_calls

    calls = start_calls(cli, "rb-2", "T", "secret launch date", "blog", "news")
    revision_1 = checkpoint_file(state_dir, "rb-2").read_bytes()
    r = run_subprocess(state_dir, "resume", "--task", "rb-2", "--call", calls["blog"], "--decision", "reject",
                       "--always", "--by", "bob", env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert r.code == 86, r
    restore_checkpoint(state_dir, "rb-2", revision_1)
    for channel in ("news", "blog"):
        r = cli("resume", "--task", "rb-2", "--call", calls[channel], "--decision", "approve", "--by", "alice")
        r.assert_stopped()
        assert "can never be approved" in r.err and ledger_entries(state_dir) == []
