"""Crash injection: kill the real CLI at every durable-write boundary, then recover.

The points are ENUMERATED, not listed by hand: each flow (start; resume approve; resume reject) runs
once with ``HITL_FAILPOINT_LOG``, and every name it logs becomes a crash point. A write added later
with its failpoints is covered automatically; a write added WITHOUT failpoints is caught by
``test_every_durable_write_is_inside_a_failpoint_pair``.

For every resume point × {approve, reject}: crash there (``HITL_FAILPOINT`` → ``os._exit(86)``),
check ``doctor`` recommends exactly the resume we are about to run, ``resume`` again with the same
decision, then assert one ledger entry (approve) / none (reject), status completed / cancelled,
``doctor`` consistent, and a further resume leaves the state dir byte-identical. For every start
point: crash there, ``start`` again with the same key and draft works, and the task can be approved.

Processes are forked from a warmed interpreter (tests/forking.py); without fork, a representative
subset runs as plain subprocesses. ``HITL_CRASH_FULL=1`` adds double crashes: crash at point A, crash
again at point B during the recovery, then recover.
"""

from __future__ import annotations

import builtins
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import ledger_entries, snapshot
from forking import HAS_FORK, in_process, run_cli, step

KEY = "crash-1"
START = ["start", "--key", KEY, "--title", "T", "--draft", "Crash me."]
FULL = os.environ.get("HITL_CRASH_FULL") == "1"
EXPECT = {"approve": ("completed", 1), "reject": ("cancelled", 0)}
#: Boundaries that must be among the enumerated ones (so a broken enumeration cannot pass vacuously).
MUST = {"start": {"signing_key:before", "state_id:before", "state_id:after",
                  "checkpoint:start:before", "checkpoint:start:after"},
        "approve": {"checkpoint:decision:after", "ledger:record:before", "ledger:record:after",
                    "checkpoint:outcome:before"},
        "reject": {"checkpoint:decision:after", "checkpoint:outcome:before"}}
#: Without fork (each process ~2 s), only these run unless HITL_CRASH_FULL=1.
SUBSET = {"checkpoint:decision:after", "ledger:record:after", "checkpoint:start:after"}


def _resume(decision: str) -> list[str]:
    return ["resume", "--task", KEY, "--decision", decision, "--by", "ops", "--reason", "r"]


def _logged(state_dir: Path, args: list[str], log: Path) -> list[str]:
    r = run_cli(state_dir, *args, env={"HITL_FAILPOINT_LOG": str(log)})
    assert r.code == 0, r.err
    names = log.read_text(encoding="utf-8").split() if log.exists() else []
    log.unlink(missing_ok=True)
    return list(dict.fromkeys(names))


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    """``{"base": <state dir with KEY started>, "start"|"approve"|"reject": [point names]}``."""
    root = tmp_path_factory.mktemp("flows")
    base, log = root / "base", root / "fp.log"
    points = {"start": _logged(base, START, log)}
    for decision in ("approve", "reject"):
        work = root / decision
        shutil.copytree(base, work)
        points[decision] = _logged(work, _resume(decision), log)
    for flow, names in points.items():
        assert MUST[flow] <= set(names), (flow, names)
    print(f"\ncrash points enumerated: start {len(points['start'])}, approve "
          f"{len(points['approve'])}, reject {len(points['reject'])}: {points}")
    return {"base": base, **points}


def _pick(names: list[str]) -> list[str]:
    return names if (HAS_FORK or FULL) else [n for n in names if n in SUBSET]


def _doctor(state_dir: Path) -> dict:
    r = in_process(state_dir, "doctor", "--json")
    report = r.json()
    assert r.code == (0 if report["consistent"] else 1), (r.code, r.err)
    return report


def _assert_recovered(state_dir: Path, decision: str, where: str) -> None:
    status, n_entries = EXPECT[decision]
    r = step(state_dir, *_resume(decision), "--json")
    assert r.code == 0, f"{where}: recovery resume failed: {r.err}"
    assert r.json()["status"] == status, where
    assert len(ledger_entries(state_dir)) == n_entries, where
    assert _doctor(state_dir)["consistent"], where
    before = snapshot(state_dir)
    again = step(state_dir, *_resume(decision), "--json")
    assert again.code == 0 and again.json()["status"] == status, where
    assert snapshot(state_dir) == before, f"{where}: a further resume changed the state dir"
    assert not [p for p in state_dir.rglob(".tmp-*")], f"{where}: temp files left behind"


