"""``run.py doctor [--repair] [--json]``: every inconsistency reported with its action; read-only by
default; ``--repair`` applies only provable repairs (leftover temp files); exit 0 consistent, 1 with a
STOPPED line otherwise; never imports the SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, checkpoint_file, remove_checkpoint, snapshot
from forking import in_process, run_cli, spawn, step


def _start(cli, key="doc-1", draft="Body"):
    r = cli("start", "--key", key, "--title", "T", "--draft", draft)
    assert r.code == 0, r.err


def _doctor(cli, *extra):
    r = cli("doctor", "--json", *extra)
    report = r.json()
    assert r.code == (0 if report["consistent"] else 1)
    if r.code == 1:
        lines = [x for x in r.err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("STOPPED: doctor found"), r.err
    return report


def _kinds(report):
    return sorted(f["kind"] for f in report["findings"])


def _ledger_file(state_dir, key):
    from state.files.store import file_name

    return state_dir / "ledger" / (file_name(key) + ".json")


def test_doctor_consistent_after_normal_runs(cli, state_dir):
    assert _doctor(cli)["consistent"]  # no state dir yet
    assert not state_dir.exists(), "doctor must not create the state dir"
    _start(cli, "ok-1")
    _start(cli, "ok-2")
    _start(cli, "ok-3")
    cli("resume", "--task", "ok-1", "--decision", "approve")
    cli("resume", "--task", "ok-2", "--decision", "reject")
    report = _doctor(cli)
    assert report["consistent"] and report["findings"] == []
    assert (report["checked"]["tasks"], report["checked"]["ledger_entries"]) == (3, 1)
    text = cli("doctor")
    assert text.code == 0 and "consistent: every task agrees with the ledger" in text.out


def test_doctor_reports_completed_without_entry(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "doc-1", "--decision", "approve")
    _ledger_file(state_dir, "doc-1").unlink()
    report = _doctor(cli)
    assert _kinds(report) == ["completed_without_entry"]
    assert "a human must check" in report["findings"][0]["action"]


def test_doctor_reports_entry_without_task(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "doc-1", "--decision", "approve")
    remove_checkpoint(state_dir, "doc-1")
    assert _kinds(_doctor(cli)) == ["entry_without_task"]


def test_doctor_reports_cancelled_with_entry(cli, state_dir):
    from state.files.store import Store
    from state.files.ledger import Ledger

    _start(cli)
    cli("resume", "--task", "doc-1", "--decision", "reject")
    cp = Store(state_dir).load("doc-1")
    Ledger(state_dir / "ledger").record(key="doc-1", task_id="doc-1", action="publish_draft", title="T",
                                        content_sha256=cp.content_sha256)
    assert _kinds(_doctor(cli)) == ["cancelled_with_entry"]


def test_doctor_reports_entry_for_other_content(cli, state_dir):
    from state.files.ledger import Ledger

    _start(cli)
    Ledger(state_dir / "ledger").record(key="doc-1", task_id="doc-1", action="publish_draft", title="T",
                                        content_sha256="0" * 64)
    assert _kinds(_doctor(cli)) == ["entry_mismatch"]


def test_doctor_recommends_resume_after_a_crash(state_dir):
    """Real crashes (os._exit at a failpoint): after the decision → decision_not_finished; after
    the ledger entry → executed_not_recorded; both recommend the exact resume, which fixes it."""
    for key, point, decision, kind in (
        ("c-1", "checkpoint:decision:after", "reject", "decision_not_finished"),
        ("c-2", "checkpoint:decision:after", "approve", "decision_not_finished"),
        ("c-3", "ledger:record:after", "approve", "executed_not_recorded"),
    ):
        assert step(state_dir, "start", "--key", key, "--draft", key).code == 0
        crashed = run_cli(state_dir, "resume", "--task", key, "--decision", decision,
                          env={"HITL_FAILPOINT": point})
        assert crashed.code == 86
        r = in_process(state_dir, "doctor", "--json")
        assert r.code == 1 and r.err.startswith("STOPPED: doctor found 1 inconsistency")
        (finding,) = r.json()["findings"]
        assert finding["kind"] == kind and finding["task_id"] == key
        assert finding["action"] == f"python run.py resume --task {key} --decision {decision}"
        assert step(state_dir, "resume", "--task", key, "--decision", decision).code == 0
        assert in_process(state_dir, "doctor").code == 0


def test_doctor_reports_unreadable_files(cli, state_dir):
    _start(cli, "bad-1")
    _start(cli, "bad-2")
    cli("resume", "--task", "bad-2", "--decision", "approve")
    checkpoint_file(state_dir, "bad-1").write_bytes(b'{"schema_version": 1, "trunc')
    _ledger_file(state_dir, "bad-2").write_bytes(b"\x00\x00")
    report = _doctor(cli)
    assert _kinds(report) == ["completed_without_entry", "unreadable_checkpoint",
                              "unreadable_ledger_entry"]
    text = cli("doctor")
    assert text.code == 1 and "not valid JSON" in text.out and "action:" in text.out


def _plant_temps(state_dir):
    from state.files.store import file_name

    stem = file_name("doc-1")
    folder = state_dir / "checkpoints" / stem  # the task's folder
    ours = [folder / f".tmp-{stem}.abcd1234.part",
            state_dir / "ledger" / f".tmp-{stem}.zz_99xyz.part",
            state_dir / ".tmp-signing.key.k3y0000a.part"]
    unknown = folder / ".tmp-x8d7q2.part"
    (state_dir / "ledger").mkdir(exist_ok=True)
    for p in [*ours, unknown]:
        p.write_bytes(b'{"half": ')
    return ours, unknown


def test_doctor_is_read_only_by_default(cli, state_dir):
    _start(cli)
    cli("resume", "--task", "doc-1", "--decision", "approve")
    _plant_temps(state_dir)
    _ledger_file(state_dir, "doc-1").unlink()
    before = snapshot(state_dir)
    report = _doctor(cli)
    assert _kinds(report) == ["completed_without_entry", "leftover_temp", "leftover_temp",
                              "leftover_temp", "unknown_temp"]
    assert report["repairs"] == []
    assert snapshot(state_dir) == before


def test_doctor_repair_deletes_only_provable_leftovers(cli, state_dir):
    _start(cli)
    ours, unknown = _plant_temps(state_dir)
    before = snapshot(state_dir)
    report = _doctor(cli, "--repair")
    assert sorted(r["path"] for r in report["repairs"]) == sorted(str(p) for p in ours)
    assert all(r["result"] == "deleted" for r in report["repairs"])
    assert _kinds(report) == ["unknown_temp"] and not report["consistent"]
    assert not any(p.exists() for p in ours) and unknown.exists()
    after = snapshot(state_dir)
    changed = {k for k in before if before[k] != after.get(k)}
    assert {k.rsplit("/", 1)[-1].rsplit("\\", 1)[-1] for k in changed} == {p.name for p in ours}
    unknown.unlink()
    again = cli("doctor", "--repair")
    assert again.code == 0 and "repaired" not in again.out


def test_doctor_repair_leaves_a_busy_tasks_temp_alone(state_dir, tmp_path):
    """A live resume holds the task lock (hung at a failpoint): its temp file may be in use, so
    --repair must not delete it and reports the task busy; after the holder is killed it does."""
    from state.files.store import file_name

    assert step(state_dir, "start", "--key", "doc-1", "--draft", "x").code == 0
    log = tmp_path / "fp.log"
    holder = spawn(state_dir, "resume", "--task", "doc-1", "--decision", "approve",
                   env={"HITL_FAILPOINT": "checkpoint:decision:after",
                        "HITL_FAILPOINT_ACTION": "hang", "HITL_FAILPOINT_LOG": str(log)})
    tmp = state_dir / "checkpoints" / file_name("doc-1") / f".tmp-{file_name('doc-1')}.abcd1234.part"
    try:
        import time

        deadline = time.monotonic() + 60
        while not (log.exists() and "checkpoint:decision:after" in log.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        tmp.write_bytes(b"in use")
        r = in_process(state_dir, "doctor", "--repair", "--json")
        report = r.json()
        assert r.code == 0 and report["repairs"] == []  # busy is a note, not an inconsistency
        assert sorted(f["kind"] for f in report["findings"]) == ["busy", "busy"]
        assert tmp.exists()
    finally:
        holder.kill()
    r = in_process(state_dir, "doctor", "--repair", "--json")
    assert [x["result"] for x in r.json()["repairs"]] == ["deleted"] and not tmp.exists()
    assert r.json()["findings"][0]["kind"] == "decision_not_finished"


def test_doctor_does_not_import_the_sdk(cli, state_dir):
    _start(cli)
    code = ("import sys, run; "
            f"rc = [run.main(['--state-dir', {str(state_dir)!r}, 'doctor', *a]) for a in ([], ['--repair'])]; "
            "print(rc, 'agents' in sys.modules, 'openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[0, 0] False False", out.stdout + out.stderr


class _Wrapped:
    """A store doctor has never heard of: the file store behind plain delegation (no subclass)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @property
    def location(self):
        return self._inner.location

    def inspect(self, *, repair=False):
        return self._inner.inspect(repair=repair)


