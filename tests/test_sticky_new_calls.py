"""``--always`` followed by a new call of the tool in the next turn, and the call the model makes
after an approved call ran: the new call waits for a human, is never run by a sticky rule no human
gave for it, and ``doctor`` judges the task as waiting (not as a crash or a false alarm).

The model here asks for ``publish_draft`` once more after the first call's output (a real model
may do so); the command line then resumes with the offline model, which ends the run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agents.testing import ModelCall, ModelStep, ScriptedModel, function_call

from conftest import checkpoint_file, ledger_entries, snapshot, start_calls
from agent.models import offline_responder
from state.schema import content_sha256

KEY = "st-1"
TITLE, BODY = "T", "A draft the model asks for twice."


def _asks_again(channel: str | None) -> ScriptedModel:
    """The model: after the tools' outputs of its first turn, one more ``publish_draft`` of the same
    draft (on ``channel``; None: naming none), call_id ``call_again``; otherwise the offline model."""
    def respond(call: ModelCall) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs and items[-1] is outputs[-1] and all(o["call_id"] != "call_again" for o in outputs):
            args: dict[str, Any] = {"title": TITLE, "body": BODY}
            if channel is not None:
                args["channel"] = channel
            return ModelStep(output=[function_call("publish_draft", args, call_id="call_again")])
        return offline_responder(call)

    return ScriptedModel([ModelStep.respond(respond) for _ in range(8)])


def _start(cli, *channels: str) -> dict[str, str]:
    return start_calls(cli, KEY, TITLE, BODY, *channels)


def _decide(state_dir: Path, model: ScriptedModel, **kwargs: Any):
    from agent import application
    from state.store import FileStore

    return asyncio.run(application.decide(FileStore(state_dir), task_id=KEY, by="alice", model=model, **kwargs))


def _doctor_findings(cli) -> list[dict[str, Any]]:
    r = cli("doctor", "--json")
    return r.json()["findings"]


def _no_sticky_rule_in_the_run_state(state_dir: Path) -> None:
    cp = json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))
    context = json.loads(cp["run_state"])["context"]
    for entry in context.get("function_tool_approvals", []):
        decision = entry["decision"]
        assert isinstance(decision["approved"], list) and isinstance(decision["rejected"], list)
        assert "sticky_scope" not in decision


@pytest.mark.parametrize("then", ["approve", "reject"])
def test_always_then_a_new_call_waits_for_a_human(cli, state_dir, then):
    """One channel: approve --always; the model calls publish_draft again in the next turn. The new
    call pauses (no sticky rule in the RunState) and doctor says consistent. Then approve and reject
    both work: the task completes (an executed action is never cancelled) with one ledger entry,
    doctor still consistent, and a repeat changes nothing."""
    _start(cli)
    cp = _decide(state_dir, _asks_again(None), decision="approve", always=True)
    assert cp.status == "waiting_for_approval" and [p.call_id for p in cp.pending] == ["call_again"]
    assert [(d.decision, d.always, d.source) for d in cp.decisions] == [("approved", True, "human")]
    assert len(ledger_entries(state_dir)) == 1  # the first call, executed once
    _no_sticky_rule_in_the_run_state(state_dir)
    assert _doctor_findings(cli) == []
    r = cli("resume", "--task", KEY, "--decision", then, "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "completed"
    assert ("already published" if then == "approve" else "rejected") in task["final_output"]
    assert len(ledger_entries(state_dir)) == 1 and not (state_dir / "rejections").exists()
    assert _doctor_findings(cli) == []
    again = snapshot(state_dir)  # a repeat changes nothing
    r = cli("resume", "--task", KEY, "--decision", then)
    assert r.code == 0, r.err
    assert snapshot(state_dir) == again
    other = {"approve": "reject", "reject": "approve"}[then]  # the other decision is refused
    r = cli("resume", "--task", KEY, "--decision", other)
    r.assert_stopped()
    assert snapshot(state_dir) == again


def test_a_new_call_with_other_content_can_be_rejected(cli, state_dir):
    """After an approval ran, the model asks to publish something else: it cannot be approved,
    but a reject ends the task (completed: the first call executed), never a dead end."""
    _start(cli)

    def respond(call: ModelCall) -> ModelStep:
        last = call.input[-1] if isinstance(call.input, list) else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output" and last["call_id"] != "call_x":
            return ModelStep(output=[function_call("publish_draft", {"title": TITLE, "body": "Other"},
                                                   call_id="call_x")])
        return offline_responder(call)

    cp = _decide(state_dir, ScriptedModel([ModelStep.respond(respond) for _ in range(8)]), decision="approve")
    assert [p.call_id for p in cp.pending] == ["call_x"] and _doctor_findings(cli) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert snapshot(state_dir) == before
    r = cli("resume", "--task", KEY, "--decision", "reject", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert ledger_entries(state_dir)[0]["content_sha256"] == content_sha256(TITLE, BODY)
    assert _doctor_findings(cli) == []


def test_always_on_two_channels_then_a_new_call_waits_and_is_decided(cli, state_dir):
    """Two channels: blog approved with --always (news decided by its sticky rule, recorded); the
    model asks again for news. The new call waits; approving it publishes nothing twice."""
    calls = _start(cli, "blog", "news")
    cp = _decide(state_dir, _asks_again("news"), decision="approve", call_id=calls["blog"], always=True)
    assert cp.status == "waiting_for_approval" and [p.call_id for p in cp.pending] == ["call_again"]
    assert sorted((d.channel, d.source) for d in cp.decisions) == [("blog", "human"), ("news", "sticky")]
    assert sorted(e["idempotency_key"] for e in ledger_entries(state_dir)) == [f"{KEY}#blog", f"{KEY}#news"]
    _no_sticky_rule_in_the_run_state(state_dir)
    assert _doctor_findings(cli) == []
    r = cli("resume", "--task", KEY, "--call", "call_again", "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 2
    assert _doctor_findings(cli) == []


def test_always_after_a_reject_then_a_new_call_on_the_rejected_channel(cli, state_dir):
    """news rejected, then blog approved with --always; the model asks again for news. The new call
    waits: an approve is refused (the rejection record stands), a reject ends the task completed
    (blog executed, never cancelled), news never published."""
    calls = _start(cli, "blog", "news")
    r = cli("resume", "--task", KEY, "--call", calls["news"], "--decision", "reject", "--reason", "no")
    assert r.code == 0, r.err
    cp = _decide(state_dir, _asks_again("news"), decision="approve", call_id=calls["blog"], always=True)
    assert cp.status == "waiting_for_approval" and [p.call_id for p in cp.pending] == ["call_again"]
    assert _doctor_findings(cli) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert "can never be approved" in r.err and snapshot(state_dir) == before
    # the refusal names the call whose reject it is, not the new call nobody decided
    assert f"(call call_again): its channel's content, in call {calls['news']}, was rejected by" in r.err, r.err
    r = cli("resume", "--task", KEY, "--decision", "reject", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == [f"{KEY}#blog"]
    assert _doctor_findings(cli) == []


def test_doctor_after_an_approved_call_ran_and_the_model_asked_again(cli, state_dir):
    """A plain approve ran; the model asked again. The approval is on record, so doctor reports
    nothing (not ``entry_without_approval``), the answered call's decision repeated is a no-op, and
    the new call is approved with one ledger entry in the end."""
    calls = _start(cli)
    cp = _decide(state_dir, _asks_again(None), decision="approve")
    assert cp.status == "waiting_for_approval" and [p.call_id for p in cp.pending] == ["call_again"]
    assert _doctor_findings(cli) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--call", calls["blog"], "--decision", "approve")
    assert r.code == 0, r.err
    assert snapshot(state_dir) == before
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed"
    assert len(ledger_entries(state_dir)) == 1 and _doctor_findings(cli) == []


@pytest.mark.parametrize("sticky", [True, False], ids=["blanket", "sticky_scope"])
def test_a_sticky_rule_in_a_file_is_refused_even_with_an_always_decision_on_record(cli, state_dir, sticky):
    """Our decision path never gives the SDK a sticky rule: one found in a saved RunState (a file
    re-signed with the key) is refused, although a human's --always decision is on record."""
    from conftest import resign

    calls = _start(cli, "blog", "news")
    _decide(state_dir, _asks_again("news"), decision="approve", call_id=calls["blog"], always=True)

    def forge(d: dict[str, Any]) -> None:
        state = json.loads(d["run_state"])
        decision = {"approved": True, "rejected": False} if sticky else {
            "approved": [], "rejected": [], "sticky_scope": "tool"}
        state["context"]["function_tool_approvals"] = [
            {"agent": {"name": "Publisher"}, "tool_key": "publish_draft", "decision": decision}]
        d["run_state"] = json.dumps(state)

    resign(state_dir, checkpoint_file(state_dir, KEY), forge)
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert ("blanket 'approved' decision" if sticky else "approval settings no human recorded") in r.err
    assert snapshot(state_dir) == before and len(ledger_entries(state_dir)) == 2


