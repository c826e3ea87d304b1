"""One folder per task (``checkpoints/<name>/r<N>.json``), and the state dirs written before it.

Loading, saving and ``status`` of one task touch that task's own folder only, so their cost does
not grow with the other tasks of the state dir (measured by ``benchmarks/store_scale.py``; checked
here without timings, by recording every folder listed). The layouts before per-task folders
(``tasks/<name>.r<N>.json``, older still ``tasks/<name>.json``) are read and continued, and
``doctor --repair`` moves them into folders: a crash at its failpoint, a file it cannot remove, a
file of ``tasks/`` newer than the task's checkpoint, a write racing the move, and a checkpoint
adopted by ``state.id`` under its old name each leave a readable, consistent task
(``state.files.store``).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from conftest import checkpoint_file, ledger_entries, resign
from forking import run_cli
from state import failpoints
from state.files import inspect
from state.files.store import Store, file_name, revision_file_name

POSIX_UIDS = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="needs POSIX uids")


def _start(cli, key: str, draft: str = "A draft.") -> None:
    r = cli("start", "--key", key, "--title", "T", "--draft", draft)
    assert r.code == 0, r.err


def _listed(monkeypatch, state_dir: Path) -> list[Path]:
    """From now on, every folder below ``state_dir`` that ``os.listdir`` or ``os.scandir`` is asked
    to list (``Path.iterdir`` and ``Path.glob`` go through them), relative to ``state_dir``; a
    folder that does not exist counts too (asking is the cost)."""
    root = state_dir.resolve()
    seen: list[Path] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def note(path) -> None:
        if isinstance(path, (str, bytes, os.PathLike)):
            full = Path(os.fsdecode(path)).resolve()
            if full == root or root in full.parents:
                seen.append(full.relative_to(root))

    def listdir(path=".", *args):
        note(path)
        return real_listdir(path, *args)

    def scandir(path=".", *args):
        note(path)
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    return seen


def _folder(key: str) -> Path:
    return Path("checkpoints") / file_name(key)


# -- the cost of one task does not depend on the others -------------------------------------------

def test_load_save_status_resume_and_start_list_only_the_tasks_own_folder(cli, state_dir, monkeypatch):
    """Every folder listed while one task is read or written is that task's own: never
    ``checkpoints/``, ``tasks/``, ``effects/``, ``ledger/`` or another task's folder."""
    for key in ("other-1", "other-2", "mine"):
        _start(cli, key)
    assert cli("resume", "--task", "other-1", "--decision", "approve").code == 0  # a ledger entry
    seen = _listed(monkeypatch, state_dir)
    shown = cli("status", "--task", "mine", "--json")
    assert shown.code == 0 and shown.json()["checkpoint_path"].endswith(f"{file_name('mine')}/r000001.json")
    store = Store(state_dir)
    cp = store.save_revision(store.load("mine"), failpoint="t", event=("resumed", {}))
    assert Store(state_dir).load("mine") == cp
    r = cli("resume", "--task", "mine", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert set(seen) == {_folder("mine")}, seen
    seen.clear()
    _start(cli, "new-1")  # a new task: its folder is looked for, and created
    assert set(seen) == {_folder("new-1")}, seen


def test_the_folder_of_the_layout_before_is_listed_only_for_a_task_without_a_folder(cli, state_dir,
                                                                                   monkeypatch):
    _start(cli, "old")
    _start(cli, "mine")
    _to_old_layout(state_dir, "old")
    seen = _listed(monkeypatch, state_dir)
    assert cli("status", "--task", "mine").code == 0
    assert set(seen) == {_folder("mine")}, seen
    assert cli("status", "--task", "old").code == 0
    assert set(seen) == {_folder("mine"), _folder("old"), Path("tasks")}, seen


def test_an_effects_attempts_are_probed_by_name_never_by_listing_effects(state_dir, monkeypatch):
    """``intent_get`` and ``check_writable`` look up a key's attempts 1, 2, … by name: the cost is
    that key's own attempts, however many records of other keys ``effects/`` holds."""
    from state.files import intents
    from state.records import EffectIntent, Settlement

    store = Store(state_dir)

    def intent(key: str, attempt: int) -> EffectIntent:
        return EffectIntent(idempotency_key=key, attempt=attempt, task_id=key, channel="blog", call_id="c1",
                            action="publish_draft", content_sha256="0" * 64, request_key=f"{attempt:032x}",
                            service="http://127.0.0.1:1/", deduplicates=True, at="2100-01-01T00:00:00Z")

    for n in range(30):
        store.intent_record(intent(f"other-{n}", 1))
    store.intent_record(intent("mine", 1))
    store.settlement_record(Settlement(idempotency_key="mine", attempt=1, task_id="mine", by="program",
                                       at="2100-01-01T00:00:01Z", source="not_sent"))
    store.intent_record(intent("mine", 2))
    seen = _listed(monkeypatch, state_dir)
    assert store.intent_get("mine").attempt == 2
    assert intents._attempts(store, "mine", "intent") == [1, 2]
    assert intents._attempts(store, "mine", "settled") == [1]
    assert store.intent_get("nobody") is None
    store.check_writable("mine")
    assert seen == [], seen
    assert [i.idempotency_key for i in store.intents()].count("mine") == 1  # listing all: its job


def test_the_inbox_lists_a_tasks_folder_again_only_when_a_new_revision_appeared(cli, state_dir, monkeypatch):
    """The inbox's refresh reads ``checkpoints/`` and, per task it has a row of, looks up its
    newest file and the next revision's name: a task's folder is listed again only when that name
    appeared (or the file went away), so a refresh costs what it cost before per-task folders."""
    from workflow.review.inbox_index import InboxIndex

    for key in ("a", "b", "c"):
        _start(cli, key)
    index = InboxIndex(Store(state_dir))
    assert sorted((r.task_id, r.revision) for r in index.rows()) == [("a", 1), ("b", 1), ("c", 1)]
    seen = _listed(monkeypatch, state_dir)
    assert len(index.rows()) == 3
    assert seen == [Path("checkpoints")], seen
    monkeypatch.undo()
    store = Store(state_dir)
    store.save_revision(store.load("a"), failpoint="t", event=("resumed", {}), title="renamed")  # one revision
    assert cli("resume", "--task", "b", "--decision", "reject").code == 0
    restored = checkpoint_file(state_dir, "c").read_bytes()
    assert cli("resume", "--task", "c", "--decision", "approve").code == 0
    for name in ("r000002.json", "r000003.json"):  # c's files restored from a backup: revision 1 again
        (state_dir / _folder("c") / name).unlink()
    (state_dir / _folder("c") / "r000001.json").write_bytes(restored)
    seen = _listed(monkeypatch, state_dir)
    rows = sorted((r.task_id, r.revision, r.status, r.title) for r in index.rows())
    assert rows == [("a", 2, "waiting_for_approval", "renamed"), ("b", 3, "cancelled", "T"),
                    ("c", 1, "waiting_for_approval", "T")]
    assert set(seen) == {Path("checkpoints"), _folder("a"), _folder("b")}, seen  # c's file changed: read again


# -- the layouts before per-task folders ------------------------------------------------------------

def _to_old_layout(state_dir: Path, key: str, *, legacy: bool = False) -> list[Path]:
    """Move task ``key``'s folder into ``tasks/`` as the version before per-task folders wrote it:
    ``tasks/<name>.r<N>.json`` per revision (cleared ones included), or (``legacy``, the layout
    before revision files) its checkpoint alone as ``tasks/<name>.json``. Returns the files."""
    store, stem = Store(state_dir), file_name(key)
    tasks = state_dir / "tasks"
    tasks.mkdir(mode=0o700, exist_ok=True)
    moved = []
    found = store.folder_revisions(stem)
    for revision, path in found:
        if legacy and revision != found[-1][0]:
            path.unlink()
            continue
        moved.append(tasks / (f"{stem}.json" if legacy else revision_file_name(stem, revision)))
        path.rename(moved[-1])
    store.task_dir(stem).rmdir()
    return moved


@pytest.fixture
def old_state(cli, state_dir):
    """A state dir as the version before per-task folders left it: ``done`` completed (three
    revision files, the first cleared), ``wait`` waiting (one), ``legacy`` waiting in the layout
    before revision files (``tasks/<name>.json``), and a temp file a crash left in ``tasks/``.
    Returns ``{key: (revision, bytes of its checkpoint)}``."""
    for key in ("done", "wait", "legacy"):
        _start(cli, key)
    assert cli("resume", "--task", "done", "--decision", "approve").code == 0
    before = {}
    for key in ("done", "wait", "legacy"):
        path = checkpoint_file(state_dir, key)
        before[key] = (json.loads(path.read_bytes())["revision"], path.read_bytes())
    _to_old_layout(state_dir, "done")
    _to_old_layout(state_dir, "wait")
    _to_old_layout(state_dir, "legacy", legacy=True)
    (state_dir / "tasks" / f".tmp-{file_name('wait')}.abcd1234.part").write_bytes(b'{"half')
    assert not any((state_dir / "checkpoints").iterdir())
    return before


def test_a_state_dir_in_the_layout_before_folders_is_read_and_continued(cli, state_dir, old_state):
    tasks = state_dir / "tasks"
    assert sorted(p.name for p in tasks.glob("*.json")) == sorted(
        [*(revision_file_name(file_name("done"), n) for n in (1, 2, 3)), revision_file_name(file_name("wait"), 1),
         file_name("legacy") + ".json"])
    for key, (revision, raw) in old_state.items():
        shown = cli("status", "--task", key, "--json").json()
        assert shown["revision"] == revision and Path(shown["checkpoint_path"]).parent == tasks
        assert Path(shown["checkpoint_path"]).read_bytes() == raw
    assert sorted(t["task_id"] for t in cli("list", "--json").json()["tasks"]) == ["done", "legacy", "wait"]
    untouched = {p.name: p.read_bytes() for p in tasks.iterdir()}
    r = cli("resume", "--task", "wait", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert r.json()["checkpoint_path"] == str(state_dir / "checkpoints" / file_name("wait") / "r000003.json")
    assert sorted(p.name for p in (state_dir / _folder("wait")).iterdir()) == ["r000002.json", "r000003.json"]
    assert {p.name: p.read_bytes() for p in tasks.iterdir()} == untouched  # read, never written
    report = cli("doctor", "--json").json()
    assert [f["kind"] for f in report["findings"]] == ["leftover_temp", "old_layout"]
    assert "3 task(s) still in tasks/" in report["findings"][1]["detail"]
    assert "doctor --repair moves each task into its folder" in report["findings"][1]["action"]


def test_doctor_repair_moves_every_task_and_removes_the_old_folder(cli, state_dir, old_state):
    r = cli("doctor", "--repair", "--json")
    assert r.code == 0, r.out + r.err
    report = r.json()
    assert report["consistent"] and report["findings"] == []
    moved = sorted(x["path"] for x in report["repairs"] if x["kind"] == "old_layout")
    assert moved == sorted([*(str(state_dir / _folder(k) / f"r{old_state[k][0]:06d}.json") for k in old_state),
                            str(state_dir / "tasks")])
    assert not (state_dir / "tasks").exists()
    for key, (revision, raw) in old_state.items():
        path = checkpoint_file(state_dir, key)
        assert path == state_dir / _folder(key) / f"r{revision:06d}.json" and path.read_bytes() == raw
        assert cli("status", "--task", key, "--json").json()["revision"] == revision
    again = cli("doctor", "--repair", "--json").json()
    assert again["consistent"] and again["findings"] == [] and again["repairs"] == []
    r = cli("resume", "--task", "legacy", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert sorted(e["idempotency_key"] for e in ledger_entries(state_dir)) == ["done", "legacy"]


@pytest.mark.parametrize("point", ["checkpoint:migrate:before", "checkpoint:migrate:after"])
def test_a_crash_at_the_move_leaves_a_readable_consistent_task(cli, state_dir, point):
    _start(cli, "wait")
    (revision, raw) = (1, checkpoint_file(state_dir, "wait").read_bytes())
    _to_old_layout(state_dir, "wait")
    crashed = run_cli(state_dir, "doctor", "--repair", env={"HITL_FAILPOINT": point})
    assert crashed.code == failpoints.CRASH_EXIT_CODE, crashed.err
    copied = state_dir / _folder("wait") / "r000001.json"
    assert copied.exists() == point.endswith(":after")
    assert (state_dir / "tasks" / revision_file_name(file_name("wait"), 1)).read_bytes() == raw  # not yet removed
    shown = cli("status", "--task", "wait", "--json").json()
    assert shown["revision"] == revision and Path(shown["checkpoint_path"]).read_bytes() == raw
    report = cli("doctor", "--json").json()
    assert report["consistent"] and [f["kind"] for f in report["findings"]] == ["old_layout"]
    finished = cli("doctor", "--repair", "--json").json()
    assert finished["consistent"] and finished["findings"] == [] and not (state_dir / "tasks").exists()
    assert checkpoint_file(state_dir, "wait").read_bytes() == raw
    r = cli("resume", "--task", "wait", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1


def test_a_file_the_move_cannot_remove_is_left_for_the_next_repair(cli, state_dir, monkeypatch):
    """On Windows a file another process has open cannot be removed for a moment: the task is
    moved all the same (its folder wins), the file stays, and the next repair removes it."""
    _start(cli, "wait")
    (old,) = _to_old_layout(state_dir, "wait")
    real = Path.unlink

    def unlink(self, *args, **kwargs):
        if self == old:
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                  "process", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", unlink)
    report = cli("doctor", "--repair", "--json").json()
    assert report["consistent"] and [f["kind"] for f in report["findings"]] == ["old_layout"]
    (repair,) = [x for x in report["repairs"] if x["kind"] == "old_layout"]
    assert f"left {old.name} (The process cannot access the file" in repair["result"]
    assert old.exists() and cli("status", "--task", "wait", "--json").json()["checkpoint_path"] == \
        str(state_dir / _folder("wait") / "r000001.json")
    monkeypatch.undo()
    report = cli("doctor", "--repair", "--json").json()
    assert report["consistent"] and report["findings"] == [] and not (state_dir / "tasks").exists()


def test_a_file_of_tasks_newer_than_the_tasks_checkpoint_is_reported_and_never_removed(cli, state_dir):
    """The folder wins; a newer file of ``tasks/`` (an older version still writing, a backup put
    back there) is a human's to judge, so ``--repair`` leaves it where it is."""
    _start(cli, "done")
    assert cli("resume", "--task", "done", "--decision", "approve").code == 0
    newer = state_dir / "tasks" / revision_file_name(file_name("done"), 4)
    newer.parent.mkdir(mode=0o700)
    newer.write_bytes(checkpoint_file(state_dir, "done").read_bytes())
    for args in (("doctor", "--json"), ("doctor", "--repair", "--json")):
        r = cli(*args)
        assert r.code == 1
        report = json.loads(r.out)
        assert [f["kind"] for f in report["findings"]] == ["old_layout_conflict", "old_layout"]
        assert f"{newer.name} in tasks/ is newer than the task's checkpoint" in report["findings"][0]["detail"]
        assert newer.exists()
    assert cli("status", "--task", "done", "--json").json()["revision"] == 3


def test_a_write_racing_the_move_is_never_lost(cli, state_dir, monkeypatch):
    """A writer that read revision 1 from ``tasks/`` and passed its compare while ``doctor
    --repair`` moves the task (its lock file deleted under it, or no lock at all): its revision 2
    goes to the task's folder, the one name every writer of revision 2 races for, and is the
    checkpoint afterwards."""
    _start(cli, "wait")
    _to_old_layout(state_dir, "wait")
    real_check = Store.check_unchanged
    moved: list = []

    def check_unchanged(self, cp) -> None:
        real_check(self, cp)
        if not moved:
            moved.append(cli("doctor", "--repair", "--json").json())

    monkeypatch.setattr(Store, "check_unchanged", check_unchanged)
    # (this writer holds no lock, so doctor would take its temp file for a dead process's: not the subject here)
    monkeypatch.setattr(inspect, "_temp_files", lambda store: iter(()))
    store = Store(state_dir)
    cp = store.save_revision(store.load("wait"), failpoint="t", event=("resumed", {}), title="written")
    monkeypatch.undo()
    assert moved and moved[0]["consistent"] and not (state_dir / "tasks").exists()
    assert sorted(p.name for p in (state_dir / _folder("wait")).iterdir()) == ["r000001.json", "r000002.json"]
    assert Store(state_dir).load("wait") == cp and cp.title == "written"


def test_writers_that_read_a_task_from_tasks_race_for_one_name(cli, state_dir, monkeypatch):
    from state.errors import Refused

    _start(cli, "wait")
    _to_old_layout(state_dir, "wait")
    writers = 4
    barrier = threading.Barrier(writers, timeout=60)
    real_check = Store.check_unchanged

    def check_unchanged(self, cp) -> None:
        real_check(self, cp)
        barrier.wait()  # every writer has compared; now all commit at once

    monkeypatch.setattr(Store, "check_unchanged", check_unchanged)
    stale = Store(state_dir).load("wait")
    won: list = []
    lost: list = []

    def write(n: int) -> None:
        try:
            won.append(Store(state_dir).save_revision(stale, failpoint="t", event=("resumed", {}), title=f"w{n}"))
        except Refused as exc:
            lost.append(str(exc))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(won) == 1 and len(lost) == writers - 1, (won, lost)
    assert Store(state_dir).load("wait") == won[0]


def test_a_checkpoint_adopted_under_its_old_name_stays_readable_after_the_move(cli, state_dir):
    """``state.id`` adopted a checkpoint without a state ID under its name in ``tasks/``; moved into
    its folder it is still that checkpoint (same MAC), so it stays readable and resumes."""
    _start(cli, "old-1")
    resign(state_dir, checkpoint_file(state_dir, "old-1"), lambda d: d.pop("state_id"))  # before state IDs
    (state_dir / "state.id").unlink()
    _to_old_layout(state_dir, "old-1")
    _start(cli, "new-1")  # creates state.id, adopting tasks/old-1--….r000001.json
    adopted = json.loads((state_dir / "state.id").read_text())["adopted"]
    assert list(adopted) == [revision_file_name(file_name("old-1"), 1)]
    assert cli("doctor", "--repair", "--json").json()["consistent"]
    assert checkpoint_file(state_dir, "old-1").parent == state_dir / _folder("old-1")
    assert cli("status", "--task", "old-1").code == 0
    r = cli("resume", "--task", "old-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err


# -- a task's folder is checked like the state dir's own folders ---------------------------------

@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
@pytest.mark.parametrize("inside", [True, False], ids=["to-a-folder-inside", "to-a-folder-outside"])
def test_a_task_folder_that_is_a_symlink_stops_every_command_on_it(cli, state_dir, tmp_path, inside):
    _start(cli, "k-1")
    _start(cli, "k-2")
    folder = state_dir / _folder("k-1")
    elsewhere = state_dir / "moved" if inside else tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    says = (f"checkpoint folder checkpoints/{file_name('k-1')} is a symbolic link, not a folder" if inside else
            f"refusing to use a path outside the state dir for the checkpoint folder of {file_name('k-1')}")
    for args in (("status", "--task", "k-1"), ("resume", "--task", "k-1", "--decision", "approve")):
        r = cli(*args)
        r.assert_stopped()
        assert says in r.err
    r = cli("list")
    assert r.code == 1 and "k-2" in r.out and "symbolic link" in r.err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["r000001.json"] and ledger_entries(state_dir) == []


@POSIX_UIDS
def test_a_task_folder_writable_by_others_stops_every_command_on_it(cli, state_dir):
    _start(cli, "k-1")
    (state_dir / _folder("k-1")).chmod(0o777)
    for args in (("status", "--task", "k-1"), ("resume", "--task", "k-1", "--decision", "approve"), ("list",)):
        r = cli(*args)
        r.assert_stopped()
        assert f"checkpoint folder checkpoints/{file_name('k-1')} is writable by group or others (mode 0777)" in r.err
    assert ledger_entries(state_dir) == []