def test_doctor_works_over_any_inspectable_store(cli, state_dir):
    """Why: doctor judges what a store lists through its one capability (``Inspectable``), never
    by asking which kind of store it has: a store of another class gets the same report."""
    from state.files.store import Store
    from workflow.ops.doctor import doctor

    _start(cli, "any-1")
    _start(cli, "any-2")
    cli("resume", "--task", "any-1", "--decision", "approve")
    _ledger_file(state_dir, "any-1").unlink()
    (checkpoint_file(state_dir, "any-1").parent / ".tmp-stray").write_text("x")
    expected = doctor(Store(state_dir))
    assert sorted(f["kind"] for f in expected["findings"]) == ["completed_without_entry", "unknown_temp"]
    assert doctor(_Wrapped(Store(state_dir))) == expected


def test_doctor_refuses_a_store_it_cannot_inspect(tmp_path):
    """Why: a store without the capability is refused by name, one line, nothing read (never a
    guess at its internals, never a traceback)."""
    import pytest

    from state.errors import Refused
    from workflow.ops.doctor import doctor

    class Bare:
        location = "bare://nowhere"

    with pytest.raises(Refused, match="cannot be checked by doctor"):
        doctor(Bare())


def test_doctor_states_its_actions_as_data_and_the_command_line_words_them(cli, state_dir):
    """Why: the library names no command of ``run.py``; a finding's ``action`` is text and
    :class:`state.errors.Next` steps, and ``run.py doctor`` (text and ``--json``) prints them in the
    command line's words (``cli.hints``), the same words as before they were data."""
    from cli.hints import hint
    from state.errors import Next
    from state.files.store import Store
    from workflow.ops.doctor import doctor, with_actions

    _start(cli)
    _plant_temps(state_dir)
    found = doctor(Store(state_dir))
    actions = {f["kind"]: f["action"] for f in found["findings"]}
    assert actions == {"leftover_temp": (Next("doctor_repair"), " deletes it"),
                       "unknown_temp": ("delete it by hand ", Next("when_idle"))}
    worded = {"leftover_temp": "python run.py doctor --repair deletes it",
              "unknown_temp": "delete it by hand when no run.py process is running"}
    assert {f["kind"]: f["action"] for f in with_actions(found, hint)["findings"]} == worded
    assert {f["kind"]: f["action"] for f in _doctor(cli)["findings"]} == worded
    text = cli("doctor").out
    assert all(f"    action: {words}\n" in text for words in worded.values()), text


