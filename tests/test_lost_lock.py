"""A writer that lost its lock: correctness never depends on the lock file.

The lock file can be deleted while a process holds it (a cleanup script, a person); the next process
then creates a new one and "holds" the lock too. Each test pauses one command in this process at a
durable-write boundary (a failpoint), deletes its lock file, runs a rival decision on the same task
as a separate process, and lets the paused command go on. Whatever the interleaving: at most one
ledger entry, never a cancelled task with a ledger entry nor a completed one with a rejection
record, and every refusal is one STOPPED line.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from conftest import checkpoint_file, ledger_entries, run_subprocess
from state import failpoints

KEY = "ll-1"


def _start(cli) -> None:
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "Lost lock draft.").code == 0


def _lock(state_dir: Path) -> Path:
    from state.files.store import file_name

    return state_dir / "locks" / (file_name(KEY) + ".lock")


def _pause_at(monkeypatch, name: str, action) -> list[str]:
    """Make failpoint ``name`` run ``action()`` once, in this process, then go on."""
    real, seen = failpoints.hit, []

    def hit(point: str) -> None:
        if point == name and not seen:
            seen.append(point)
            action()
        real(point)

    monkeypatch.setattr(failpoints, "hit", hit)
    return seen


def _status(state_dir: Path) -> str:
    return json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))["status"]


def _rejection(state_dir: Path) -> bool:
    return any((state_dir / "rejections").glob("*.json")) if (state_dir / "rejections").exists() else False


def _assert_one_truth(state_dir: Path, cli) -> None:
    status, entries, rejected = _status(state_dir), ledger_entries(state_dir), _rejection(state_dir)
    assert len(entries) <= 1
    assert not (status == "cancelled" and entries), "cancelled with a ledger entry"
    assert not (status == "completed" and rejected), "completed with a rejection record"
    assert not (entries and rejected), "executed and rejected"
    report = cli("doctor", "--json")
    assert report.code == 0 and report.json()["consistent"], report.out


def _rival(state_dir: Path, decision: str, box: list) -> callable:
    def run() -> None:
        _lock(state_dir).unlink()  # the lock file is deleted under the holder
        box.append(run_subprocess(state_dir, "resume", "--task", KEY, "--decision", decision, "--json"))
    return run


def test_approver_paused_before_its_decision_loses_to_a_reject(cli, state_dir, monkeypatch):
    """The case that used to end cancelled *with* a ledger entry: the approver's write is a
    compare-and-swap on the revision it read, so it is refused once the reject is on disk."""
    _start(cli)
    rival: list = []
    seen = _pause_at(monkeypatch, "checkpoint:decision:before", _rival(state_dir, "reject", rival))
    r = cli("resume", "--task", KEY, "--decision", "approve")
    assert seen and rival[0].code == 0 and json.loads(rival[0].out)["status"] == "cancelled"
    r.assert_stopped()
    assert "changed on disk since it was read" in r.err
    assert _status(state_dir) == "cancelled" and ledger_entries(state_dir) == []
    _assert_one_truth(state_dir, cli)


def test_reject_after_the_approval_is_recorded_is_refused(cli, state_dir, monkeypatch):
    _start(cli)
    rival: list = []
    _pause_at(monkeypatch, "checkpoint:decision:after", _rival(state_dir, "reject", rival))
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    rival[0].assert_stopped()
    assert "already recorded" in rival[0].err
    assert r.code == 0 and r.json()["status"] == "completed"
    _assert_one_truth(state_dir, cli)


def test_rejecter_paused_before_its_record_loses_to_an_approval(cli, state_dir, monkeypatch):
    """The reject creates its record, finds the ledger entry the approver wrote meanwhile, removes
    its own record again and stops: an executed action is never cancelled, and nothing is left."""
    _start(cli)
    rival: list = []
    _pause_at(monkeypatch, "rejection:record:before", _rival(state_dir, "approve", rival))
    r = cli("resume", "--task", KEY, "--decision", "reject")
    assert rival[0].code == 0 and json.loads(rival[0].out)["status"] == "completed"
    r.assert_stopped()
    assert "already executed" in r.err
    assert _status(state_dir) == "completed" and not _rejection(state_dir)
    _assert_one_truth(state_dir, cli)


def test_approval_after_the_rejection_record_is_refused(cli, state_dir, monkeypatch):
    _start(cli)
    rival: list = []
    _pause_at(monkeypatch, "checkpoint:decision:before", _rival(state_dir, "approve", rival))
    r = cli("resume", "--task", KEY, "--decision", "reject", "--json")
    rival[0].assert_stopped()
    assert "can never be approved" in rival[0].err
    assert r.code == 0 and r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    _assert_one_truth(state_dir, cli)


def test_a_refused_reject_leaves_the_record_the_winning_reject_relies_on(cli, state_dir, monkeypatch):
    """Two rejects, the lock lost: the paused one created the rejection record, the rival found it,
    recorded its reject and ended the task cancelled; the paused one, refused by the
    compare-and-swap, removes the record it created. The record must be there again (it is what
    keeps an older copy of the checkpoint from being approved), so a backup put back cannot
    publish the cancelled task."""
    from conftest import restore_checkpoint

    _start(cli)
    backup = checkpoint_file(state_dir, KEY).read_bytes()
    rival: list = []
    seen = _pause_at(monkeypatch, "rejection:record:after", _rival(state_dir, "reject", rival))
    r = cli("resume", "--task", KEY, "--decision", "reject")
    assert seen and rival[0].code == 0 and json.loads(rival[0].out)["status"] == "cancelled"
    r.assert_stopped()
    assert _status(state_dir) == "cancelled" and _rejection(state_dir)
    _assert_one_truth(state_dir, cli)
    monkeypatch.undo()
    restore_checkpoint(state_dir, KEY, backup)
    again = cli("resume", "--task", KEY, "--decision", "approve")
    again.assert_stopped()
    assert "can never be approved" in again.err and ledger_entries(state_dir) == []


def test_on_postgresql_a_refused_reject_leaves_the_record_the_winning_reject_relies_on(
        pg_url, tmp_path, monkeypatch):
    """The same two rejects on PostgreSQL, the paused one holding no lock (as if its session's
    advisory lock were lost): the winning reject's record is still there, and its task cancelled."""
    import contextlib

    from conftest import run_in_process
    from state.postgres.store import PostgresStore
    from state.store import open_store

    state_dir = tmp_path / "state"
    store = ["--store", pg_url]
    assert run_in_process(state_dir, *store, "start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    monkeypatch.setattr(PostgresStore, "task_lock", lambda self, *a, **k: contextlib.nullcontext())
    rival: list = []
    seen = _pause_at(monkeypatch, "rejection:record:after", lambda: rival.append(run_subprocess(
        state_dir, *store, "resume", "--task", KEY, "--decision", "reject", "--json")))
    r = run_in_process(state_dir, *store, "resume", "--task", KEY, "--decision", "reject")
    assert seen and rival[0].code == 0 and json.loads(rival[0].out)["status"] == "cancelled"
    r.assert_stopped()
    found = open_store(pg_url, str(state_dir))
    assert found.load(KEY).status == "cancelled" and found.rejection_get(KEY) is not None


def test_reject_paused_before_its_outcome_cannot_be_overtaken(cli, state_dir, monkeypatch):
    _start(cli)
    rival: list = []
    _pause_at(monkeypatch, "checkpoint:outcome:before", _rival(state_dir, "approve", rival))
    r = cli("resume", "--task", KEY, "--decision", "reject", "--json")
    rival[0].assert_stopped()
    assert r.code == 0 and r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    _assert_one_truth(state_dir, cli)


def test_the_tool_rechecks_the_rejection_record_right_before_its_effect(cli, state_dir, monkeypatch):
    """The last line of defence: both writers passed their compare-and-swap in the same instant
    (the only window left), so the approver runs with a reject on record. The tool reads the
    rejection record right before the ledger entry and publishes nothing."""
    from state.files import rejections
    from state.schema import Decision
    from state.files.store import Store

    _start(cli)

    def reject_lands() -> None:
        cp = Store(state_dir).load(KEY)
        call = cp.pending[0]
        rejections.record(Store(state_dir), KEY, cp.content_sha256, Decision(
            decision="rejected", by="bob", at="2100-01-01T00:00:00Z", reason=None,
            call_id=call.call_id, tool=call.tool, arguments_sha256="0" * 64, channel="blog",
            always=False, source="human"))

    _pause_at(monkeypatch, "checkpoint:decision:after", reject_lands)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "a reject by bob" in r.err and "nothing was published" in r.err
    assert ledger_entries(state_dir) == []


def test_an_effect_whose_intent_comes_after_fails_mark_never_runs(cli, state_dir, monkeypatch):
    """A lock file deleted under an approve about to write its effect's intent; a ``fail`` by another
    process writes its end mark and is killed before its ``failed`` revision. The approve writes its
    intent, reads the mark (the meeting point of the two) and runs nothing; its intent is settled
    not done by the program, and the same ``fail`` then ends the task."""
    _start(cli)

    def fail_cut_after_its_mark() -> None:
        _lock(state_dir).unlink()
        r = run_subprocess(state_dir, "fail", "--task", KEY, "--by", "bob", "--reason", "gone",
                           env={"HITL_FAILPOINT": "checkpoint:outcome:before"})
        assert r.code == 86, r.err

    _pause_at(monkeypatch, "effect:intent:before", fail_cut_after_its_mark)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "the task was ended by bob at" in r.err and "nothing was published" in r.err, r.err
    assert ledger_entries(state_dir) == []
    again = cli("fail", "--task", KEY, "--by", "bob", "--reason", "gone", "--json")
    assert again.code == 0 and again.json()["status"] == "failed", again.err
    assert ledger_entries(state_dir) == [] and cli("doctor", "--json").json()["consistent"]


def test_a_fail_that_meets_an_effect_begun_after_its_check_is_refused_and_keeps_its_mark(cli, state_dir,
                                                                                        monkeypatch):
    """A lock file deleted: an approve's gate writes its intent after ``fail`` judged the task and
    before its end mark (the only window its check does not cover). ``fail`` reads the intents after
    its mark, finds the effect begun and is refused; its mark stays (another ``fail`` may rely on
    it), so no effect of the task starts again. doctor names the settle, then the same ``fail``."""
    from forking import run_cli
    from state.clock import now_iso
    from state.files.store import Store
    from state.records import LOCAL_EFFECT, EffectIntent
    from workflow.settlement import fail

    _start(cli)
    cut = run_cli(state_dir, "resume", "--task", KEY, "--decision", "approve",
                  env={"HITL_FAILPOINT": "checkpoint:decision:after"})
    assert cut.code == 86, cut.err
    store = Store(state_dir)
    call_id = store.load(KEY).pending[0].call_id

    def the_gate_writes_its_intent() -> None:
        cp = store.load(KEY)
        store.intent_record(EffectIntent(
            idempotency_key=KEY, attempt=1, task_id=KEY, channel="blog", call_id=call_id,
            action=cp.action, content_sha256=cp.content_sha256, request_key="a" * 32, service=LOCAL_EFFECT,
            deduplicates=True, at=now_iso(), window_ends=now_iso()))

    _pause_at(monkeypatch, "rejection:record:after", the_gate_writes_its_intent)
    with pytest.raises(Exception) as refused:
        fail(store, KEY, by="bob", reason="gone")
    assert getattr(refused.value, "code", None) == "begun", refused.value
    assert _rejection(state_dir) and _status(state_dir) == "waiting_for_approval"
    again = cli("resume", "--task", KEY, "--decision", "approve")
    assert again.code == 1 and "was ended by bob" in again.err, again.err
    (finding,) = cli("doctor", "--json").json()["findings"]
    assert finding["kind"] == "fail_not_finished" and f"settle --task {KEY} --call {call_id}" in finding["action"]
    assert finding["action"].endswith(f"then python run.py fail --task {KEY} --by NAME --reason TEXT"), finding
    shown = cli("status", "--task", KEY).out.splitlines()[-1]
    assert shown.endswith("finishes it once a person has settled the effect begun (python run.py doctor names "
                          "the settle)"), shown
    found = cli("settle", "--task", KEY, "--call", call_id, "--outcome", "not-published", "--by", "ann",
                "--reason", "nothing there")
    assert found.code == 0, found.err
    assert found.out.splitlines()[-1].endswith(f"python run.py fail --task {KEY} --by NAME --reason TEXT finishes it")
    ended = cli("fail", "--task", KEY, "--by", "bob", "--reason", "gone", "--json")
    assert ended.code == 0 and ended.json()["status"] == "failed", ended.err
    assert ledger_entries(state_dir) == [] and cli("doctor", "--json").json()["consistent"]


def test_a_checkpoint_write_is_a_compare_and_swap_on_the_revision(cli, state_dir):
    from state.errors import Refused
    from state.files.store import Store

    _start(cli)
    store = Store(state_dir)
    stale = store.load(KEY)
    store.save_revision(stale, failpoint="t", event=("resumed", {}))  # someone else writes rev 2
    on_disk = checkpoint_file(state_dir, KEY).read_bytes()
    with pytest.raises(Refused, match=r"changed on disk since it was read \(revision 1 -> 2\)"):
        store.save_revision(stale, failpoint="t", event=("resumed", {}))
    assert checkpoint_file(state_dir, KEY).read_bytes() == on_disk
    assert not list(state_dir.rglob(".tmp-*"))  # no temp file left behind


def test_two_starts_of_one_key_create_the_checkpoint_once(cli, state_dir):
    """``start`` creates the first revision exclusively: a second writer that lost the lock never
    overwrites it."""
    from state.errors import Refused
    from state.files.store import Store

    _start(cli)
    store = Store(state_dir)
    body = store.load(KEY).body()
    with pytest.raises(Refused) as refused:
        store.save({**body, "revision": 1}, failpoint="t")
    assert refused.value.code == "stale_revision"


def _pause_after_compare(monkeypatch, write: str, action) -> dict[str, bool]:
    """Run ``action()`` once, in this process, right after the compare-and-swap check of the
    durable write named ``write`` passed and before that write is committed: the window in which a
    check followed by a separate replace used to let another process's outcome be overwritten."""
    from state.files.store import Store

    real_hit, real_check = failpoints.hit, Store.check_unchanged
    state = {"inside": False, "paused": False}

    def hit(point: str) -> None:
        if point == write + ":before":
            state["inside"] = True
        elif point == write + ":after":
            state["inside"] = False
        real_hit(point)

    def check_unchanged(self, cp) -> None:
        real_check(self, cp)
        if state["inside"] and not state["paused"]:
            state["paused"] = True
            action()

    monkeypatch.setattr(failpoints, "hit", hit)
    monkeypatch.setattr(Store, "check_unchanged", check_unchanged)
    return state


def _reported_is_on_disk(state_dir: Path, result, decision: str) -> None:
    """A command that exited 0 printed the status the files hold (and a completed task has its
    one ledger entry, a cancelled one none); one that exited 1 said so in one STOPPED line."""
    if result.code == 0:
        printed = json.loads(result.out)["status"]
        assert printed == _status(state_dir), (decision, printed, _status(state_dir))
        assert printed == ("completed" if decision == "approve" else "cancelled")
    else:
        result.assert_stopped()


@pytest.mark.parametrize("write", ["checkpoint:decision", "checkpoint:outcome"])
@pytest.mark.parametrize("paused,rival", [("approve", "reject"), ("reject", "approve")])
def test_no_interleaving_contradicts_a_reported_outcome(cli, state_dir, monkeypatch, write, paused,
                                                        rival):
    """One command is paused between its compare and its commit, its lock file is deleted, and a
    rival decision on the same task runs to the end as another process. Whatever the order, the
    outcome each command reported is what the files say: the one that lost exits 1 and changed
    nothing (the decision on record is the other one's)."""
    _start(cli)
    box: list = []
    seen = _pause_after_compare(monkeypatch, write, _rival(state_dir, rival, box))
    r = cli("resume", "--task", KEY, "--decision", paused, "--json")
    assert seen["paused"] and box
    other = box[0]
    _reported_is_on_disk(state_dir, r, paused)
    _reported_is_on_disk(state_dir, other, rival)
    assert (r.code, other.code).count(0) == 1, (r, other)  # exactly one decision stands
    winner = paused if r.code == 0 else rival
    on_disk = json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))
    assert on_disk["decision"]["decision"] == ("approved" if winner == "approve" else "rejected")
    _assert_one_truth(state_dir, cli)


