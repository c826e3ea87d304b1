"""Hostile files inside a state dir: symlinks, FIFOs, a lost key or state.id, copied checkpoints.

Each case is one an adversarial tester found (symlinked traces written through, FIFOs that hang a
command forever, a lost ``signing.key`` silently replaced, a checkpoint copied between state dirs
sharing ``HITL_SIGNING_KEY`` and published twice, a dangling ledger symlink ending in an empty
message, ``--state-dir ""`` ignored). Every refusal is one ``STOPPED:`` line naming the file, and
nothing in the state dir changes.

FIFO tests never hang, even against a broken build: :func:`unblocked` opens the FIFO's other end
from a watchdog thread after a few seconds, so a reader or writer that blocked gets EOF / EPIPE and
the test fails on its assertion instead of hanging the suite. (No time is asserted.)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import checkpoint_file, ledger_entries, resign, snapshot

POSIX_ONLY = pytest.mark.skipif(sys.platform == "win32", reason="symlinks/FIFOs: POSIX")
HAS_FIFO = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
KEY = "k-1"
SHARED_KEY = "a-shared-signing-key-for-two-state-dirs"


def _stem(task_id: str) -> str:
    from state.files.store import file_name

    return file_name(task_id)


def _start(cli, key: str = KEY, draft: str = "The draft body, long enough to be redacted.") -> None:
    r = cli("start", "--key", key, "--title", "T", "--draft", draft)
    assert r.code == 0, r.err


def _trace(state_dir: Path, task_id: str = KEY) -> Path:
    return state_dir / "traces" / (_stem(task_id) + ".jsonl")


def _ledger(state_dir: Path, task_id: str = KEY) -> Path:
    return state_dir / "ledger" / (_stem(task_id) + ".json")


@contextmanager
def unblocked(fifo: Path, after_s: float = 3.0):
    """Guard a block of code that must not block on ``fifo``: if it still runs after ``after_s``
    seconds, keep opening the FIFO's other end (``O_RDWR``, which never blocks on Linux) and closing
    it, so a blocked ``open``/``read`` returns and the test fails instead of hanging."""
    done = threading.Event()

    def watchdog() -> None:
        if done.wait(after_s):
            return
        while not done.is_set():
            try:
                fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            except OSError:
                done.wait(0.05)
                continue
            done.wait(0.05)
            os.close(fd)

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


# -- 1. traces are never written outside the state dir ---------------------------------------


@POSIX_ONLY
def test_trace_file_symlink_is_not_written_through_on_resume(cli, state_dir, tmp_path):
    _start(cli)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    trace = _trace(state_dir)
    trace.unlink()
    trace.symlink_to(victim)
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve", "--trace-content")
    r.assert_stopped()
    assert f"trace file traces/{trace.name} is a symbolic link" in r.err
    assert victim.read_text() == "precious\n"
    assert snapshot(state_dir) == before  # refused before the decision was written
    assert ledger_entries(state_dir) == []


@POSIX_ONLY
def test_trace_file_symlink_is_not_written_through_on_start(cli, state_dir, tmp_path):
    _start(cli, "other")  # the state dir exists, with its key
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    _trace(state_dir).symlink_to(victim)
    before = snapshot(state_dir)
    r = cli("start", "--key", KEY, "--draft", "SECRET draft body " * 5, "--trace-content")
    r.assert_stopped()
    assert f"trace file traces/{_trace(state_dir).name} is a symbolic link" in r.err
    assert victim.read_text() == "precious\n"
    assert snapshot(state_dir) == before  # no checkpoint, no lock file for the new task
    assert not checkpoint_file(state_dir, KEY).exists()


@POSIX_ONLY
def test_trace_open_refuses_a_symlink_even_past_the_preflight(state_dir, tmp_path):
    """The open itself never follows a symlink (the file may change after the pre-flight)."""
    from state.errors import Refused
    from workflow.observe import trace_log
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = state_dir / "traces" / "x.jsonl"
    path.parent.mkdir(parents=True)
    path.symlink_to(victim)
    with pytest.raises(Refused, match="trace file traces/x.jsonl is a symbolic link"):
        trace_log.append(path, {"kind": "run"})
    assert victim.read_text() == "precious\n"


@POSIX_ONLY
def test_traces_folder_symlinked_outside_the_state_dir_stops(cli, state_dir, tmp_path):
    _start(cli, "other")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(state_dir / "traces")
    (state_dir / "traces").symlink_to(outside, target_is_directory=True)
    r = cli("start", "--key", KEY, "--draft", "x", "--trace-content")
    r.assert_stopped()
    assert "traces points outside the state dir" in r.err
    assert list(outside.iterdir()) == []


@POSIX_ONLY
def test_open_regular_without_o_nofollow_checks_with_lstat(state_dir, tmp_path, monkeypatch):
    """Where the OS has no O_NOFOLLOW (Windows), an lstat before the open refuses the symlink."""
    from state import paths
    from state.errors import Refused

    monkeypatch.setattr(paths, "_NOFOLLOW", 0)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(Refused, match="link is a symbolic link"):
        paths.open_regular(link, "link", os.O_WRONLY | os.O_APPEND)
    assert victim.read_text() == "precious\n"


# -- 2. FIFOs never block a command ----------------------------------------------------------


@HAS_FIFO
@pytest.mark.parametrize("where", ["folder", "tasks"])
@pytest.mark.parametrize("command", [("list",), ("resume", "--decision", "approve"), ("doctor",)])
def test_fifo_checkpoint_does_not_hang(cli, state_dir, command, where):
    """A FIFO as a task's newest revision file (in its folder), or as a stray file of ``tasks/``
    (the layout before per-task folders, still read)."""
    _start(cli)
    if where == "folder":
        fifo, shown = checkpoint_file(state_dir, KEY).with_name("r000002.json"), f"{_stem(KEY)}/r000002.json"
    else:
        (state_dir / "tasks").mkdir(mode=0o700)
        fifo, shown = state_dir / "tasks" / "evil.json", "evil.json"
    os.mkfifo(fifo)
    before = snapshot(state_dir)
    with unblocked(fifo):
        r = cli(*command)
    assert f"checkpoint {shown} is a FIFO, not a regular file" in r.err + r.out, r.err
    assert r.code == 1 and "Traceback" not in r.err
    assert snapshot(state_dir) == before
    if command == ("doctor",):
        assert "unreadable_checkpoint" in r.out


@HAS_FIFO
@pytest.mark.parametrize("command", [("resume", "--task", KEY, "--decision", "approve"), ("ledger",),
                                     ("doctor",)])
def test_fifo_ledger_entry_does_not_hang(cli, state_dir, command):
    _start(cli)
    _ledger(state_dir).parent.mkdir()
    os.mkfifo(_ledger(state_dir))
    before = snapshot(state_dir)
    with unblocked(_ledger(state_dir)):
        r = cli(*command)
    assert f"ledger entry {_ledger(state_dir).name} is a FIFO, not a regular file" in r.err + r.out
    assert r.code == 1 and "Traceback" not in r.err
    assert snapshot(state_dir) == before  # resume: the decision was not written


@HAS_FIFO
@pytest.mark.parametrize("command", [("show", "--task", KEY), ("resume", "--task", KEY, "--decision", "approve")])
def test_fifo_trace_file_does_not_hang(cli, state_dir, command):
    _start(cli)
    _trace(state_dir).unlink()
    os.mkfifo(_trace(state_dir))
    before = snapshot(state_dir)
    with unblocked(_trace(state_dir)):
        r = cli(*command)
    r.assert_stopped()
    assert f"trace file traces/{_trace(state_dir).name} is a FIFO, not a regular file" in r.err
    assert snapshot(state_dir) == before
    assert ledger_entries(state_dir) == []


@HAS_FIFO
def test_fifo_signing_key_does_not_hang(state_dir):
    from state.errors import Refused
    from state.integrity import load_key

    state_dir.mkdir()
    os.mkfifo(state_dir / "signing.key")
    with unblocked(state_dir / "signing.key"), pytest.raises(Refused, match="signing.key is a FIFO"):
        load_key(state_dir, create=False)


@HAS_FIFO
def test_fifo_state_id_is_refused(cli, state_dir):
    _start(cli)
    (state_dir / "state.id").unlink()
    os.mkfifo(state_dir / "state.id")
    with unblocked(state_dir / "state.id"):
        r = cli("status", "--task", KEY)
    r.assert_stopped()
    assert "state.id is a FIFO, not a regular file" in r.err


# -- 3. a lost signing key is never silently replaced ----------------------------------------


def test_missing_signing_key_with_checkpoints_stops_start(cli, state_dir):
    _start(cli)
    (state_dir / "signing.key").unlink()
    before = snapshot(state_dir)
    r = cli("start", "--key", "k-2", "--draft", "y")
    r.assert_stopped()
    assert ("signing key missing but 1 checkpoint exists in" in r.err
            and "restore signing.key or set HITL_SIGNING_KEY" in r.err)
    assert snapshot(state_dir) == before
    assert not (state_dir / "signing.key").exists()


def test_missing_signing_key_is_never_created_by_a_save(cli, state_dir):
    """The rule sits in the key code itself, not only in start's pre-flight."""
    from state.errors import Refused
    from state.integrity import load_key

    _start(cli)
    (state_dir / "signing.key").unlink()
    with pytest.raises(Refused, match="signing key missing but 1 checkpoint exists"):
        load_key(state_dir, create=True)
    assert not (state_dir / "signing.key").exists()


