"""The effect gate (``workflow.effect.effect_tool``) on a tool of its own, called as the SDK calls it.

The publisher's ``publish_draft`` is declared through the same gate; tests/test_second_defences.py
holds the checks it shares with any tool (content, approval on record, rejection record). Here:
what is new for *any* tool — the ``Effect`` parameter hidden from the model, one run of the
function per idempotency key with repeats answered by the first result, ledger entries with and
without a result, an asynchronous function — and that declaring the publisher's tool through the
gate left its fingerprint (what a saved checkpoint is compared with) as it was.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from conftest import ledger_entries, plant_record

KEY, TITLE, DRAFT, AT = "eg-1", "Title", "Body.", "2030-01-01T00:00:00+00:00"
RUNS: list[Any] = []


def _deliver() -> Any:
    """A tool of another application: its function counts its runs (a real effect, outside us)."""
    from workflow import Effect, effect_tool

    @effect_tool(done="delivered")
    def deliver(effect: Effect, title: str, body: str) -> dict:
        """Deliver a note.

        Args:
            title: Its title.
            body: Its text.
        """
        RUNS.append(effect)
        return {"delivered": len(RUNS), "key": effect.idempotency_key}

    return deliver


@pytest.fixture
def task(cli, state_dir):
    """A waiting task whose content is ``{"title", "body"}`` (started by the publisher's command
    line; its one pending call is what the tests approve): ``(store, checkpoint, call_id)``."""
    from state.store import FileStore

    RUNS.clear()
    r = cli("start", "--key", KEY, "--title", TITLE, "--draft", DRAFT, "--json")
    assert r.code == 0, r.err
    store = FileStore(state_dir)
    cp = store.load(KEY)
    return store, cp, cp.pending[0].call_id


def _approve(store: Any, cp: Any, call_id: str, decision: str = "approved") -> Any:
    from state.schema import Decision

    d = Decision(decision=decision, by="alice", at=AT, reason=None, call_id=call_id, tool="deliver",
                 arguments_sha256="0" * 64, channel=cp.channels[0], always=False, source="human")
    return store.save_revision(cp, failpoint="checkpoint:decision", decisions=[*cp.decisions, d],
                               event=("decision_recorded", {}))


def _invoke(tool: Any, store: Any, cp: Any, call_id: str, **arguments: Any) -> Any:
    """Call ``tool`` as the SDK does for an approved call, with the run context the engine builds."""
    from agents.tool_context import ToolContext

    from state import open_stores

    context = {"task_id": cp.task_id, "idempotency_key": cp.task_id, "content_sha256": cp.content_sha256,
               "channels": list(cp.channels), "store": open_stores.token_for(store)}
    args = json.dumps({"title": TITLE, "body": DRAFT, **arguments})
    ctx = ToolContext(context=context, tool_name=tool.name, tool_call_id=call_id, tool_arguments=args)
    return asyncio.run(tool.on_invoke_tool(ctx, args))


def test_the_effect_parameter_is_hidden_from_the_model_and_the_docstring_describes_the_tool():
    tool = _deliver()
    assert tool.name == "deliver" and tool.description == "Deliver a note."
    assert sorted(tool.params_json_schema["properties"]) == ["body", "title"]
    assert tool.needs_approval is True
    from workflow.effect import is_effectful

    assert is_effectful(tool)


def test_the_function_runs_once_per_key_and_a_repeat_answers_with_the_first_result(task, state_dir):
    store, cp, call_id = task
    tool = _deliver()
    cp = _approve(store, cp, call_id)
    first = json.loads(_invoke(tool, store, cp, call_id))
    assert first == {"delivered": 1, "key": KEY} and len(RUNS) == 1
    effect = RUNS[0]
    assert (effect.idempotency_key, effect.task_id, effect.channel, effect.call_id, effect.action) == (
        KEY, KEY, "blog", call_id, "deliver")
    [entry] = ledger_entries(state_dir)
    assert entry["action"] == "deliver" and entry["result"] == first and entry["approval"] == "human"
    assert entry["title"] == TITLE  # the task's label: the tool names no title of its own
    again = json.loads(_invoke(tool, store, cp, call_id))
    assert again == first and len(RUNS) == 1  # the first result; the function did not run again
    assert len(ledger_entries(state_dir)) == 1


def test_no_approval_on_record_runs_nothing(task, state_dir):
    from state.errors import Refused

    store, cp, call_id = task
    with pytest.raises(Refused, match="deliver for task eg-1 on blog ran without a human approval on "
                                      "record for this call .*nothing was delivered"):
        _invoke(_deliver(), store, cp, call_id)
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_content_other_than_the_tasks_runs_nothing(task, state_dir):
    from state.errors import Refused

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    with pytest.raises(Refused, match="differs from the content that was started and approved"):
        _invoke(_deliver(), store, cp, call_id, body="Another body.")
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_a_tool_that_is_not_the_tasks_action_runs_nothing(task, state_dir):
    """The run context names the task's action (the tool the reviewer was shown): another gated
    tool of the agent, even approved on record under the same call ID, never runs."""
    from agents.tool_context import ToolContext

    from state import open_stores
    from state.errors import Refused

    store, cp, call_id = task
    cp = _approve(store, cp, call_id)
    context = {"task_id": KEY, "idempotency_key": KEY, "content_sha256": cp.content_sha256,
               "channels": ["blog"], "action": "publish_draft", "store": open_stores.token_for(store)}
    args = json.dumps({"title": TITLE, "body": DRAFT})
    tool = _deliver()
    ctx = ToolContext(context=context, tool_name="deliver", tool_call_id=call_id, tool_arguments=args)
    with pytest.raises(Refused, match="deliver for task eg-1 is not the task's action"):
        asyncio.run(tool.on_invoke_tool(ctx, args))
    assert RUNS == [] and ledger_entries(state_dir) == []


def test_an_asynchronous_function_is_gated_the_same_way(task, state_dir):
    from state.errors import Refused
    from workflow import Effect, effect_tool

    @effect_tool
    async def deliver(effect: Effect, title: str, body: str) -> str:
        """Deliver a note."""
        RUNS.append(effect)
        return "delivered"

    store, cp, call_id = task
    with pytest.raises(Refused, match="without a human approval on record"):
        _invoke(deliver, store, cp, call_id)
    cp = _approve(store, cp, call_id)
    assert _invoke(deliver, store, cp, call_id) == "delivered"
    assert _invoke(deliver, store, cp, call_id) == "delivered" and len(RUNS) == 1


def test_ledger_entries_without_a_result_stay_readable_and_results_round_trip(tmp_path):
    """An entry written before results existed (and the publisher's, whose function returns None)
    has no ``result`` field; one with a result keeps it exactly."""
    from state.files.ledger import Ledger

    ledger = Ledger(tmp_path / "ledger")
    old = {"idempotency_key": "o-1", "task_id": "o-1", "action": "publish_draft", "title": "T",
           "content_sha256": "a" * 64, "published_at": AT}
    plant_record(tmp_path, "ledger_entry", old)  # signed, without a result field
    assert ledger.get("o-1").result is None
    entry, created = ledger.record(key="n-1", task_id="n-1", title="T", content_sha256="b" * 64,
                                   channel="email", approval="human", action="send_email",
                                   result={"sent_to": "ana", "n": [1, 2]})
    assert created and ledger.get("n-1").result == {"sent_to": "ana", "n": [1, 2]}
    again, created = ledger.record(key="n-1", task_id="n-1", title="T", content_sha256="b" * 64,
                                   channel="email", approval="human", action="send_email", result="other")
    assert not created and again.result == {"sent_to": "ana", "n": [1, 2]}  # the first, never rewritten
    ledger.record(key="p-1", task_id="p-1", action="publish_draft", title="T", content_sha256="c" * 64, channel="blog",
                  approval="human")
    assert "result" not in json.loads(ledger.path_for("p-1").read_text(encoding="utf-8"))


#: ``workflow.agent_check.describe`` of the publisher's tool before it was declared through the gate:
#: a checkpoint saved then is compared with this (drift), so it must not change.
PUBLISH_DRAFT_FINGERPRINT = {
    "position": 0,
    "function": "tools.publish.publish_draft",
    "needs_approval": "callable:tools.publish.needs_publish_approval",
    "description_sha256": "5e8d3e82efbae4cbe3331c9dca293fec8ea23a90815c90b11e77c96b28901677",
    "schema_sha256": "6ff02359cc2919b98e761abf5966235af3bde7be1b4179b4bab317261a0d2722",
}


def test_publish_draft_through_the_gate_keeps_the_fingerprint_saved_checkpoints_hold():
    from agent.models import build_offline_model
    from agent.publisher import build_agent
    from workflow.agent_check import describe

    tool = describe(build_agent(build_offline_model()))["tools"]["publish_draft"]
    assert tool == PUBLISH_DRAFT_FINGERPRINT


def test_an_effect_tool_behind_a_handoff_is_the_action_checked_and_fingerprinted():
    """The run may call any tool of an agent it hands off to (``Agent(handoffs=[...])``): that
    agent's effect tool is the task's action, it is refused without ``needs_approval`` like a tool
    of the top-level agent, and a change to it is drift for a saved checkpoint."""
    import dataclasses

    from agents import Agent

    from state.errors import Refused
    from workflow.agent_check import check_agent, describe, drift, gated_tool

    tool = _deliver()
    worker = Agent(name="Worker", tools=[tool])
    triage = Agent(name="Triage", handoffs=[worker])
    assert gated_tool(triage) is tool
    check_agent(triage)
    assert "deliver" in describe(triage)["tools"]
    quiet = Agent(name="Triage", handoffs=[worker.clone(tools=[dataclasses.replace(tool, needs_approval=False)])])
    with pytest.raises(Refused, match="has an effect but needs_approval is False"):
        check_agent(quiet)
    changed = Agent(name="Triage", handoffs=[worker.clone(tools=[dataclasses.replace(tool, description="x")])])
    assert drift(describe(triage), describe(changed)) == ["tool 'deliver' description changed"]


def test_an_effect_tool_inside_an_agent_used_as_a_tool_is_the_action():
    """``Agent.as_tool``: the nested agent's effect tool is what the run can call, so it is the
    task's action and is checked like the top-level agent's own."""
    import dataclasses

    from agents import Agent

    from state.errors import Refused
    from workflow.agent_check import check_agent, gated_tool

    tool = _deliver()
    worker = Agent(name="Worker", tools=[tool])
    outer = Agent(name="Editor", tools=[worker.as_tool(tool_name="worker", tool_description="Delivers.")])
    assert gated_tool(outer) is tool
    quiet = worker.clone(tools=[dataclasses.replace(tool, needs_approval=False)])
    with pytest.raises(Refused, match="has an effect but needs_approval is False"):
        check_agent(Agent(name="Editor", tools=[quiet.as_tool(tool_name="worker", tool_description="D.")]))


def test_approve_with_edits_that_are_not_argument_values_is_refused_before_anything(tmp_path):
    """``Approve(edits=…)`` becomes the engine's ``Edit(content=…)``: edits of the channel, or
    values that are not JSON strings, numbers or booleans, are refused with one line before the
    store is read (nothing written)."""
    from state.errors import Refused
    from workflow import Approve, decide, open_store

    store = open_store(tmp_path / "state")
    for edits in ({"channel": "news"}, {"subject": [7]}, {"subject": float("nan")}):
        with pytest.raises(Refused, match="the edits must be"):
            asyncio.run(decide(store, None, "t-1", Approve(edits=edits), by="alice"))
    assert not (tmp_path / "state").exists()