def test_the_paused_approve_loses_to_a_reject_that_ran_to_the_end(cli, state_dir, monkeypatch):
    """The case as found: lock files deleted, an approve paused between its compare and its commit,
    a reject that runs to the end and prints ``cancelled``. The approve's commit (creating
    revision 2, which the reject created first) fails: it exits 1, and the task stays cancelled."""
    _start(cli)
    box: list = []
    _pause_after_compare(monkeypatch, "checkpoint:decision", _rival(state_dir, "reject", box))
    r = cli("resume", "--task", KEY, "--decision", "approve")
    assert box[0].code == 0 and json.loads(box[0].out)["status"] == "cancelled"
    r.assert_stopped()
    assert "changed on disk since it was read (revision 1 -> 2)" in r.err
    assert _status(state_dir) == "cancelled" and ledger_entries(state_dir) == []
    _assert_one_truth(state_dir, cli)


def test_many_writers_of_the_same_revision_exactly_one_wins(cli, state_dir, monkeypatch):
    """Eight writers read revision 1 and all pass the compare before any of them commits (a barrier
    right after the check): exactly one creates revision 2; the seven others are refused, and the
    checkpoint is the winner's."""
    import threading

    from state.errors import Refused
    from state.files.store import Store

    _start(cli)
    writers = 8
    barrier = threading.Barrier(writers, timeout=60)
    real_check = Store.check_unchanged

    def check_unchanged(self, cp) -> None:
        real_check(self, cp)
        barrier.wait()  # every writer has compared; now all commit at once

    monkeypatch.setattr(Store, "check_unchanged", check_unchanged)
    stale = Store(state_dir).load(KEY)
    won: list = []
    lost: list = []

    def write(n: int) -> None:
        try:
            won.append(Store(state_dir).save_revision(stale, failpoint="t", event=("resumed", {"n": n}),
                                                      title=f"writer {n}"))
        except Refused as exc:
            lost.append(str(exc))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(won) == 1 and len(lost) == writers - 1, (won, lost)
    assert all("changed on disk since it was read (revision 1 -> 2)" in m for m in lost)
    assert Store(state_dir).load(KEY) == won[0]
    assert not list(state_dir.rglob(".tmp-*"))