# -- 4. a checkpoint belongs to its state dir ------------------------------------------------


@pytest.fixture
def two_dirs(tmp_path, monkeypatch):
    """Two state dirs sharing ``HITL_SIGNING_KEY`` (a secret-store key, docs/threat-model.md)."""
    from conftest import run_in_process as call

    monkeypatch.setenv("HITL_SIGNING_KEY", SHARED_KEY)
    a, b = tmp_path / "a", tmp_path / "b"

    for state, key in ((a, KEY), (b, "b-own")):
        assert call(state, "start", "--key", key, "--draft", "x").code == 0
    return a, b, call


def test_checkpoint_copied_to_another_state_dir_is_refused(two_dirs):
    a, b, call = two_dirs
    checkpoint_file(b, KEY).parent.mkdir(mode=0o700)
    shutil.copyfile(checkpoint_file(a, KEY), checkpoint_file(b, KEY))
    before = snapshot(b)
    for args in (("resume", "--task", KEY, "--decision", "approve"), ("status", "--task", KEY)):
        r = call(b, *args)
        r.assert_stopped()
        assert f"checkpoint {_stem(KEY)}/r000001.json belongs to another state dir" in r.err
    assert snapshot(b) == before and ledger_entries(b) == []
    # the original still works where it belongs: published once, in one ledger
    assert call(a, "resume", "--task", KEY, "--decision", "approve").code == 0
    assert len(ledger_entries(a)) == 1 and ledger_entries(b) == []