def test_on_postgresql_a_new_call_after_always_waits_and_doctor_agrees(pg_url, tmp_path, monkeypatch):
    """The same on the database store: the new call waits, doctor (judging each call) reports
    nothing, and a reject ends the task completed with one ledger entry."""
    from conftest import run_in_process
    from agent import application
    from state.store import open_store

    monkeypatch.setenv("HITL_SIGNING_KEY", "pg-tests-signing-key-0123456789abcdef")
    state_dir = tmp_path / "state"

    def cli(*args: str):
        return run_in_process(state_dir, "--store", pg_url, *args)

    r = cli("start", "--key", KEY, "--title", TITLE, "--draft", BODY)
    assert r.code == 0, r.err
    store = open_store(pg_url, str(state_dir))
    cp = asyncio.run(application.decide(store, task_id=KEY, decision="approve", by="alice", always=True,
                                 model=_asks_again(None)))
    assert cp.status == "waiting_for_approval" and [p.call_id for p in cp.pending] == ["call_again"]
    assert cli("doctor", "--json").json()["findings"] == []
    r = cli("resume", "--task", KEY, "--decision", "reject", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert len(cli("ledger", "--json").json()["entries"]) == 1
    assert cli("doctor", "--json").json()["findings"] == []


@pytest.mark.parametrize("channel,channels", [("nope", ()), (123, ()), (["blog"], ()),
                                              ("blog\n  pending: x\u202e", ()), (None, ("blog", "news"))])
def test_a_new_call_on_a_channel_the_task_does_not_have_ends_the_run_there(cli, state_dir, channel,
                                                                            channels):
    """After the first calls ran, the model asks to publish on a channel that is not one of the
    task's (or names none on a task with several). Such a call has no ledger key and no rejection
    record: waiting at it left a task every decision and doctor stopped on with an unexpected
    error. The run ends there instead, judged as finished, the call not run."""
    calls = _start(cli, *channels)

    def respond(call: ModelCall) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs and items[-1] is outputs[-1] and all(o["call_id"] != "call_again" for o in outputs):
            return ModelStep(output=[function_call("publish_draft", {"title": TITLE, "body": BODY,
                                                                     "channel": channel},
                                                   call_id="call_again")])
        return offline_responder(call)

    cp = _decide(state_dir, ScriptedModel([ModelStep.respond(respond) for _ in range(8)]),
                 decision="approve", call_id=next(iter(calls.values())), always=True)
    assert cp.status == "completed" and cp.pending == [] and "which was not run" in cp.final_output
    assert len(ledger_entries(state_dir)) == len(channels or ["blog"])
    assert _doctor_findings(cli) == []
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    assert r.code == 0, r.err
    assert snapshot(state_dir) == before
