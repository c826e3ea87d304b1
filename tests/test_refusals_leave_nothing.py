"""Every refusal leaves the state dir exactly as it was: no new lock file, no trace file, no empty
folder, not even a ``locks/`` folder that had been removed. The snapshot lists every path."""

from __future__ import annotations

from pathlib import Path
import shutil

import pytest

from conftest import snapshot, use_app


def _start(cli, key: str, draft: str = "D", *extra: str) -> None:
    r = cli("start", "--key", key, "--title", "T", "--draft", draft, *extra)
    assert r.code == 0, r.err


def _base(cli, state_dir: Path) -> None:
    """A state dir with a waiting, a completed and a cancelled task, then locks/ and traces/
    removed (a cleanup script, or a fresh copy of the state dir)."""
    _start(cli, "w-1")
    _start(cli, "c-1", "D2")
    assert cli("resume", "--task", "c-1", "--decision", "approve").code == 0
    _start(cli, "x-1", "D3")
    assert cli("resume", "--task", "x-1", "--decision", "reject").code == 0
    for name in ("locks", "traces"):
        shutil.rmtree(state_dir / name, ignore_errors=True)


def _corrupt_key(state_dir: Path) -> None:
    with open(state_dir / "signing.key", "ab") as fh:
        fh.write(b"zz")


def _corrupt_state_id(state_dir: Path) -> None:
    with open(state_dir / "state.id", "ab") as fh:
        fh.write(b"zz")


CASES = {
    "start-with-a-corrupted-key": (_corrupt_key, ("start", "--key", "n9", "--title", "T", "--draft", "new")),
    "resume-with-a-corrupted-key": (_corrupt_key, ("resume", "--task", "w-1", "--decision", "approve")),
    "start-with-a-corrupted-state-id": (_corrupt_state_id, ("start", "--key", "n9", "--title", "T", "--draft", "new")),
    "reject-a-completed-task": (None, ("resume", "--task", "c-1", "--decision", "reject")),
    "approve-a-cancelled-task": (None, ("resume", "--task", "x-1", "--decision", "approve")),
    "start-an-existing-key-with-another-draft": (None, ("start", "--key", "w-1", "--title", "T", "--draft", "other")),
    "start-a-key-that-was-rejected": (None, ("start", "--key", "x-1", "--title", "T", "--draft", "D9")),
    "start-a-key-already-in-the-ledger": (None, ("start", "--key", "c-1", "--title", "T", "--draft", "D9")),
    "expire-a-task-that-is-not-overdue": (None, ("expire", "--task", "w-1")),
    "resume-an-unknown-task": (None, ("resume", "--task", "nosuch", "--decision", "approve")),
    "resume-with-a-bad-lock-timeout": ("HITL_LOCK_TIMEOUT=abc", ("resume", "--task", "w-1", "--decision", "approve")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refusal_changes_no_path(cli, state_dir, monkeypatch, case):
    _base(cli, state_dir)
    prepare, args = CASES[case]
    if isinstance(prepare, str):
        name, value = prepare.split("=", 1)
        monkeypatch.setenv(name, value)
    elif prepare is not None:
        prepare(state_dir)
    before = snapshot(state_dir)
    r = cli(*args)
    r.assert_stopped()
    assert snapshot(state_dir) == before
    assert not (state_dir / "locks").exists() and not (state_dir / "traces").exists()


@pytest.mark.parametrize("args", [("list",), ("ledger",), ("doctor",), ("show", "--task", "c-1"),
                                  ("status", "--task", "w-1")])
def test_read_only_commands_change_no_path(cli, state_dir, args):
    _base(cli, state_dir)
    before = snapshot(state_dir)
    r = cli(*args)
    assert r.code == 0, r.err
    assert snapshot(state_dir) == before


def test_the_snapshot_sees_an_empty_folder_and_a_lock_file(state_dir):
    state_dir.mkdir()
    before = snapshot(state_dir)
    (state_dir / "locks").mkdir()
    assert snapshot(state_dir) != before
    before = snapshot(state_dir)
    (state_dir / "locks" / "x.lock").touch()
    assert snapshot(state_dir) != before


def test_a_start_whose_run_fails_leaves_no_lock_trace_or_folder(cli, state_dir, monkeypatch):
    """The model (or provider) fails during ``start``: nothing is saved, and the lock file, the
    trace file and the folders this start created are removed again."""
    from workflow import hitl

    _base(cli, state_dir)

    async def down(*_args, **_kwargs):
        raise ConnectionError("provider unreachable")

    monkeypatch.setattr(hitl.Runner, "run", down)
    before = snapshot(state_dir)
    r = cli("start", "--key", "n1", "--title", "T", "--draft", "new")
    r.assert_stopped()
    assert "nothing saved" in r.err
    assert snapshot(state_dir) == before


def test_a_first_start_that_fails_leaves_no_state_dir(cli, state_dir, monkeypatch):
    from workflow import hitl

    async def down(*_args, **_kwargs):
        raise ConnectionError("provider unreachable")

    monkeypatch.setattr(hitl.Runner, "run", down)
    cli("start", "--key", "n1", "--title", "T", "--draft", "new").assert_stopped()
    assert not state_dir.exists()


def test_a_drift_refusal_recreates_no_lock(cli, state_dir, monkeypatch):
    """The agent changed in code since the save: refused before the lock, so a removed locks/
    folder stays removed."""
    import dataclasses


    _base(cli, state_dir)
    from agent.publisher import build_agent as real

    use_app(monkeypatch, build_agent=lambda m: real(m).clone(
        tools=[dataclasses.replace(real(m).tools[0], description="Publish, now differently.")]))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "w-1", "--decision", "approve")
    r.assert_stopped()
    assert "the agent changed since it was saved" in r.err
    assert snapshot(state_dir) == before