def test_moving_a_whole_state_dir_keeps_its_checkpoints(two_dirs, tmp_path):
    a, _, call = two_dirs
    moved = tmp_path / "renamed"
    a.rename(moved)
    r = call(moved, "resume", "--task", KEY, "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"


def test_every_checkpoint_records_the_state_id(cli, state_dir):
    _start(cli)
    ident = json.loads((state_dir / "state.id").read_text())
    assert len(ident["state_id"]) == 32
    assert json.loads(checkpoint_file(state_dir, KEY).read_text())["state_id"] == ident["state_id"]


def test_missing_state_id_with_bound_checkpoints_stops_start(two_dirs):
    a, _, call = two_dirs
    (a / "state.id").unlink()
    before = snapshot(a)
    r = call(a, "start", "--key", "k-2", "--draft", "y")
    r.assert_stopped()
    assert "state.id missing but 1 checkpoint carries a state ID" in r.err
    assert snapshot(a) == before
    r = call(a, "status", "--task", KEY)
    r.assert_stopped()
    assert "this state dir has no state.id: restore it if it was lost" in r.err


def _make_legacy(state_dir: Path, task_id: str) -> None:
    """Turn ``task_id``'s checkpoint into one written before ``state_id`` existed (re-signed)."""
    resign(state_dir, checkpoint_file(state_dir, task_id), lambda d: d.pop("state_id"))


def test_legacy_checkpoints_are_adopted_and_stay_readable(cli, state_dir):
    """Decision (state/state_id.py): a checkpoint without ``state_id`` is accepted while the state
    dir has no state.id; the first write creates state.id adopting every legacy checkpoint then
    present, and binds each on its next revision."""
    _start(cli, "old-1")
    _start(cli, "old-2")
    _make_legacy(state_dir, "old-1")
    _make_legacy(state_dir, "old-2")
    (state_dir / "state.id").unlink()
    assert cli("status", "--task", "old-1").code == 0
    r = cli("resume", "--task", "old-1", "--decision", "approve")  # creates state.id, binds old-1
    assert r.code == 0, r.err
    sid = json.loads((state_dir / "state.id").read_text())["state_id"]
    assert json.loads(checkpoint_file(state_dir, "old-1").read_text())["state_id"] == sid
    r = cli("resume", "--task", "old-2", "--decision", "approve")  # adopted, still readable
    assert r.code == 0, r.err


def test_an_adopted_legacy_checkpoint_replaced_by_another_is_refused(cli, state_dir):
    """A legacy checkpoint is adopted by its file name AND its MAC: another legacy checkpoint put
    under an adopted name afterwards (one from a state dir that shares the key) is refused."""
    _start(cli, "old-1")
    _start(cli, "old-2")
    _make_legacy(state_dir, "old-1")
    _make_legacy(state_dir, "old-2")
    (state_dir / "state.id").unlink()
    assert cli("resume", "--task", "old-1", "--decision", "approve").code == 0  # state.id adopts old-2
    resign(state_dir, checkpoint_file(state_dir, "old-2"), lambda d: d.update(title="Another title"))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "old-2", "--decision", "approve")
    r.assert_stopped()
    assert "carries no state ID and was not here when this state dir got its state.id" in r.err
    assert snapshot(state_dir) == before and len(ledger_entries(state_dir)) == 1


