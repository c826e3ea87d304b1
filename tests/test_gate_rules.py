"""The gate never takes an approval rule's word alone: a call runs without a human's approval on
record only on a channel its tool declares private (``effect_tool(private_channels=…)``), and only
when the rule lets it. Each case is a way a rule or an agent could have let an effect run unasked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, handoff
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from state.files.store import Store
from workflow import Application, Approve, Effect, Refused, decide, effect_tool, start

SENT: list[str] = []
CONTENT = {"to": "ana", "body": "hi"}


@pytest.fixture(autouse=True)
def _nothing_sent():
    SENT.clear()
    yield
    SENT.clear()


def _send(effect: Effect, to: str, body: str) -> dict:
    """Send a message.

    Args:
        to: Who gets it.
        body: The message.
    """
    SENT.append(effect.idempotency_key)
    return {"ok": True}


def _respond(first: list[Any]):
    def respond(call: Any) -> ModelStep:
        last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return ModelStep(output=[assistant_message(f"answered: {last['output']}")])
        return ModelStep(output=list(first))
    return respond


def _app(tools: list[Any], first: list[Any], **agent: Any) -> Application:
    return Application(
        build_agent=lambda model: Agent(name="Sender", instructions="Send it.", tools=tools, model=model, **agent),
        offline_model=lambda: ScriptedModel([ModelStep.respond(_respond(first)) for _ in range(8)]))


def _start(store: Store, app: Application) -> Any:
    return asyncio.run(start(store, app, task_id="t-1", title="T", content=CONTENT, input="Send it.",
                             channels=["mail"]))


@pytest.mark.parametrize("rule", [
    lambda ctx, args, call_id: ctx is None,  # True for the start-time probes, False for real calls
    lambda ctx, args, call_id: call_id == "probe",
], ids=["context-probe", "call-id-probe"])
def test_a_rule_that_fools_the_probes_lets_nothing_run_unasked(state_dir, rule):
    tool = effect_tool(_send, name="send", needs_approval=rule)
    store = Store(state_dir)
    with pytest.raises(Refused) as refused:
        _start(store, _app([tool], [function_call("send", CONTENT, call_id="c1")]))
    assert refused.value.code == "integrity" and "without a human approval on record" in str(refused.value)
    assert SENT == [] and store.ledger_get("t-1") is None and not store.exists("t-1")


def test_an_asynchronous_rule_answering_false_lets_nothing_run_unasked(state_dir):
    async def never(ctx: Any, args: Any, call_id: str) -> bool:
        return False

    tool = effect_tool(_send, name="send", needs_approval=never)
    store = Store(state_dir)
    with pytest.raises(Refused):
        _start(store, _app([tool], [function_call("send", CONTENT, call_id="c1")]))
    assert SENT == [] and store.ledger_get("t-1") is None


def test_an_ungated_copy_of_the_tool_behind_a_handoff_object_is_found_at_start(state_dir):
    """``handoff(agent)`` hides its agent behind a weak reference; the walk follows it, so a copy
    of the gated tool with ``needs_approval=False`` there is refused before anything runs."""
    copy = effect_tool(_send, name="send", needs_approval=False)
    hidden = Agent(name="Hidden", instructions="Send it.", tools=[copy])
    app = _app([effect_tool(_send, name="send")], [function_call("transfer_to_hidden", {}, call_id="h1")],
               handoffs=[handoff(hidden)])
    store = Store(state_dir)
    with pytest.raises(Refused) as refused:
        _start(store, app)
    assert refused.value.code == "agent" and "two tools named 'send'" in str(refused.value)
    assert SENT == [] and not (state_dir / "ledger").exists()


def test_a_tool_declared_needs_approval_false_still_needs_an_approval_on_record(state_dir):
    tool = effect_tool(_send, name="send", needs_approval=False)  # check_agent refuses it too
    store = Store(state_dir)
    with pytest.raises(Refused):
        _start(store, _app([tool], [function_call("send", CONTENT, call_id="c1")]))
    assert SENT == []


def test_the_gate_asks_the_rule_with_the_calls_own_id(state_dir):
    """A rule that depends on the call ID (True for every real ID): the SDK pauses, a human
    approves, and the gate, asking with the same ID, checks that approval (ledger: ``human``)."""
    tool = effect_tool(_send, name="send", needs_approval=lambda ctx, args, call_id: call_id != "",
                       private_channels={"mail"})
    app = _app([tool], [function_call("send", CONTENT, call_id="c1")])
    store = Store(state_dir)
    assert _start(store, app).status == "waiting_for_approval"
    assert asyncio.run(decide(store, app, "t-1", Approve(), by="ana")).status == "completed"
    assert SENT == ["t-1"] and store.ledger_get("t-1").approval == "human"


def test_a_private_channel_runs_without_a_human_when_the_rule_lets_it(state_dir):
    tool = effect_tool(_send, name="send", needs_approval=lambda ctx, args, call_id: call_id == "probe",
                       private_channels={"mail"})
    app = _app([tool], [function_call("send", CONTENT, call_id="c1")])
    store = Store(state_dir)
    with pytest.raises(Refused):  # nothing paused: the run ended without asking, nothing saved
        _start(store, app)
    assert SENT == ["t-1"] and store.ledger_get("t-1").approval == "not_needed"


def test_a_rule_answering_none_on_a_private_channel_needs_an_approval_on_record(state_dir):
    """On a private channel only an answer of exactly False lets a call run without a human: a
    rule that says True to the start-time probes and None (not False) to the real call lets the
    SDK run it unpaused, and the gate, asking the same rule, refuses it with nothing sent."""
    tool = effect_tool(_send, name="send", needs_approval=lambda ctx, args, call_id: True if call_id == "probe"
                       else None, private_channels={"mail"})
    store = Store(state_dir)
    with pytest.raises(Refused) as refused:
        _start(store, _app([tool], [function_call("send", CONTENT, call_id="c1")]))
    assert refused.value.code == "integrity" and "without a human approval on record" in str(refused.value)
    assert SENT == [] and store.ledger_get("t-1") is None


def test_a_second_approval_with_edits_of_any_content_is_a_fresh_decision(state_dir):
    """Approved with edits, the model asks for something else; the reviewer edits again (not
    refused as another action's call: the content's arguments are the task's, whatever they are
    named) and the model's call carrying the second edits runs, once."""
    turns = iter([
        [function_call("send", CONTENT, call_id="c1")],
        [function_call("send", {**CONTENT, "to": "someone else"}, call_id="c2")],
        [function_call("send", {**CONTENT, "to": "bo"}, call_id="c3")],
    ])

    def respond(call: Any) -> ModelStep:
        step = next(turns, None)
        return ModelStep(output=step) if step else ModelStep(output=[assistant_message("done")])

    tool = effect_tool(_send, name="send")
    app = Application(
        build_agent=lambda model: Agent(name="Sender", instructions="Send it.", tools=[tool], model=model),
        offline_model=lambda: ScriptedModel([ModelStep.respond(respond) for _ in range(8)]))
    store = Store(state_dir)
    _start(store, app)
    cp = asyncio.run(decide(store, app, "t-1", Approve(edits={"to": "ana2"}), by="ana"))
    assert cp.status == "waiting_for_approval" and [p["call_id"] for p in cp.pending] == ["c2"]
    cp = asyncio.run(decide(store, app, "t-1", Approve(edits={"to": "bo"}), by="ana", call_id="c2"))
    assert cp.status == "completed" and SENT == ["t-1"]