def _crash(state_dir: Path, args: list[str], point: str, reached: bool, where: str) -> None:
    r = run_cli(state_dir, *args, env={"HITL_FAILPOINT": point})
    assert r.code == (86 if reached else 0), f"{where}: exit {r.code}: {r.err}"


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_crash_at_every_resume_point_then_resume_recovers(flows, decision, tmp_path):
    points = _pick(list(dict.fromkeys(flows["approve"] + flows["reject"])))
    assert points
    for point in points:
        where = f"{decision} crashed at {point}"
        work = tmp_path / point.replace(":", "_")
        shutil.copytree(flows["base"], work)
        reached = point in flows[decision]
        _crash(work, _resume(decision), point, reached, where)
        report = _doctor(work)
        # after the crash doctor either sees nothing wrong or recommends exactly our resume (after a
        # local effect's intent, then how a person settles it if the function cannot finish)
        for f in report["findings"]:
            first, _, then = f["action"].partition("; ")
            assert first == f"python run.py resume --task {KEY} --decision {decision}", (where, f)
            assert not then or (f["kind"] == "effect_unconfirmed" and then.startswith(
                "if the function cannot finish, a human looks at what it did, then settles it")), (where, f)
        _assert_recovered(work, decision, where)


def test_crash_at_every_start_point_then_start_again_works(flows, tmp_path):
    for point in _pick(flows["start"]):
        where = f"start crashed at {point}"
        work = tmp_path / point.replace(":", "_")
        _crash(work, START, point, True, where)
        assert _doctor(work)["consistent"], where
        again = step(work, *START, "--json")
        assert again.code == 0, f"{where}: {again.err}"
        assert again.json()["status"] == "waiting_for_approval", where
        assert len(ledger_entries(work)) == 0, where
        _assert_recovered(work, "approve", where)


@pytest.mark.skipif(not FULL, reason="HITL_CRASH_FULL=1 runs every pair of crash points")
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_double_crash_every_pair_then_resume_recovers(flows, decision, tmp_path):
    points = flows[decision]
    for first in points:
        for second in points:
            where = f"{decision}: crash at {first}, then at {second} during recovery"
            work = tmp_path / f"{first}__{second}".replace(":", "_")
            shutil.copytree(flows["base"], work)
            _crash(work, _resume(decision), first, True, where)
            r = run_cli(work, *_resume(decision), env={"HITL_FAILPOINT": second})
            assert r.code in (0, 86), f"{where}: {r.err}"
            _assert_recovered(work, decision, where)