def test_doctor_reads_the_effects_folder_and_reports_a_symlink_or_fifo_there(cli, state_dir, tmp_path):
    """Why: ``effects/`` is the store's own folder (the intent a local effect's approve wrote there
    is no finding), but a record in it that is a symlink or a FIFO cannot be trusted, as in
    ``ledger/``: reported, never followed, never blocking."""
    import os

    import pytest

    from state.files.store import file_name

    if not hasattr(os, "mkfifo"):
        pytest.skip("symlinks/FIFOs: POSIX")
    _start(cli, "eff-1")
    assert cli("resume", "--task", "eff-1", "--decision", "approve").code == 0
    assert [p.name for p in (state_dir / "effects").iterdir()] == [f"{file_name('eff-1')}.1.intent.json"]
    assert _doctor(cli)["consistent"]
    stem = file_name("eff-1")
    (state_dir / "effects" / f"{stem}.2.intent.json").symlink_to(tmp_path / "nowhere.json")
    os.mkfifo(state_dir / "effects" / f"{stem}.1.settled.json")
    report = _doctor(cli)
    assert _kinds(report) == ["unreadable_effect_record", "unreadable_effect_record"]
    assert {f["path"].rsplit("/", 1)[-1] for f in report["findings"]} == {f"{stem}.2.intent.json",
                                                                         f"{stem}.1.settled.json"}