def test_a_writer_that_read_long_ago_cannot_recreate_a_cleared_revision(cli, state_dir, monkeypatch):
    """Revisions older than the newest two are cleared (0 bytes) but their names stay. A writer that
    passed its compare on revision 1 and then waited while another wrote revisions 2, 3 and 4
    (clearing 1 and 2) still finds the name of revision 2 taken: refused, nothing changed. (Had the
    cleanup removed the names, its link would succeed and a stale revision 2 would sit beside 4.)"""
    from state.errors import Refused
    from state.files.store import KEPT_REVISIONS, Store

    _start(cli)
    other = Store(state_dir)
    stale = other.load(KEY)
    real_check = Store.check_unchanged

    def check_unchanged(self, cp) -> None:
        real_check(self, cp)
        if self is not other:  # the stale writer has compared: now the other writes three times
            cp = other.load(KEY)
            for _ in range(3):
                cp = other.save_revision(cp, failpoint="t", event=("resumed", {}))

    monkeypatch.setattr(Store, "check_unchanged", check_unchanged)
    with pytest.raises(Refused, match=r"changed on disk since it was read \(revision 1 -> 2\)"):
        Store(state_dir).save_revision(stale, failpoint="t", event=("resumed", {}), title="stale")
    monkeypatch.undo()
    sizes = {p.name: p.stat().st_size for p in checkpoint_file(state_dir, KEY).parent.glob("*.json")}
    assert len(sizes) == 4 and sorted(sizes.values()).count(0) == 4 - KEPT_REVISIONS
    cp = Store(state_dir).load(KEY)
    assert cp.revision == 4 and cp.title == "T"


