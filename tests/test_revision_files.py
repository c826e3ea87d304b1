"""The file store's revision files, and what a file system may refuse them.

Each write of a checkpoint creates ``checkpoints/<name>/r<N>.json`` with ``os.link``
(``state.files.store``): the newest revision is the checkpoint, older ones are cleared but keep their
names. Here: a reader
never falls back to an older revision, a reader that picked a revision cleared meanwhile reads the
newer one, a crash between a write and its cleanup is harmless and ``doctor --repair`` finishes it,
the inbox lists one row per task. And the two things Windows and some file systems do to these
writes, simulated by making the OS calls fail: a temp file that cannot be removed for a moment
(Windows, while another process has the file open) and a file system without hard links (FAT,
exFAT, some synced folders), refused up front with one line and nothing left on disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from conftest import checkpoint_file, ledger_entries, snapshot
from state import fileio as files
from state.files.store import KEPT_REVISIONS, Store, file_name

KEY = "rv-1"


def _approved(cli) -> None:
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "Revision files.").code == 0
    assert cli("resume", "--task", KEY, "--decision", "approve").code == 0


def _folder(state_dir: Path) -> Path:
    return state_dir / "checkpoints" / file_name(KEY)


def _sizes(state_dir: Path) -> dict[str, int]:
    """The task's revision files (in its folder) → their sizes."""
    return {p.name: p.stat().st_size for p in sorted(_folder(state_dir).glob("*.json"))}


def test_each_write_is_a_new_revision_file_and_older_ones_are_cleared(cli, state_dir):
    _approved(cli)
    sizes = _sizes(state_dir)
    names = list(sizes)
    assert names == ["r000001.json", "r000002.json", "r000003.json"]
    assert [sizes[n] > 0 for n in names] == [False] * (3 - KEPT_REVISIONS) + [True] * KEPT_REVISIONS
    assert checkpoint_file(state_dir, KEY).name == names[-1]
    shown = cli("status", "--task", KEY, "--json").json()
    assert shown["checkpoint_path"] == str(_folder(state_dir) / names[-1]) and shown["revision"] == 3
    assert not (state_dir / "tasks").exists()  # the layout before per-task folders is never written


def test_a_newest_revision_that_does_not_verify_stops_and_is_never_replaced_by_an_older_one(cli, state_dir):
    """Fail closed: the revision before it is still whole, but it is not the checkpoint."""
    _approved(cli)
    newest = checkpoint_file(state_dir, KEY)
    newest.write_text(newest.read_text(encoding="utf-8").replace('"completed"', '"cancelled"'),
                      encoding="utf-8")
    r = cli("status", "--task", KEY)
    r.assert_stopped()
    assert f"checkpoint integrity check failed for {file_name(KEY)}/{newest.name}" in r.err
    newest.write_bytes(b"")
    r = cli("status", "--task", KEY)
    r.assert_stopped()
    assert "is empty" in r.err


def test_a_revision_file_holding_another_revision_stops(cli, state_dir):
    _approved(cli)
    files_ = sorted(_folder(state_dir).glob("*.json"))
    files_[-1].write_bytes(files_[-2].read_bytes())  # revision 2's bytes under revision 3's name
    r = cli("status", "--task", KEY)
    r.assert_stopped()
    assert "holds revision 2, not the revision its name says (3)" in r.err


def test_a_reader_that_picked_a_revision_cleared_meanwhile_reads_the_newer_one(cli, state_dir, monkeypatch):
    _approved(cli)
    store = Store(state_dir)
    cleared = sorted(_folder(state_dir).glob("*.json"))[0]
    assert cleared.stat().st_size == 0
    real, calls = Store._newest, []

    def newest(self, stem):  # the first look finds the folder as it was before two writes
        calls.append(stem)
        return cleared if len(calls) == 1 else real(self, stem)

    monkeypatch.setattr(Store, "_newest", newest)
    assert store.load(KEY).revision == 3 and len(calls) == 2


def test_a_crash_between_a_write_and_its_cleanup_is_harmless_and_doctor_repair_clears(cli, state_dir, monkeypatch):
    monkeypatch.setattr(Store, "clear_older", lambda self, task_id: 0)  # the process died first
    _approved(cli)
    monkeypatch.undo()
    assert all(_sizes(state_dir).values())  # every revision still whole
    assert cli("status", "--task", KEY, "--json").json()["status"] == "completed"
    report = cli("doctor", "--json").json()
    assert report["consistent"] and report["repairs"] == []
    repaired = cli("doctor", "--repair", "--json").json()
    assert repaired["consistent"]
    assert [r["kind"] for r in repaired["repairs"]] == ["older_revision"]
    sizes = list(_sizes(state_dir).values())
    assert [size > 0 for size in sizes] == [False] * (3 - KEPT_REVISIONS) + [True] * KEPT_REVISIONS