# -- effects through a service: an intent without outcome ----------------------------------------

SERVICE = "http://127.0.0.1:9/publish"  # recorded only: doctor never sends anything


def _begun(state_dir, key, *, deduplicates, decision="approve", sent=True):
    """A real task whose decision is recorded (a crash right after it, or a reject that finished),
    then what the gate writes before its request: the checkpoint names the service, and the
    attempt's intent is recorded with no outcome; ``sent``: the attempt is bound into the
    checkpoint too (a request may have been sent). Returns the call ID."""
    from conftest import resign
    from state import clock
    from state.files.store import Store
    from state.records import EffectIntent

    assert step(state_dir, "start", "--key", key, "--draft", key).code == 0
    if decision is None:  # no decision on record (an older checkpoint put back, say)
        pass
    elif decision == "approve":
        crashed = run_cli(state_dir, "resume", "--task", key, "--decision", "approve",
                          env={"HITL_FAILPOINT": "checkpoint:decision:after"})
        assert crashed.code == 86
    else:
        assert step(state_dir, "resume", "--task", key, "--decision", decision).code == 0
    bound = [{"idempotency_key": key, "attempt": 1, "request_key": "b" * 32, "sent_at": clock.now_iso(),
              "window_ends": clock.now_iso()}] if sent else []
    resign(state_dir, checkpoint_file(state_dir, key), lambda d: d.update(service=SERVICE, effects=bound))
    store = Store(state_dir)
    cp = store.load(key)
    channel = cp.channels[0]
    call_id = cp.decision.call_id if cp.decision else cp.pending[0].call_id
    store.intent_record(EffectIntent(
        idempotency_key=key, attempt=1, task_id=key, channel=channel, call_id=call_id,
        action=cp.action, content_sha256=cp.expected_sha256(channel), request_key="b" * 32, service=SERVICE,
        deduplicates=deduplicates, at=clock.now_iso()))
    return call_id


def test_doctor_says_resume_for_an_effect_not_confirmed(state_dir):
    _begun(state_dir, "pub-1", deduplicates=True)
    r = in_process(state_dir, "doctor", "--json")
    assert r.code == 1
    (finding,) = r.json()["findings"]
    assert finding["kind"] == "effect_unconfirmed" and finding["task_id"] == "pub-1"
    assert SERVICE in finding["detail"] and "attempt 1" in finding["detail"]
    assert finding["action"].startswith("python run.py resume --task pub-1 --decision approve; if the service "
                                        "cannot confirm it")
    assert finding["action"].endswith(" --outcome published|not-published --by NAME")  # the way out
    text = in_process(state_dir, "doctor")
    assert "effect_unconfirmed" in text.out and "action: python run.py resume --task pub-1" in text.out


def test_doctor_says_settle_for_an_effect_in_doubt(state_dir):
    call = _begun(state_dir, "doubt-1", deduplicates=False)
    r = in_process(state_dir, "doctor", "--json")
    assert r.code == 1
    (finding,) = r.json()["findings"]
    assert finding["kind"] == "effect_in_doubt" and SERVICE in finding["detail"]
    assert finding["action"] == ("a human looks at the service, then settles it: python run.py settle --task "
                                 f"doubt-1 --call {call} --outcome published|not-published --by NAME")
    assert "python run.py settle --task doubt-1" in in_process(state_dir, "doctor").out