def test_in_a_task_whose_model_proposes_the_content_only_a_private_channel_runs_unasked(state_dir):
    """A task started without content, a call on each of two channels in one turn: the call on the
    tool's private channel (its rule lets it) runs the arguments the model proposed with no human,
    as declared (ledger ``not_needed``); the call on the public channel waits, and runs only once a
    human approved it as shown (ledger ``human``)."""
    posted: list[tuple[str, str, str]] = []

    def post(effect: Effect, channel: str, to: str, body: str) -> dict:
        """Post a message.

        Args:
            channel: Where.
            to: Who gets it.
            body: The message.
        """
        posted.append((effect.idempotency_key, to, body))
        return {"ok": True}

    tool = effect_tool(post, name="post", private_channels={"mail"},
                       needs_approval=lambda ctx, args, call_id: call_id == "probe" or args.get("channel") != "mail")
    app = _app([tool], [function_call("post", {"channel": "mail", "to": "ana", "body": "model's draft"}, call_id="c1"),
                        function_call("post", {"channel": "team", "to": "ops", "body": "model's news"}, call_id="c2")])
    store = Store(state_dir)
    cp = asyncio.run(start(store, app, task_id="t-1", title="T", input="Post it.", channels=["mail", "team"]))
    assert cp.status == "waiting_for_approval" and [p["call_id"] for p in cp.pending] == ["c2"]
    assert posted == [("t-1#mail", "ana", "model's draft")]
    assert store.ledger_get("t-1#mail").approval == "not_needed" and store.ledger_get("t-1#team") is None
    done = asyncio.run(decide(store, app, "t-1", Approve(), by="ana", call_id="c2"))
    assert done.status == "completed"
    assert posted == [("t-1#mail", "ana", "model's draft"), ("t-1#team", "ops", "model's news")]
    assert store.ledger_get("t-1#team").approval == "human"
