"""The decision table: every cell as printed in docs/decision-table.md is what ``reconcile`` says,
and every row, built on disk, behaves that way through the real commands."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import checkpoint_file, ledger_entries, resign, snapshot
from state import clock
from workflow.reconcile import ACTIONS, DECIDED, STATUSES, Evidence, cell_text, reconcile

DOC = Path(__file__).resolve().parents[1] / "docs" / "decision-table.md"
KEY = "dt-1"


def _doc_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in STATUSES:
            rows.append(cells)
    return rows


def _evidence(cells: list[str]) -> Evidence:
    status, decided, entry, rejection = cells[:4]
    return Evidence(status, None if decided == "-" else decided, entry == "yes", rejection == "yes")


ROWS = [Evidence(s, d, e, j) for s in STATUSES for d in DECIDED for e in (False, True) for j in (False, True)]


def test_the_documented_table_has_every_row_once():
    assert sorted(map(repr, map(_evidence, _doc_rows()))) == sorted(map(repr, ROWS))


@pytest.mark.parametrize("cells", _doc_rows(), ids=lambda c: "-".join(c[:4]))
def test_every_documented_cell_is_what_reconcile_says(cells):
    ev = _evidence(cells)
    assert cells[4:] == [cell_text(ev, a) for a in ACTIONS]


def test_the_rules_hold_in_every_cell():
    """Stated independently of the table: an executed action is never cancelled, a rejected one
    never executed, a recorded decision never changed, an overdue request never newly approved."""
    for ev in ROWS:
        for overdue in (False, True):
            e = Evidence(ev.status, ev.decided, ev.entry, ev.rejection, overdue)
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
    resign(state_dir, path, lambda d: d.update(status=ev.status, decision=rec,
                                               decisions=[rec] if rec else []))
    store = Store(state_dir)
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
           "expired": "expired"}

CASES = [(ev, a, o) for ev in ROWS for a in ACTIONS for o in (False, True)
         if not o or cell_text(ev, a) != reconcile(ev, a).cell()]


@pytest.mark.parametrize("ev,action,overdue", CASES,
                         ids=lambda v: v if isinstance(v, str) else (
                             f"{v.status}-{v.decided}-{'E' if v.entry else 'e'}{'R' if v.rejection else 'r'}"
                             if isinstance(v, Evidence) else ("overdue" if v else "in-time")))
def test_every_row_behaves_as_its_cell_says(cli, state_dir, monkeypatch, ev, action, overdue):
    _build(cli, state_dir, ev)
    if overdue:
        monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=2)))
    verdict = reconcile(Evidence(ev.status, ev.decided, ev.entry, ev.rejection, overdue), action)
    before = snapshot(state_dir)
    entries_before = len(ledger_entries(state_dir))
    if action in ("approve", "reject"):
        r = cli("resume", "--task", KEY, "--decision", action, "--json")
        if verdict.kind == "refuse":
            r.assert_stopped()
            assert PHRASES[verdict.code] in r.err, r.err
            assert snapshot(state_dir) == before
        elif verdict.kind == "unchanged":
            assert r.code == 0, r.err
            assert snapshot(state_dir) == before
        else:
            assert verdict.kind == "run" and r.code == 0, r.err
            status = r.json()["status"]
            assert status == ("completed" if action == "approve" else "cancelled")
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
            if verdict.action:
                assert mine[0]["action"] == f"python run.py resume --task {KEY} --decision {verdict.action}"
            else:
                assert mine[0]["action"].startswith("a human must check")
        assert snapshot(state_dir) == before