def test_doctor_reports_a_cancelled_task_whose_effect_was_begun(state_dir):
    _begun(state_dir, "can-1", deduplicates=True, decision="reject")
    (finding,) = in_process(state_dir, "doctor", "--json").json()["findings"]
    assert finding["kind"] == "cancelled_with_intent" and SERVICE in finding["detail"]
    assert finding["action"].startswith("a human must check")


def test_doctor_reads_the_intent_of_a_task_without_a_service_too(state_dir):
    """The intent is evidence for every task: an approved local-ledger task with one (a local
    effect's function begun) is an effect not confirmed, not a decision that merely did not finish."""
    _begun(state_dir, "loc-1", deduplicates=True)
    from conftest import resign

    resign(state_dir, checkpoint_file(state_dir, "loc-1"), lambda d: d.update(service=None))
    (finding,) = in_process(state_dir, "doctor", "--json").json()["findings"]
    assert finding["kind"] == "effect_unconfirmed"


def test_expire_never_cancels_a_task_whose_effect_was_begun(state_dir, monkeypatch):
    """Overdue, publishing or in doubt: ``expire`` leaves it alone (an action that may have executed
    is never cancelled), even with no approval on record (which alone would let it expire); the
    same overdue task with nothing begun is expired."""
    from datetime import timedelta

    from state import clock

    _begun(state_dir, "exp-1", deduplicates=True)
    _begun(state_dir, "exp-2", deduplicates=False)
    _begun(state_dir, "exp-3", deduplicates=True, decision=None)
    _begun(state_dir, "exp-4", deduplicates=False, decision=None)
    assert step(state_dir, "start", "--key", "exp-5", "--draft", "x").code == 0
    moved = clock.wall() + timedelta(days=30)
    monkeypatch.setenv("HITL_NOW", clock.iso(moved))
    r = in_process(state_dir, "expire", "--json")
    assert r.code == 0 and r.json()["expired"] == ["exp-5"], r.out
    for key in ("exp-1", "exp-2", "exp-3", "exp-4"):
        refused = in_process(state_dir, "expire", "--task", key)
        refused.assert_stopped()
        assert f"task {key}: its effect on blog was begun at " in refused.err
        assert "it is never marked expired (deadline " in refused.err and clock.iso(moved) in refused.err


def test_expire_refusing_a_begun_effect_names_only_dates_of_the_records_and_the_moved_clock(state_dir, monkeypatch):
    """Under a clock moved past the deadline, ``expire --task`` of a task whose effect was begun
    says so, with the intent's date, the task's deadline and the clock's now (``HITL_NOW``), and
    no other date; it never claims the task is not overdue. Nothing changes on disk."""
    import re
    from datetime import timedelta

    from state import clock
    from state.files.store import Store

    _begun(state_dir, "exp-6", deduplicates=True)
    store = Store(state_dir)
    cp, intent = store.load("exp-6"), store.intent_get("exp-6")
    before = snapshot(state_dir)
    for moved in (clock.wall() + timedelta(days=30), clock.wall() + timedelta(days=400)):
        monkeypatch.setenv("HITL_NOW", clock.iso(moved))
        r = in_process(state_dir, "expire", "--task", "exp-6")
        r.assert_stopped()
        assert "not overdue" not in r.err and "not an overdue" not in r.err
        assert (f"task exp-6: its effect on blog was begun at {intent.at} (an intent is recorded, no outcome "
                f"yet), so it may have happened; it is never marked expired (deadline {cp.expires_at}, the clock "
                f"says {clock.iso(moved)})") in r.err
        dates = re.findall(r"\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d)", r.err)
        assert dates and set(dates) <= {intent.at, cp.expires_at, clock.iso(moved)}, dates
        assert snapshot(state_dir) == before