def test_a_lost_outcome_write_does_not_claim_nothing_was_written(cli, state_dir, monkeypatch):
    """An approve paused after recording its decision, its lock deleted, while a rival approve
    finishes the task: the paused one's outcome write loses the compare-and-swap. Its one STOPPED
    line says that write was not made and what this command did write before it (the decision),
    never "nothing was written", which its own revision on disk would contradict."""
    _start(cli)
    box: list = []
    _pause_at(monkeypatch, "checkpoint:decision:after", _rival(state_dir, "approve", box))
    r = cli("resume", "--task", KEY, "--decision", "approve")
    assert box and box[0].code == 0
    r.assert_stopped()
    assert "this write was not made" in r.err and "already done" in r.err, r.err
    assert "nothing was written" not in r.err, r.err
    assert _status(state_dir) == "completed" and len(ledger_entries(state_dir)) == 1
    _assert_one_truth(state_dir, cli)


@pytest.fixture
def publishing_service(tmp_path, monkeypatch):
    """A deduplicating publishing service in a thread, and this process's environment (the commands
    run here and those run as separate processes) set to publish through it."""
    from tools.publishing_service import start_in_thread

    token = "tok-lost-lock-service-3f9a"
    url, stop = start_in_thread(tmp_path / "svc", token=token)
    env = {"HITL_PUBLISH_URL": url, "HITL_PUBLISH_TOKEN": token, "HITL_PUBLISH_IDEMPOTENCY": "key",
           "HITL_PUBLISH_TIMEOUT": "5", "HITL_PUBLISH_SETTLE_AFTER": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    posts = lambda: httpx.get(url + "/v1/_stats", headers={"Authorization": f"Bearer {token}"},  # noqa: E731
                              timeout=10).json()["posts"]
    yield env, posts
    stop()


def _intents_settled_not_sent(state_dir: Path) -> list[str]:
    """The ``source`` of every settlement in the store's effects folder."""
    return [json.loads(p.read_text(encoding="utf-8"))["source"]
            for p in sorted((state_dir / "effects").glob("*.settled.json"))]


def test_a_request_whose_intent_comes_after_fails_mark_is_never_sent(cli, state_dir, monkeypatch, publishing_service):
    """Through a service, as on the local path: a ``fail`` writes its end mark (and is killed before its
    ``failed`` revision) after an approve's gate checked the task and before it wrote its intent. The
    approve reads the mark once its intent is there and sends no request; the intent is settled not
    sent by the program, and the same ``fail`` ends the task, doctor consistent."""
    env, posts = publishing_service
    _start(cli)

    def fail_cut_after_its_mark() -> None:
        _lock(state_dir).unlink()
        r = run_subprocess(state_dir, "fail", "--task", KEY, "--by", "bob", "--reason", "gone",
                           env={**env, "HITL_FAILPOINT": "checkpoint:outcome:before"})
        assert r.code == 86, r.err

    _pause_at(monkeypatch, "effect:intent:before", fail_cut_after_its_mark)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "the task was ended by bob at" in r.err and "nothing was published" in r.err, r.err
    assert posts() == 0 and ledger_entries(state_dir) == []
    assert _intents_settled_not_sent(state_dir) == ["not_sent"]
    again = cli("fail", "--task", KEY, "--by", "bob", "--reason", "gone", "--json")
    assert again.code == 0 and again.json()["status"] == "failed", again.err
    assert posts() == 0 and cli("doctor", "--json").json()["consistent"]


def test_a_request_whose_intent_comes_after_a_finished_fail_is_never_sent_nor_left_in_doubt(
        cli, state_dir, monkeypatch, publishing_service):
    """A ``fail`` that ran to its end (mark, no intent found, ``failed``) between an approve's checks
    and its intent: the approve sends nothing, and the intent it wrote is settled not sent by the
    program, so doctor finds the failed task consistent instead of an effect for a person to settle."""
    env, posts = publishing_service
    _start(cli)

    def fail_to_the_end() -> None:
        _lock(state_dir).unlink()
        r = run_subprocess(state_dir, "fail", "--task", KEY, "--by", "bob", "--reason", "gone", env=env)
        assert r.code == 0, r.err

    _pause_at(monkeypatch, "effect:intent:before", fail_to_the_end)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "nothing was published" in r.err and "run the same command again" not in r.err, r.err
    assert posts() == 0 and ledger_entries(state_dir) == [] and _status(state_dir) == "failed"
    assert _intents_settled_not_sent(state_dir) == ["not_sent"]
    assert cli("doctor", "--json").json()["consistent"]