def test_the_inbox_lists_one_row_per_task_at_its_newest_revision(cli, state_dir):
    from workflow.review.inbox_index import InboxIndex

    _approved(cli)
    assert cli("start", "--key", "rv-2", "--draft", "Waiting.").code == 0
    index = InboxIndex(Store(state_dir))
    rows = sorted((r.task_id, r.revision, r.status) for r in index.rows())
    assert rows == [(KEY, 3, "completed"), ("rv-2", 1, "waiting_for_approval")]
    assert cli("resume", "--task", "rv-2", "--decision", "reject").code == 0
    rows = sorted((r.task_id, r.revision, r.status) for r in index.rows())
    assert rows == [(KEY, 3, "completed"), ("rv-2", 3, "cancelled")]
    listed = cli("list", "--json").json()["tasks"]
    assert [(t["task_id"], t["revision"]) for t in listed] == [(KEY, 3), ("rv-2", 3)]


# -- Windows: a temp file in use cannot be removed for a moment ---------------------------------

def _unlink_refused(monkeypatch, times: int) -> list[str]:
    """``os.unlink`` of a temp file raises ``PermissionError`` ``times`` times (what Windows does
    while another process has the file open), then works."""
    real, refused = os.unlink, []

    def unlink(path, *a, **k):
        if Path(path).name.startswith(".tmp-") and len(refused) < times:
            refused.append(Path(path).name)
            raise PermissionError(errno.EACCES, "The process cannot access the file because it "
                                  "is being used by another process", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(files, "SHARING_WAIT_S", 0.0)
    monkeypatch.setattr(os, "unlink", unlink)
    return refused


def test_removing_a_temp_file_that_is_in_use_is_retried(cli, state_dir, monkeypatch):
    refused = _unlink_refused(monkeypatch, 2)
    r = cli("start", "--key", KEY, "--draft", "In use.", "--json")
    assert r.code == 0, r.err
    assert len(refused) == 2 and r.json()["status"] == "waiting_for_approval"
    assert not [p for p in state_dir.rglob(".tmp-*")]


def test_a_temp_file_that_stays_in_use_is_left_for_doctor_and_the_write_stands(cli, state_dir, monkeypatch):
    assert cli("start", "--key", KEY, "--draft", "In use.").code == 0
    refused = _unlink_refused(monkeypatch, 10 ** 6)
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    monkeypatch.undo()
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert len(refused) >= files.SHARING_RETRIES
    left = [p for p in state_dir.rglob(".tmp-*")]
    assert left
    repaired = cli("doctor", "--repair", "--json").json()
    assert {x["kind"] for x in repaired["repairs"]} >= {"leftover_temp"}
    assert not [p for p in state_dir.rglob(".tmp-*")]


# -- a file system without hard links -----------------------------------------------------------

@pytest.mark.parametrize("failure", [OSError(errno.EPERM, "Operation not permitted"),
                                     NotImplementedError("link")], ids=["EPERM", "not-implemented"])
@pytest.mark.parametrize("exists", [False, True], ids=["new-dir", "empty-dir"])
def test_a_state_dir_without_hard_links_is_refused_up_front_leaving_nothing(cli, state_dir, tmp_path,
                                                                           monkeypatch, failure, exists):
    if exists:
        state_dir.mkdir(mode=0o700)
    before = snapshot(tmp_path)

    def link(src, dst, *a, **k):
        raise failure

    monkeypatch.setattr(os, "link", link)
    r = cli("start", "--key", KEY, "--draft", "No links here.")
    r.assert_stopped()
    assert "does not support hard links" in r.err and "PostgreSQL" in r.err
    assert snapshot(tmp_path) == before


def test_a_checkpoint_of_the_layout_before_revision_files_is_read_and_continued(cli, state_dir):
    """A state dir written before revision files holds ``tasks/<name>.json``: it is the task's
    checkpoint while its folder holds no revision file, and the next write continues from it in the
    task's folder (the file of ``tasks/`` stays, untouched, until ``doctor --repair`` moves the task:
    tests/test_task_folders.py)."""
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "Older layout.").code == 0
    first = checkpoint_file(state_dir, KEY)
    legacy = state_dir / "tasks" / (file_name(KEY) + ".json")
    legacy.parent.mkdir(mode=0o700)
    first.rename(legacy)
    first.parent.rmdir()
    before = legacy.read_bytes()
    assert cli("status", "--task", KEY, "--json").json()["checkpoint_path"] == str(legacy)
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert list(_sizes(state_dir)) == ["r000002.json", "r000003.json"]
    assert legacy.read_bytes() == before  # read, never written
    report = cli("doctor", "--json").json()
    assert report["consistent"] and [f["kind"] for f in report["findings"]] == ["old_layout"]