def test_expire_of_a_task_not_yet_due_names_the_moved_clock(state_dir, monkeypatch):
    from datetime import timedelta

    from state import clock

    assert step(state_dir, "start", "--key", "exp-7", "--draft", "x", "--expires-in", "2h").code == 0
    from state.files.store import Store

    deadline = Store(state_dir).load("exp-7").expires_at
    moved = clock.parse_iso(deadline) - timedelta(minutes=30)
    monkeypatch.setenv("HITL_NOW", clock.iso(moved))
    before = snapshot(state_dir)
    r = in_process(state_dir, "expire", "--task", "exp-7")
    r.assert_stopped()
    assert f"task exp-7 is not overdue (deadline {deadline}, the clock says {clock.iso(moved)})" in r.err
    assert snapshot(state_dir) == before


@pytest.mark.parametrize("decision, status", [("reject", "cancelled"), ("approve", "completed")])
def test_expire_of_an_ended_task_says_it_ended_never_that_it_is_not_overdue(state_dir, monkeypatch, decision,
                                                                            status):
    """Even past its deadline, an ended task has no request to expire: the refusal says the task
    ended (never "not overdue"), and nothing changes on disk."""
    from datetime import timedelta

    from state import clock

    assert step(state_dir, "start", "--key", "exp-8", "--draft", "x", "--expires-in", "2h").code == 0
    assert step(state_dir, "resume", "--task", "exp-8", "--decision", decision, "--reason", "r").code == 0
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=2)))
    before = snapshot(state_dir)
    r = in_process(state_dir, "expire", "--task", "exp-8")
    r.assert_stopped()
    assert f"task exp-8 is {status}: no approval request of it waits, so none expires; nothing changed" in r.err
    assert snapshot(state_dir) == before


# -- records of an earlier version: unsigned (state/adoption.py) --------------------------------------

def _strip(path) -> None:
    """Make the signed record at ``path`` what an earlier version wrote: its fields, no signature."""
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({k: v for k, v in data.items() if k not in ("record", "state_id", "mac")}),
                    encoding="utf-8")


def test_unsigned_records_of_a_task_with_several_channels_are_signed_when_its_checkpoint_proves_them(
        cli, state_dir):
    """Why: a task approved on one channel and rejected on another ends ``completed`` with a ledger
    entry (``<task>#blog``) and a rejection record (``news``); written by an earlier version, both
    are proven by the signed checkpoint (the approval on blog for that content; that very reject on
    news), so ``doctor --repair`` signs both, and nothing else."""
    from conftest import record_path

    r = cli("start", "--key", "ch-1", "--title", "T", "--draft", "D", "--channel", "blog", "--channel", "news",
            "--json")
    calls = {p["arguments"]["channel"]: p["call_id"] for p in r.json()["pending"]}
    assert cli("resume", "--task", "ch-1", "--call", calls["news"], "--decision", "reject", "--by", "bo").code == 0
    assert cli("resume", "--task", "ch-1", "--call", calls["blog"], "--decision", "approve", "--by", "al").code == 0
    entry = record_path(state_dir, "ledger_entry", {"idempotency_key": "ch-1#blog"})
    rejection = record_path(state_dir, "rejection", {"task_id": "ch-1", "channel": "news"})
    _strip(entry), _strip(rejection)
    report = _doctor(cli)
    assert _kinds(report) == ["not_judged", "unsigned_record", "unsigned_record"]
    repaired = _doctor(cli, "--repair")
    assert sorted(r["path"] for r in repaired["repairs"]) == sorted([str(entry), str(rejection)])
    assert repaired["consistent"], repaired


def test_an_unsigned_entry_whose_content_is_not_what_was_approved_is_never_signed(cli, state_dir):
    """Why: an entry of a completed task is proven only for the content approved on its channel;
    one for other content (an earlier version's, edited by hand: nothing can tell) is left to a
    person, however completed the task is, and ``--repair`` changes nothing of it."""
    import json

    _start(cli, "cx-1")
    cli("resume", "--task", "cx-1", "--decision", "approve")
    path = _ledger_file(state_dir, "cx-1")
    _strip(path)
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), "content_sha256": "0" * 64}),
                    encoding="utf-8")
    before = snapshot(state_dir / "ledger")
    report = _doctor(cli, "--repair")
    [finding] = [f for f in report["findings"] if f["kind"] != "not_judged"]
    assert finding["kind"] == "unsigned_unproven" and "not the content approved on blog" in finding["detail"]
    assert report["repairs"] == [] and snapshot(state_dir / "ledger") == before


