"""The decision table: every cell as printed in docs/decision-table.md is what ``reconcile`` says,
and every row, built on disk, behaves that way through the real commands."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import checkpoint_file, ledger_entries, resign, snapshot
from state import clock
from workflow.reconcile import ACTIONS, BEGUN, DECIDED, MAY_HAVE, STATUSES, Evidence, cell_text, reconcile, rows

DOC = Path(__file__).resolve().parents[1] / "docs" / "decision-table.md"
KEY = "dt-1"
SERVICE = "http://127.0.0.1:9/publish"  # recorded only: nothing is ever sent to it here


def _doc_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0] in STATUSES:
            rows.append(cells)
    return rows


def _evidence(cells: list[str], begun: str | None = None) -> Evidence:
    """The row's evidence; an ``effect begun`` of ``yes`` stands for both states (``begun`` picks one)."""
    status, decided, entry, rejection, shown = cells[:5]
    begun = None if shown == "-" else begun or ("publishing" if shown == "yes" else shown)
    return Evidence(status, None if decided == "-" else decided, entry == "yes", rejection == "yes", begun=begun)


#: Every combination with nothing begun, then every one with an effect begun (never with an entry).
PLAIN = [Evidence(s, d, e, j) for s in STATUSES for d in DECIDED for e in (False, True) for j in (False, True)]
EVERY = PLAIN + [Evidence(s, d, False, j, begun=b) for s in STATUSES for d in DECIDED for j in (False, True)
                 for b in BEGUN[1:]]
ROWS = rows()


def _cells(ev: Evidence) -> list[str]:
    return [cell_text(ev, a) for a in ACTIONS]


def test_the_documented_table_has_every_row_once():
    assert sorted(map(repr, map(_evidence, _doc_rows()))) == sorted(map(repr, ROWS))
    assert len(set(map(repr, ROWS))) == len(ROWS) and set(map(repr, PLAIN)) <= set(map(repr, ROWS))


def test_a_row_with_an_effect_begun_is_printed_only_where_it_changes_a_cell():
    """The rows left out say nothing new: the same cells as the row with nothing begun (or, for
    in_doubt, as the publishing row standing for both)."""
    shown = set(map(repr, ROWS))
    for ev in EVERY:
        if ev.begun is None or repr(ev) in shown:
            continue
        plain = Evidence(ev.status, ev.decided, ev.entry, ev.rejection)
        both = Evidence(ev.status, ev.decided, ev.entry, ev.rejection, begun="publishing")
        assert _cells(ev) in (_cells(plain), _cells(both)) and (
            _cells(ev) == _cells(plain) or repr(both) in shown), ev
    assert not any(ev.entry and ev.begun for ev in ROWS)


@pytest.mark.parametrize("cells", _doc_rows(), ids=lambda c: "-".join(c[:5]))
def test_every_documented_cell_is_what_reconcile_says(cells):
    for begun in (("publishing", "in_doubt") if cells[4] == "yes" else (None,)):
        assert cells[5:] == _cells(_evidence(cells, begun))


def test_the_rules_hold_in_every_cell():
    """Stated independently of the table: an executed action is never cancelled, a rejected one
    never executed, a recorded decision never changed, an overdue request never newly approved."""
    for ev in EVERY:
        for overdue in (False, True):
            e = Evidence(ev.status, ev.decided, ev.entry, ev.rejection, overdue, ev.begun)
            approve, reject = reconcile(e, "approve"), reconcile(e, "reject")
            if e.entry:
                assert reject.kind == "refuse" and reconcile(e, "expire").kind == "skip"
            if e.rejection or e.status in ("cancelled", "expired"):
                assert approve.kind in ("refuse", "unchanged") and approve.kind != "run"
            if e.decided == "approved":
                assert reject.kind == "refuse"
            if e.decided == "rejected" and not e.rejection:
                assert approve.kind == "refuse"
            if overdue and e.decided is None and not e.entry:
                assert approve.kind == "refuse"
            if e.entry and e.rejection:
                assert {approve.kind, reject.kind} == {"refuse"}
                assert reconcile(e, "doctor").kind == "finding"
            if e.begun in MAY_HAVE:  # it may have happened: never rejected, expired, cancelled or failed
                assert reject.kind == "refuse" and reconcile(e, "expire").kind == "skip"
                assert reconcile(e, "fail").kind == "refuse"
                assert reconcile(e, "doctor").kind == "finding"
            fail = reconcile(e, "fail")
            if e.entry:  # an executed action never ends failed: refused, or (approved, open) completed
                assert fail.kind == "refuse" or (fail.kind == "complete" and e.decided == "approved"
                                                 and e.status in ("waiting_for_approval", "budget_exceeded")
                                                 and not e.rejection)
            if fail.kind == "complete":
                assert e.entry
            if fail.kind == "run":  # only where no effect can have happened, after an approval
                assert not e.entry and e.begun in (None, "not_sent") and e.decided == "approved"
                assert e.status in ("waiting_for_approval", "budget_exceeded") and not e.rejection