def test_legacy_checkpoint_copied_in_later_is_refused(cli, state_dir, tmp_path):
    _start(cli, "old-1")
    legacy = tmp_path / "legacy.json"
    _make_legacy(state_dir, "old-1")
    shutil.copyfile(checkpoint_file(state_dir, "old-1"), legacy)
    _start(cli, "new-1")
    checkpoint_file(state_dir, "old-1").unlink()
    (state_dir / "state.id").unlink()
    checkpoint_file(state_dir, "new-1").unlink()
    _start(cli, "new-2")  # a state.id that has never seen old-1
    shutil.copyfile(legacy, checkpoint_file(state_dir, "old-1"))
    r = cli("resume", "--task", "old-1", "--decision", "approve")
    r.assert_stopped()
    assert "carries no state ID and was not here when this state dir got its state.id" in r.err


def test_v1_fixture_without_state_id_still_loads_and_is_bound_on_resume(cli, state_dir, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
    import make_checkpoint_v1 as fx

    monkeypatch.setenv("HITL_SIGNING_KEY", fx.FIXTURE_KEY)
    checkpoint_file(state_dir, fx.TASK_ID).parent.mkdir(parents=True)
    shutil.copyfile(fx.FIXTURE, checkpoint_file(state_dir, fx.TASK_ID))
    resign(state_dir, checkpoint_file(state_dir, fx.TASK_ID), lambda d: d.pop("state_id"))  # legacy
    r = cli("resume", "--task", fx.TASK_ID, "--decision", "approve")
    assert r.code == 0, r.err
    sid = json.loads((state_dir / "state.id").read_text())["state_id"]
    assert json.loads(checkpoint_file(state_dir, fx.TASK_ID).read_text())["state_id"] == sid


# -- 5. an unreadable ledger entry is a clear STOPPED, before the decision --------------------


@POSIX_ONLY
def test_dangling_ledger_symlink_stops_before_the_decision(cli, state_dir, tmp_path):
    _start(cli)
    _ledger(state_dir).parent.mkdir()
    _ledger(state_dir).symlink_to(tmp_path / "nowhere.json")
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert f"ledger entry {_ledger(state_dir).name} is a symbolic link, not a regular file" in r.err
    assert snapshot(state_dir) == before
    assert json.loads(checkpoint_file(state_dir, KEY).read_text())["decision"] is None


def test_ledger_record_race_lost_and_entry_gone_is_a_clear_stop(tmp_path, monkeypatch):
    """os.link says the entry exists, but reading it finds nothing: a named STOPPED, never a bare
    AssertionError (which reached the user as an empty message)."""
    from state import state_id
    from state.errors import Refused
    from state.files import ledger as ledger_mod
    from state.integrity import load_key

    def link_lost(src, dst, *a, **k):
        raise FileExistsError(dst)

    load_key(tmp_path, create=True), state_id.ensure(tmp_path)  # what signs the entry: there already
    monkeypatch.setattr(os, "link", link_lost)  # the link every exclusive create goes through
    ledger = ledger_mod.Ledger(tmp_path / "ledger")
    with pytest.raises(Refused, match=r"ledger entry k-1--[0-9a-f]{12}\.json could not be created"):
        ledger.record(key=KEY, task_id=KEY, action="publish_draft", title="T", content_sha256="0" * 64)


# -- 6. an empty --state-dir is a usage error ------------------------------------------------


def test_empty_state_dir_flag_is_a_usage_error(tmp_path, monkeypatch, capsys):
    import run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        run.main(["--state-dir", "", "start", "--key", KEY, "--draft", "x"])
    assert exc.value.code == 2
    assert "argument --state-dir: must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no .cache fallback


# -- round 2: hard links and the rejections folder ---------------------------------------------


@POSIX_ONLY
def test_hard_linked_trace_file_is_refused_before_anything_is_written(cli, state_dir, tmp_path):
    _start(cli)
    trace = next((state_dir / "traces").glob("*.jsonl"))
    victim = tmp_path / "victim.txt"
    victim.write_text("orig\n")
    trace.unlink()
    os.link(victim, trace)
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "hard links" in r.err and victim.read_text() == "orig\n"
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []


@POSIX_ONLY
def test_rejections_folder_symlinked_outside_is_refused(cli, state_dir, tmp_path):
    _start(cli)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state_dir / "rejections").symlink_to(elsewhere)
    r = cli("resume", "--task", KEY, "--decision", "reject", "--reason", "no")
    r.assert_stopped()
    assert "rejections points outside the state dir" in r.err and list(elsewhere.iterdir()) == []