def test_an_unsigned_rejection_record_whose_reject_the_checkpoint_does_not_record_is_never_signed(cli, state_dir):
    """Why: a rejection record is proven only by that very reject in the signed checkpoint (same
    call, reviewer, time); one naming another reviewer is left to a person."""
    import json

    from state.files import rejections
    from state.files.store import Store

    _start(cli, "rj-1")
    cli("resume", "--task", "rj-1", "--decision", "reject", "--by", "bob")
    path = rejections.path_for(Store(state_dir), "rj-1")
    _strip(path)
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), "by": "mallory"}), encoding="utf-8")
    report = _doctor(cli, "--repair")
    assert _kinds(report) == ["not_judged", "unsigned_unproven"] and report["repairs"] == []
    assert "the checkpoint records no such reject" in report["findings"][0]["detail"]


@pytest.mark.parametrize("failpoint", ["checkpoint:decision:after", "ledger:record:before"])
def test_status_of_a_decision_cut_off_names_the_same_decision_not_a_new_one(cli, state_dir, failpoint):
    """A crash after the decision was recorded (before the effect, or after the function ran): the
    call needs no new decision (a reject is refused now), so ``status`` names the same decision
    again, which finishes it, and ``doctor``, instead of "approve (or reject)"."""
    from conftest import run_subprocess

    _start(cli, "cut-1")
    crashed = run_subprocess(state_dir, "resume", "--task", "cut-1", "--decision", "approve",
                             env={"HITL_FAILPOINT": failpoint})
    assert crashed.code == 86, crashed.err
    out = cli("status", "--task", "cut-1").out
    assert ("  next: python run.py resume --task cut-1 --decision approve (it finishes the decision on record; "
            "python run.py doctor explains)") in out, out
    assert "or reject" not in out
    assert cli("resume", "--task", "cut-1", "--decision", "approve").code == 0


def test_a_two_call_task_cut_off_names_the_undecided_call_and_doctor_names_the_call_it_sends_again(cli, state_dir):
    """Two channels; blog is approved and the process dies after blog's function began (before
    its ledger entry). ``status`` names the call still undecided (news), not the one decided; after
    a person settles blog not published, doctor's ``effect_not_sent`` action names blog's call
    (a resume without ``--call`` is refused in a task of several calls). Each printed command,
    pasted, runs: blog is published once, news is rejected."""
    import shlex

    from conftest import ledger_entries, run_subprocess

    r = cli("start", "--key", "two-1", "--title", "T", "--draft", "A draft.", "--channel", "blog", "--channel",
            "news", "--json")
    assert r.code == 0, r.err
    blog, news = (next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == c)
                  for c in ("blog", "news"))
    crashed = run_subprocess(state_dir, "resume", "--task", "two-1", "--call", blog, "--decision", "approve",
                             "--by", "ann", env={"HITL_FAILPOINT": "ledger:record:before"})
    assert crashed.code == 86, crashed.err
    out = cli("status", "--task", "two-1").out
    assert (f"  next: python run.py resume --task two-1 --call {news} --decision approve "
            f'(or reject --reason "..."; either also carries out the decision on record of call {blog})') in out, out
    settled = cli("settle", "--task", "two-1", "--call", blog, "--outcome", "not-published", "--by", "ann")
    assert settled.code == 0, settled.err
    [finding] = _doctor(cli)["findings"]
    assert finding["kind"] == "effect_not_sent", finding
    pasted = finding["action"].split(" sends it again")[0]
    assert pasted == f"python run.py resume --task two-1 --call {blog} --decision approve", finding
    again = cli(*shlex.split(pasted)[2:], "--by", "ann")
    assert again.code == 0, again.err
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["two-1#blog"]
    done = cli("resume", "--task", "two-1", "--call", news, "--decision", "reject", "--by", "ann", "--json")
    assert done.code == 0 and done.json()["status"] == "completed", done.err
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["two-1#blog"]