def test_a_reject_is_refused_when_the_effect_was_begun():
    for begun in ("publishing", "in_doubt"):
        for status in ("waiting_for_approval", "budget_exceeded"):
            ev = Evidence(status, "approved", False, False, begun=begun)
            assert reconcile(ev, "reject").cell() == "refuse: begun"
            assert reconcile(ev, "approve").kind == "run"
        # an ended task with an effect begun contradicts rule 1: every decision is refused
        for status in ("cancelled", "expired"):
            for action in ("approve", "reject"):
                assert reconcile(Evidence(status, "rejected", False, False, begun=begun), action).cell() == (
                    "refuse: contradiction")


def test_expire_skips_an_effect_begun_even_overdue():
    for begun in ("publishing", "in_doubt"):
        for decided in DECIDED:
            ev = Evidence("waiting_for_approval", decided, False, False, overdue=True, begun=begun)
            assert reconcile(ev, "expire").kind == "skip", ev
    assert reconcile(Evidence("waiting_for_approval", None, False, False, overdue=True), "expire").kind == "expire"


def test_doctor_says_resume_for_publishing_and_settle_for_in_doubt():
    ev = Evidence("waiting_for_approval", "approved", False, False, begun="publishing")
    assert reconcile(ev, "doctor").cell() == "finding: effect_unconfirmed → approve"
    ev = Evidence("waiting_for_approval", "approved", False, False, begun="in_doubt")
    assert reconcile(ev, "doctor").cell() == "finding: effect_in_doubt → settle"
    ev = Evidence("cancelled", "rejected", False, False, begun="in_doubt")
    assert reconcile(ev, "doctor").cell() == "finding: cancelled_with_intent → human"
    # a ledger entry makes the intent irrelevant
    ev = Evidence("waiting_for_approval", "approved", True, False, begun="publishing")
    assert reconcile(ev, "doctor").cell() == "finding: executed_not_recorded → approve"


# -- every row through the real commands ---------------------------------------------------------

def _build(cli, state_dir: Path, ev: Evidence) -> None:
    """A task whose checkpoint says ``ev.status`` / ``ev.decided`` (re-signed, as after a crash, a
    restore or a hand edit by someone with the key) with the evidence files ``ev`` names."""
    from state.files import rejections
    from state.schema import Decision
    from state.files.store import Store
    from state.files.ledger import Ledger

    assert cli("start", "--key", KEY, "--title", "T", "--draft", "Row draft.").code == 0
    path = checkpoint_file(state_dir, KEY)
    cp = json.loads(path.read_text(encoding="utf-8"))
    call = cp["pending"][0]
    from state.schema import arguments_sha256

    decision = None if ev.decided is None else Decision(
        decision=ev.decided, by="tester", at=clock.now_iso(), reason=None, call_id=call["call_id"],
        tool=call["tool"], arguments_sha256=arguments_sha256(call["arguments"]), channel="blog", always=False,
        source="human")
    rec = decision.model_dump(mode="json") if decision else None
    # the attempt is bound into the checkpoint (not_sent: and then settled as not done)
    bound = [{"idempotency_key": KEY, "attempt": 1, "request_key": "a" * 32, "sent_at": clock.now_iso(),
              "window_ends": clock.now_iso()}] if ev.begun else []
    resign(state_dir, path, lambda d: d.update(status=ev.status, decision=rec, decisions=[rec] if rec else [],
                                               **({"service": SERVICE, "effects": bound} if ev.begun else {})))
    store = Store(state_dir)
    if ev.begun:  # the intent the gate writes before its request (a settlement for not_sent)
        from state.records import EffectIntent, Settlement

        store.intent_record(EffectIntent(
            idempotency_key=KEY, attempt=1, task_id=KEY, channel="blog", call_id=call["call_id"],
            action="publish_draft", content_sha256=cp["content_sha256"], request_key="a" * 32, service=SERVICE,
            deduplicates=ev.begun != "in_doubt", at=clock.now_iso()))
        if ev.begun == "not_sent":
            store.settlement_record(Settlement(idempotency_key=KEY, attempt=1, task_id=KEY, by="tester",
                                               at=clock.now_iso(), source="human"))
    if ev.entry:
        Ledger(store.ledger_dir).record(key=KEY, task_id=KEY, action="publish_draft", title="T",
               content_sha256=cp["content_sha256"])
    if ev.rejection:
        rejections.record(store, KEY, cp["content_sha256"], decision if ev.decided == "rejected" else Decision(
            decision="rejected", by="tester", at=clock.now_iso(), reason=None, call_id=call["call_id"],
            tool=call["tool"], arguments_sha256=arguments_sha256(call["arguments"]), channel="blog", always=False,
            source="human"))