def test_every_durable_write_is_inside_a_failpoint_pair(cli, state_dir, monkeypatch):
    """Instrument the file API: every create/replace/link below the state dir must happen between a
    ``<name>:before`` and ``<name>:after`` failpoint, so crash tests see every write. Lock files
    (``locks/``) hold no data and are exempt."""
    from state import failpoints

    events: list[tuple[str, str]] = []
    open_points: list[str] = []
    root = str(state_dir)

    def inside(path) -> bool:
        p = os.path.abspath(os.fspath(path))
        return p.startswith(root) and "locks" not in Path(p).relative_to(root).parts

    def note_write(kind: str, path) -> None:
        if inside(path):
            events.append((kind, os.fspath(path)))
            assert open_points, f"{kind} {path} outside any failpoint pair"

    real_hit = failpoints.hit

    def hit(name: str) -> None:
        events.append(("failpoint", name))
        base, _, edge = name.rpartition(":")
        if edge == "before":
            open_points.append(base)
        else:
            assert open_points and open_points[-1] == base, (name, open_points)
            open_points.pop()
        real_hit(name)

    real = {"replace": os.replace, "link": os.link, "rename": os.rename, "mkstemp": tempfile.mkstemp,
            "open": builtins.open, "os_open": os.open}

    def w_replace(src, dst, *a, **k):
        note_write("replace", dst)
        return real["replace"](src, dst, *a, **k)

    def w_link(src, dst, *a, **k):
        note_write("link", dst)
        return real["link"](src, dst, *a, **k)

    def w_rename(src, dst, *a, **k):
        note_write("rename", dst)
        return real["rename"](src, dst, *a, **k)

    def w_mkstemp(*a, **k):
        fd, name = real["mkstemp"](*a, **k)
        note_write("mkstemp", name)
        return fd, name

    def w_open(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
            note_write("open", file)
        return real["open"](file, mode, *a, **k)

    def w_os_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            note_write("os.open", path)
        return real["os_open"](path, flags, *a, **k)

    for mod in (failpoints,):
        monkeypatch.setattr(mod, "hit", hit)
    monkeypatch.setattr(os, "replace", w_replace)
    monkeypatch.setattr(os, "link", w_link)
    monkeypatch.setattr(os, "rename", w_rename)
    monkeypatch.setattr(tempfile, "mkstemp", w_mkstemp)
    monkeypatch.setattr(builtins, "open", w_open)
    monkeypatch.setattr(os, "open", w_os_open)

    assert cli("start", "--key", "w-1", "--draft", "x").code == 0
    assert cli("resume", "--task", "w-1", "--decision", "approve").code == 0
    assert cli("start", "--key", "w-2", "--draft", "y").code == 0
    assert cli("resume", "--task", "w-2", "--decision", "reject").code == 0
    assert cli("doctor", "--repair").code == 0
    writes = [e for e in events if e[0] != "failpoint"]
    # the audit saw real writes: the hard-link probe, key, state.id, 2 starts, 1 rejection record,
    # 2 decisions, 1 effect intent, 1 ledger entry, 2 outcomes (every one a link: no file is
    # replaced in place)
    assert sum(1 for kind, _ in writes if kind == "link") == 12, writes
    assert not any(kind == "replace" for kind, _ in writes), writes
    assert not open_points


def test_a_failed_task_put_back_to_its_approved_checkpoint_is_never_carried_out(tmp_path):
    """``fail`` says "nothing will be": before it writes ``failed`` it creates the task's end mark,
    so the approval in an older revision (the newest one deleted, or an older copy put back) can
    never run the effect; every decision stops, and the same ``fail`` finishes the task again."""
    work = tmp_path / "state"
    assert step(work, *START).code == 0
    cut = run_cli(work, *_resume("approve"), env={"HITL_FAILPOINT": "effect:intent:before"})
    assert cut.code == 86, cut.err  # the approval is on record, its effect never begun
    ended = step(work, "fail", "--task", KEY, "--by", "ann", "--reason", "no longer wanted", "--json")
    assert ended.code == 0 and ended.json()["status"] == "failed", ended.err
    assert len(list((work / "rejections").glob("*.json"))) == 1
    assert _doctor(work)["consistent"]  # the mark is the end's own, not a reject to finish
    newest = sorted((work / "checkpoints").rglob("r*.json"))[-1]
    assert newest.name == "r000003.json"
    newest.unlink()  # revision 2 (approved, not carried out) is the newest again
    for args in (_resume("approve"), ["resume", "--task", KEY, "--decision", "reject", "--reason", "x"]):
        r = step(work, *args)
        assert r.code == 1 and f"task {KEY} was ended by ann at " in r.err, r.err
        assert r.err.rstrip().endswith(f"the same fail finishes it (python run.py fail --task {KEY} --by NAME "
                                       "--reason TEXT)"), r.err
    assert ledger_entries(work) == []
    (finding,) = _doctor(work)["findings"]
    assert finding["kind"] == "fail_not_finished", finding
    again = step(work, "fail", "--task", KEY, "--by", "bob", "--reason", "restored by mistake", "--json")
    assert again.code == 0 and again.json()["status"] == "failed", again.err
    assert _doctor(work)["consistent"] and ledger_entries(work) == []


def test_a_fail_cut_by_a_crash_after_its_mark_is_finished_by_the_same_fail(tmp_path):
    """A crash between ``fail``'s end mark and its ``failed`` revision: approve and reject are refused
    (the mark says ended), doctor names the fail, ``show`` says who ended it and that it did not
    finish, and the same ``fail`` again finishes it."""
    work = tmp_path / "state"
    assert step(work, *START).code == 0
    assert run_cli(work, *_resume("approve"), env={"HITL_FAILPOINT": "checkpoint:decision:after"}).code == 86
    cut = run_cli(work, "fail", "--task", KEY, "--by", "bob", "--reason", "gone",
                  env={"HITL_FAILPOINT": "checkpoint:outcome:before"})
    assert cut.code == 86, cut.err
    for args in (_resume("approve"), ["resume", "--task", KEY, "--decision", "reject", "--reason", "x"]):
        before = snapshot(work)
        r = step(work, *args)
        assert r.code == 1 and "was ended by bob at" in r.err, r.err
        assert r.err.count("\n") == 1 and "Traceback" not in r.err and snapshot(work) == before
    assert [f["kind"] for f in _doctor(work)["findings"]] == ["fail_not_finished"]
    shown = in_process(work, "status", "--task", KEY).out.splitlines()[-1]
    assert shown.startswith("  next: the task was ended by bob at ") and shown.endswith(
        f"python run.py fail --task {KEY} --by NAME --reason TEXT finishes it"), shown
    receipt = in_process(work, "show", "--task", KEY).out.splitlines()
    assert receipt[2].startswith("ended, not finished: ended by bob: gone (at ") and receipt[2].endswith(
        "no decision runs, the same fail finishes it (doctor explains)"), receipt
    assert in_process(work, "show", "--task", KEY, "--json").json()["outcome"]["ended"]["by"] == "bob"
    again = step(work, "fail", "--task", KEY, "--by", "bob", "--reason", "gone", "--json")
    assert again.code == 0 and again.json()["status"] == "failed", again.err
    assert _doctor(work)["consistent"] and ledger_entries(work) == []
    assert "ended" not in in_process(work, "show", "--task", KEY, "--json").json()["outcome"]  # finished: failed


def test_fail_gives_up_an_approval_next_to_a_rejected_call(tmp_path):
    """Two calls: one rejected, the other approved and cut before its effect. A person may give the
    approval up: ``fail`` is not stopped by the rejected call (it ran nothing, as an executed one does
    not stop it either); nothing is published, and doctor finds the task consistent."""
    work = tmp_path / "state"
    r = step(work, *START, "--channel", "a", "--channel", "b", "--json")
    first, second = (p["call_id"] for p in r.json()["pending"])
    assert step(work, "resume", "--task", KEY, "--call", first, "--decision", "reject", "--reason", "no").code == 0
    cut = run_cli(work, "resume", "--task", KEY, "--call", second, "--decision", "approve",
                  env={"HITL_FAILPOINT": "effect:intent:before"})
    assert cut.code == 86, cut.err
    ended = step(work, "fail", "--task", KEY, "--by", "bob", "--reason", "stop", "--json")
    assert ended.code == 0 and ended.json()["status"] == "failed", ended.err
    assert ledger_entries(work) == [] and _doctor(work)["consistent"]


def test_a_fail_that_completes_a_task_leaves_doctor_consistent_about_the_approval_it_gave_up(tmp_path):
    """One call executed, the other approved and cut before its effect; ``fail`` ends the task
    ``completed`` (the entry stands). The approval given up is judged ended (``failed``), not a
    completed call without its entry: doctor is consistent, ``status`` says it was given up, and
    approving it again is refused."""
    work = tmp_path / "state"
    r = step(work, *START, "--channel", "a", "--channel", "b", "--json")
    first, second = (p["call_id"] for p in r.json()["pending"])
    assert step(work, "resume", "--task", KEY, "--call", first, "--decision", "approve").code == 0
    cut = run_cli(work, "resume", "--task", KEY, "--call", second, "--decision", "approve",
                  env={"HITL_FAILPOINT": "effect:intent:before"})
    assert cut.code == 86, cut.err
    ended = step(work, "fail", "--task", KEY, "--by", "bob", "--reason", "stop", "--json")
    assert ended.code == 0 and ended.json()["status"] == "completed", ended.err
    assert _doctor(work)["consistent"] and len(ledger_entries(work)) == 1
    lines = in_process(work, "status", "--task", KEY).out.splitlines()
    assert f"  call {first} on a: approved by root (human)" in lines, lines  # carried out
    assert f"  call {second} on b: approved by root (human), given up by the fail: never carried out" in lines, lines
    again = step(work, "resume", "--task", KEY, "--call", second, "--decision", "approve")
    assert again.code == 1 and "nothing was done, and nothing will be" in again.err, again.err
    assert len(ledger_entries(work)) == 1


@pytest.mark.parametrize("point", ["ledger:record:after", "checkpoint:start:before"])
def test_a_start_cut_after_its_preview_effect_is_finished_by_the_same_start(tmp_path, point):
    """A private preview runs without a human while ``start`` runs; a crash after its ledger entry and
    before the task's checkpoint leaves an entry with no task. doctor names the same start, which
    saves the task without a second preview entry; a start of other content, another action or
    other channels under the key is still refused (the key is taken: it would leave that entry
    with no task for good)."""
    work = tmp_path / "state"
    args = ["start", "--key", "pv-1", "--draft", "d", "--channel", "preview", "--channel", "blog"]
    assert run_cli(work, *args, env={"HITL_FAILPOINT": point}).code == 86
    (finding,) = _doctor(work)["findings"]
    assert finding["kind"] == "entry_without_task" and finding["action"].endswith(
        "the same start (the same key, title, content and channels) finishes it)"), finding
    for changed in (["--draft", "other", "--channel", "preview", "--channel", "blog"],  # other content
                    ["--draft", "d", "--channel", "blog"], ["--draft", "d", "--action", "send_summary"]):  # channels
        other = step(work, "start", "--key", "pv-1", *changed)
        assert other.code == 1 and "key pv-1 is already in the ledger" in other.err, (changed, other.err)
    again = step(work, *args, "--json")
    assert again.code == 0 and again.json()["status"] == "waiting_for_approval", again.err
    assert [e["idempotency_key"] for e in ledger_entries(work)] == ["pv-1#preview"]
    assert _doctor(work)["consistent"]