def test_a_call_given_up_in_a_task_of_several_calls_is_ended_by_the_fail_doctor_names(cli, state_dir):
    """Two channels; blog's function began, then a crash; a person settles it not done. doctor's
    way to give it up, ``fail``, pasted, ends the task failed with nothing published, though news
    is undecided: a reject of news would carry blog's approval out. With no call approved, ``fail``
    is refused for the undecided call, naming the reject of that call (``--call``: a reject without
    it is refused in a task of several calls)."""
    import shlex

    from conftest import ledger_entries, run_subprocess

    r = cli("start", "--key", "two-2", "--title", "T", "--draft", "A draft.", "--channel", "blog", "--channel",
            "news", "--json")
    assert r.code == 0, r.err
    blog, news = (next(p["call_id"] for p in r.json()["pending"] if p["arguments"]["channel"] == c)
                  for c in ("blog", "news"))
    undecided = cli("fail", "--task", "two-2", "--by", "ann", "--reason", "x")
    undecided.assert_stopped()
    hinted = undecided.err.split("a reject of each of them ends it (cancelled), starting with call ")[1].split(
        " (")[1].split(")")[0]
    assert hinted.startswith("python run.py resume --task two-2 --call call_"), undecided.err
    crashed = run_subprocess(state_dir, "resume", "--task", "two-2", "--call", blog, "--decision", "approve",
                             "--by", "ann", env={"HITL_FAILPOINT": "ledger:record:before"})
    assert crashed.code == 86, crashed.err
    assert cli("settle", "--task", "two-2", "--call", blog, "--outcome", "not-published", "--by", "ann").code == 0
    [finding] = _doctor(cli)["findings"]
    give_up = finding["action"].split("to give it up, ")[1]
    assert give_up == "python run.py fail --task two-2 --by NAME --reason TEXT", finding
    words = [{"NAME": "ann", "TEXT": "not today"}.get(w, w) for w in shlex.split(give_up)[2:]]
    ended = cli(*words, "--json")
    assert ended.code == 0 and ended.json()["status"] == "failed", ended.err
    assert ledger_entries(state_dir) == [] and _doctor(cli)["consistent"]
    assert cli("resume", "--task", "two-2", "--call", news, "--decision", "reject", "--by", "ann").code == 1


def test_a_task_failed_while_its_local_effect_was_begun_names_the_settle_that_ends_it(cli, state_dir):
    """The one order no check refuses: a ``fail`` whose check ran before the effect's intent and
    whose write landed after the gate read the checkpoint again, and then the function failed (a
    crash here). ``doctor`` names the way out, a person's ``settle`` after looking at what the
    function did, which then leaves the task consistent."""
    from conftest import run_subprocess
    from state.files.store import Store

    _start(cli, "half-1")
    crashed = run_subprocess(state_dir, "resume", "--task", "half-1", "--decision", "approve",
                             env={"HITL_FAILPOINT": "ledger:record:before"})
    assert crashed.code == 86, crashed.err
    store = Store(state_dir)
    store.save_revision(store.load("half-1"), failpoint="checkpoint:outcome", status="failed", pending=[],
                        expires_at=None, failure="ended by bob: gave up",
                        event=("failed", {"by": "bob", "reason": "gave up", "status": "failed"}))
    [finding] = _doctor(cli)["findings"]
    call = store.load("half-1").decision.call_id
    out = cli("status", "--task", "half-1").out
    assert ("  next: its effect may have happened (the task was ended while it ran): python run.py doctor names "
            "who checks it and the settle that ends it") in out and "nothing was done" not in out, out
    assert finding["kind"] == "cancelled_with_intent", finding
    assert finding["action"] == (
        f"a human must check what its function did, then settle it: python run.py settle --task half-1 "
        f"--call {call} --outcome published|not-published --by NAME (an action that may have executed is never "
        "marked cancelled)"), finding
    settled = cli("settle", "--task", "half-1", "--call", call, "--outcome", "not-published", "--by", "ann",
                  "--reason", "looked: no mail went out")
    assert settled.code == 0, settled.err
    assert _doctor(cli)["consistent"]