PHRASES = {"conflict": "disagree", "inconsistent": "but records the decision",
           "contradiction": "evidence says otherwise",
           "no_entry": "has no entry",
           "executed": "executed", "rejected": "rejected", "decided": "already recorded",
           "expired": "expired", "begun": "may have happened", "undecided": "waits for a decision",
           "failed": "failed"}

#: Every row and action, in time and (where it differs) overdue; an approve of an effect begun is
#: left out: it runs the gate against the service (the gate's own tests drive it against a real one).
CASES = [(ev, a, o) for ev in ROWS for a in ACTIONS for o in (False, True)
         if (not o or cell_text(ev, a) != reconcile(ev, a).cell())
         and not (ev.begun and reconcile(ev, a).kind == "run")]


@pytest.mark.parametrize("ev,action,overdue", CASES,
                         ids=lambda v: v if isinstance(v, str) else (
                             f"{v.status}-{v.decided}-{'E' if v.entry else 'e'}{'R' if v.rejection else 'r'}"
                             + (f"-{v.begun}" if v.begun else "")
                             if isinstance(v, Evidence) else ("overdue" if v else "in-time")))
def test_every_row_behaves_as_its_cell_says(cli, state_dir, monkeypatch, ev, action, overdue):
    _build(cli, state_dir, ev)
    if overdue:
        monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=2)))
    verdict = reconcile(Evidence(ev.status, ev.decided, ev.entry, ev.rejection, overdue, ev.begun), action)
    before = snapshot(state_dir)
    entries_before = len(ledger_entries(state_dir))
    if action in ("approve", "reject", "fail"):
        r = (cli("fail", "--task", KEY, "--by", "tester", "--reason", "the service is gone", "--json")
             if action == "fail" else cli("resume", "--task", KEY, "--decision", action, "--json"))
        if verdict.kind == "refuse":
            r.assert_stopped()
            assert PHRASES[verdict.code] in r.err, r.err
            assert snapshot(state_dir) == before
        elif verdict.kind == "unchanged":
            assert r.code == 0, r.err
            assert snapshot(state_dir) == before
        elif verdict.kind == "complete":  # fail of an approved call that executed: it stands
            assert action == "fail" and r.code == 0 and r.json()["status"] == "completed", r.err
            assert len(ledger_entries(state_dir)) == entries_before == 1
        else:
            assert verdict.kind == "run" and r.code == 0, r.err
            status = r.json()["status"]
            assert status == {"approve": "completed", "reject": "cancelled", "fail": "failed"}[action]
            assert len(ledger_entries(state_dir)) == (1 if action == "approve" else entries_before)
    elif action == "expire":
        r = cli("expire", "--json")
        assert r.code == 0, r.err
        expired = r.json()["expired"]
        assert expired == ([KEY] if verdict.kind == "expire" else []), verdict
        if verdict.kind == "skip":
            assert snapshot(state_dir) == before
    else:
        r = cli("doctor", "--json")
        mine = [f for f in json.loads(r.out)["findings"] if f["task_id"] == KEY]
        if verdict.kind == "ok":
            assert r.code == 0 and mine == [], r.out
        else:
            assert r.code == 1 and [f["kind"] for f in mine] == [verdict.code], r.out
            if verdict.action == "settle":
                from state.files.store import Store

                call = Store(state_dir).intent_get(KEY).call_id
                assert mine[0]["action"].endswith(f"python run.py settle --task {KEY} --call {call} "
                                                  "--outcome published|not-published --by NAME")
                assert SERVICE in mine[0]["detail"]
            elif verdict.action:  # the resume first (an effect begun: then the way out if it cannot finish)
                assert mine[0]["action"].startswith(f"python run.py resume --task {KEY} --decision {verdict.action}")
            elif verdict.code == "cancelled_with_intent" and ev.status == "failed" and ev.decided == "approved" \
                    and not ev.rejection:  # a fail that landed while the effect was out
                assert mine[0]["action"].startswith("a human looks at the service"), mine[0]
                assert f"python run.py settle --task {KEY} --call " in mine[0]["action"], mine[0]
            else:
                assert mine[0]["action"].startswith("a human must check")
        assert snapshot(state_dir) == before
