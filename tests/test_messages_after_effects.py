"""After an effect, every message says what was done and what to run next; before one, it says
nothing was done. (A disk that fills up after the ledger entry used to be reported as "nothing is
half-written", as if nothing had happened.)"""

from __future__ import annotations

import errno

import pytest

from conftest import ledger_entries
from state import effects, failpoints
from state.errors import Refused

KEY = "m-1"


def _fail_at(monkeypatch, name: str, exc: BaseException) -> None:
    real = failpoints.hit

    def hit(point: str) -> None:
        if point == name:
            raise exc
        real(point)

    monkeypatch.setattr(failpoints, "hit", hit)


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"),
                                 Refused("a check failed")], ids=["disk-full", "stopped"])
def test_a_failure_after_the_ledger_entry_says_the_action_ran(cli, state_dir, monkeypatch, exc):
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    _fail_at(monkeypatch, "checkpoint:outcome:before", exc)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert f"already done: task {KEY}: checkpoint saved at revision 2 (waiting_for_approval), " \
           f"task {KEY}: wrote the effect's intent, " \
           f"task {KEY}: ran publish_draft (ledger entry written)" in r.err, r.err
    assert r.err.rstrip().endswith("; to finish, run the same command again (python run.py doctor explains "
                                   "where each task stands)") and "nothing is half-written" not in r.err
    assert len(ledger_entries(state_dir)) == 1
    monkeypatch.undo()
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")  # what the message says
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1


def test_a_failure_after_the_rejection_record_says_so(cli, state_dir, monkeypatch):
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    _fail_at(monkeypatch, "checkpoint:outcome:before", OSError(errno.ENOSPC, "No space left on device"))
    r = cli("resume", "--task", KEY, "--decision", "reject")
    r.assert_stopped()
    assert "rejection record written" in r.err and "revision 2 (waiting_for_approval)" in r.err


def test_a_refusal_before_any_change_claims_nothing(cli, state_dir, monkeypatch):
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    _fail_at(monkeypatch, "checkpoint:decision:before", OSError(errno.ENOSPC, "No space left on device"))
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "already done" not in r.err and "no file is half-written" in r.err
    assert ledger_entries(state_dir) == []


def test_a_reject_that_undoes_its_own_record_does_not_claim_it(cli, state_dir, monkeypatch):
    """A reject that loses to an approval removes its rejection record again: the message must not
    say the record was written."""
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    real = failpoints.hit

    # the approval cannot run while we hold the lock; write the ledger entry as it would have
    from state.files.store import Store
    from state.files.ledger import Ledger

    def approve_lands(point: str) -> None:
        if point == "rejection:record:after":
            cp = Store(state_dir).load(KEY)
            Ledger(state_dir / "ledger").record(key=KEY, task_id=KEY, action="publish_draft", title="T",
                                                content_sha256=cp.content_sha256)
            effects.reset()  # written "by another process": not this command's change
        real(point)

    monkeypatch.setattr(failpoints, "hit", approve_lands)
    r = cli("resume", "--task", KEY, "--decision", "reject")
    r.assert_stopped()
    assert "already executed" in r.err and "rejection record written" not in r.err
    assert not list((state_dir / "rejections").glob("*.json"))