@POSIX_ONLY
def test_lock_file_that_is_a_folder_or_symlink_is_a_clean_stop(cli, state_dir, tmp_path):
    from state.files.store import file_name

    _start(cli)
    lock = state_dir / "locks" / (file_name(KEY) + ".lock")
    lock.unlink()
    lock.mkdir()
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "lock file" in r.err and snapshot(state_dir) == before
    d = cli("doctor", "--json")
    assert d.code == 1 and "unusable_lock" in {f["kind"] for f in d.json()["findings"]}
    assert "Traceback" not in d.err


def test_blank_state_dir_env_and_overlong_state_dir_are_clean_stops(cli, tmp_path, monkeypatch):
    from conftest import run_in_process, run_py

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HITL_STATE_DIR", " ")
    blank = run_py("status")
    assert blank.code == 1 and blank.err.startswith("STOPPED: HITL_STATE_DIR is set but blank")
    assert not (tmp_path / " ").exists() and not (tmp_path / ".cache").exists()
    monkeypatch.delenv("HITL_STATE_DIR")
    r = run_py("--state-dir", str(tmp_path / ("x" * 5000)), "status")
    r.assert_stopped()
    assert "cannot be used" in r.err
    r = run_in_process(tmp_path / ("x" * 5000), "status")  # the same path from HITL_STATE_DIR
    r.assert_stopped()
    assert "HITL_STATE_DIR is 5,0" in r.err and "over its bound" in r.err


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_pending_call_on_a_channel_the_task_does_not_have_is_one_stopped_line(cli, state_dir, decision):
    """A signed checkpoint (an older version, or someone with the key) holds a pending call naming
    a channel that is not the task's: such a call has no ledger key. A decision stops with one line
    naming the channel, not an unexpected error, and changes nothing; doctor still judges the
    other tasks."""
    from conftest import checkpoint_file, resign, snapshot

    assert cli("start", "--key", "ok-1", "--draft", "D").code == 0
    assert cli("start", "--key", "a-1", "--draft", "D").code == 0
    resign(state_dir, checkpoint_file(state_dir, "a-1"),
           lambda d: d["pending"][0]["arguments"].update(channel="nope"))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "a-1", "--decision", decision)
    r.assert_stopped()
    assert "names channel 'nope', not one of the task's channels (blog)" in r.err
    assert "unexpected error" not in r.err
    assert snapshot(state_dir) == before
    doctor = cli("doctor", "--json")
    assert "unexpected error" not in doctor.err and doctor.json()["checked"]["tasks"] == 2


@POSIX_ONLY
def test_effects_folder_or_record_symlinked_is_refused_before_the_decision(cli, state_dir, tmp_path):
    _start(cli)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state_dir / "effects").symlink_to(elsewhere)
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "effects points outside the state dir" in r.err and list(elsewhere.iterdir()) == []
    (state_dir / "effects").unlink()
    (state_dir / "effects").mkdir(mode=0o700)
    (state_dir / "effects" / f"{_stem(KEY)}.1.intent.json").symlink_to(tmp_path / "nowhere.json")
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert f"effect record effects/{_stem(KEY)}.1.intent.json is a symbolic link" in r.err
    assert snapshot(state_dir) == before and ledger_entries(state_dir) == []
