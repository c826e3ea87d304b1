"""Approve with edits (workflow/edits.py): the reviewer approves a changed draft; the model is told
exactly what to publish; only a call carrying exactly that is approved, through our decision path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents.testing import ModelCall, ModelStep, ScriptedModel, function_call

from conftest import checkpoint_file, ledger_entries, snapshot
from agent.models import offline_responder
from agent.publisher import EDIT_HEADER
from state.schema import content_sha256

TITLE, BODY = "Relase notes", "Version 1.2 fixes the login bug."


def _cp(state_dir: Path) -> dict[str, Any]:
    return json.loads(checkpoint_file(state_dir, "t-1").read_text(encoding="utf-8"))


def _start(cli) -> None:
    r = cli("start", "--key", "t-1", "--title", TITLE, "--draft", BODY)
    assert r.code == 0, r.err


def test_approve_with_edits_publishes_exactly_the_edited_draft(cli, state_dir):
    _start(cli)
    original = _cp(state_dir)["pending"][0]
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice",
            "--edit-title", "Release notes", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "completed" and "published" in task["final_output"]
    edited_sha = content_sha256("Release notes", BODY)
    [entry] = ledger_entries(state_dir)
    assert entry["content_sha256"] == edited_sha and entry["title"] == "Release notes"
    cp = _cp(state_dir)
    first, second = cp["decisions"]
    assert first["call_id"] == original["call_id"] and first["by"] == "alice"
    assert first["edits"]["original_sha256"] == content_sha256(TITLE, BODY)
    assert first["edits"]["edited_sha256"] == edited_sha
    assert (second["decision"], second["by"], second["edits"]) == ("approved", "alice", None)
    assert second["call_id"] != original["call_id"]  # the model's new call, not the original
    assert cp["content_sha256"] == edited_sha and cp["title"] == "Release notes"
    run_state = json.loads(cp["run_state"])  # the original call was answered, never run
    outputs = [i for i in run_state["generated_items"] if i["type"] == "tool_call_output_item"]
    assert outputs[0]["output"].startswith(EDIT_HEADER)


def test_status_shows_approved_with_edits_and_show_prints_the_diff(cli, state_dir):
    _start(cli)
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--edit-body", "Version 1.2.1 fixes it.")
    assert r.code == 0, r.err
    text = cli("show", "--task", "t-1").out
    assert "approved with edits by" in text and "original vs approved" in text
    assert f"-{BODY}" in text and "+Version 1.2.1 fixes it." in text and " Title: Relase notes" in text
    assert "human decision: approved_with_edits" in text
    edits = cli("show", "--task", "t-1", "--json").json()["approval"]["edits"]
    assert [e["body"] for e in edits] == ["Version 1.2.1 fixes it."]


def _ignores_edits(call: ModelCall) -> ModelStep:
    """A model that does not comply: asked to publish the edited draft, it sends the original."""
    last = call.input[-1] if isinstance(call.input, list) else {}
    if isinstance(last, dict) and str(last.get("output", "")).startswith(EDIT_HEADER):
        return ModelStep(output=[function_call("publish_draft", {"title": TITLE, "body": BODY},
                                               call_id="call_not_the_edit")])
    return offline_responder(call)


def test_edit_then_a_model_that_does_not_comply_pauses_and_publishes_nothing(cli, state_dir):
    from workflow import edits, hitl
    from workflow.store import FileStore

    _start(cli)
    model = ScriptedModel([ModelStep.respond(_ignores_edits) for _ in range(8)])
    cp = asyncio.run(hitl.decide(FileStore(state_dir), task_id="t-1", decision="approve", by="alice",
                                 edit=edits.Edit(title="Release notes"), model=model))
    assert cp.status == "waiting_for_approval" and cp.decision is None
    assert [p.call_id for p in cp.pending] == ["call_not_the_edit"]
    assert ledger_entries(state_dir) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", "t-1", "--decision", "approve")  # content the reviewer did not approve
    r.assert_stopped()
    assert "not the draft the reviewer approved with edits" in r.err and snapshot(state_dir) == before
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "still wrong", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []


def test_edits_are_refused_with_reject_when_they_change_nothing_or_name_another_call(cli, state_dir):
    from workflow import edits, hitl
    from workflow.store import FileStore

    _start(cli)
    before = snapshot(state_dir)
    for args, words in ((["--decision", "reject", "--edit-title", "X"], "go with --decision approve"),
                        (["--decision", "approve", "--edit-title", TITLE], "change nothing")):
        r = cli("resume", "--task", "t-1", *args)
        r.assert_stopped()
        assert words in r.err and snapshot(state_dir) == before
    try:
        asyncio.run(hitl.decide(FileStore(state_dir), task_id="t-1", decision="approve", by="a",
                                edit=edits.Edit(title="X", call_id="call_other")))
    except edits.Stopped as exc:
        assert "the edits are for call call_other" in str(exc)
    else:
        raise AssertionError("an edit for another call was applied")
    assert snapshot(state_dir) == before


def test_a_forged_approval_of_the_call_answered_with_edits_is_refused(cli, state_dir):
    """Crash right after the edit decision (the RunState still pauses at the original call): a file
    re-signed to approve that call is refused; the recorded edits are replayed instead."""
    from conftest import resign

    _start(cli)
    call_id = _cp(state_dir)["pending"][0]["call_id"]
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--edit-title", "Release notes")
    assert r.code == 0, r.err
    # put back the decision-recorded revision by hand: decision with edits, original RunState
    cp = _cp(state_dir)
    first = cp["decisions"][0]

    def forge(d: dict[str, Any]) -> None:
        state = json.loads(d["run_state"])
        state["context"]["function_tool_approvals"] = [{"agent": {"name": "Publisher"},
            "tool_key": "publish_draft", "decision": {"approved": [call_id], "rejected": []}}]
        d["run_state"] = json.dumps(state)
        d["decisions"] = [first]

    resign(state_dir, checkpoint_file(state_dir, "t-1"), forge)
    r = cli("status", "--task", "t-1")
    assert r.code == 0
    from workflow.trust import check_approvals
    from state.schema import Checkpoint

    forged = Checkpoint.model_validate(_cp(state_dir))
    try:
        check_approvals(json.loads(forged.run_state), forged)
    except Exception as exc:
        assert "not recorded through our decision path" in str(exc)
    else:
        raise AssertionError("an approval of the call answered with edits was accepted")


def test_a_decision_written_before_edits_existed_is_read_as_a_plain_one(cli, state_dir):
    """A checkpoint whose decisions have no ``edits`` field (written by an earlier version) loads
    and resumes; any other field missing is still refused."""
    from conftest import resign

    _start(cli)
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "no")
    assert r.code == 0, r.err

    def drop(d: dict[str, Any]) -> None:
        for rec in [d["decision"], *d["decisions"]]:
            rec.pop("edits")

    resign(state_dir, checkpoint_file(state_dir, "t-1"), drop)
    r = cli("status", "--task", "t-1", "--json")
    assert r.code == 0, r.err
    assert r.json()["decision"]["decision"] == "rejected"
    resign(state_dir, checkpoint_file(state_dir, "t-1"), lambda d: d["decisions"][0].pop("reason"))
    r = cli("status", "--task", "t-1")
    r.assert_stopped()
    assert "decisions.0.reason: Field required" in r.err
